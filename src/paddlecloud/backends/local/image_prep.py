"""A local job's container image at Preparing, and its workers' environment from the image's.

    LocalBackend._prepare ──prepare_image(store, launch, say)──▶
        ImageStore.ensure (``backends.images``: pulled once per digest; progress through ``say`` as
        the job's events, "Pulling REF (120 / 480 MiB)", at most every few seconds)
        ─▶ the python3 on the image's PATH (the platform's launcher runs under it: the runtime is
           standard library only) ─▶ ImageRoot (what the sandbox binds) + the image's Env
        ─▶ EnvCache.ensure(requirements, image=ImageRoot) (``envs.py``): the job's runtime image, a
           venv made by that python in the image, with the requirements installed, once per
           (image, requirements)
    LocalBackend._spawn_all ──image_worker_env(base, image env)──▶ the image's variables, then the
        platform's (the image's PATH instead of the host's; no virtualenv)

What cannot work says so at Preparing, with what to change: an image without python3, one whose
Python cannot install the requirements (``envs.py``), a server that runs workers unconfined (an
image is a sandbox's root).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import BackendEvent, JobLaunch
from paddlecloud.backends.images import Image, ImageStore
from paddlecloud.backends.local.envs import EnvBuildError, EnvCache
from paddlecloud.backends.local.gpu_driver import DRIVER_DIR
from paddlecloud.backends.local.sandbox import IMAGE_ROOT, SYSTEM_PATH, ImageRoot
from paddlecloud.core.imageref import parse_image_ref

__all__ = ["ImageRuntimes", "ImageUnusable", "PullReporter", "Runtime", "image_worker_env", "prepare_image"]

_MIB = 2**20
#: the least time between two "Pulling" events of one pull
REPORT_EVERY_S = 3.0

Say = Callable[[BackendEvent], None]


class ImageUnusable(Exception):
    """The image (or the job with it) cannot run here; the message says what to change."""


@dataclass
class PullReporter:
    """``ImageStore.ensure``'s progress as the job's events, at most one per ``every`` seconds."""

    ref: str
    say: Say
    every: float = REPORT_EVERY_S
    clock: Callable[[], float] = time.monotonic
    _last: float = field(default=-1e18, init=False)
    _ended: bool = field(default=False, init=False)

    def __call__(self, done: int, total: int) -> None:
        """One event per ``every`` seconds while bytes arrive, one when they all have, none for a
        pull whose size the registry did not say (``total`` 0: a manifest list's)."""
        if total <= 0 or self._ended:
            return
        now = self.clock()
        if done >= total:
            self._ended = True
        elif now - self._last < self.every:
            return
        self._last = now
        said = f"Pulling {self.ref} ({done // _MIB} / {total // _MIB} MiB)"
        self.say(BackendEvent("Normal", "Pulling", said))


def _env(image: Image) -> dict[str, str]:
    return dict(e.split("=", 1) for e in image.env if "=" in e)


def find_python(image: Image) -> str:
    """The python3 the image's PATH finds (a path inside the image), in the part of the image a
    sandbox sees (``sandbox.IMAGE_ROOT``: usr, opt and the merged-usr links)."""
    path = _env(image).get("PATH", SYSTEM_PATH)
    for folder in path.split(os.pathsep):
        top = folder.strip("/").split("/")[0]
        if (
            ".." not in folder.split("/")  # never a look outside the image's root
            and folder.startswith("/")
            and top in IMAGE_ROOT
            and os.path.lexists(image.rootfs / folder.lstrip("/") / "python3")
        ):
            return f"{folder.rstrip('/')}/python3"
    raise ImageUnusable(
        f"{image.ref} has no python3 on its PATH ({path}) under /usr or /opt: the platform's launcher "
        "runs under the image's Python 3; use an image that has one there"
    )


def prepare_image(store: ImageStore, launch: JobLaunch, say: Say) -> tuple[ImageRoot, tuple[str, ...]]:
    """``launch.image`` pulled and checked: what the sandbox needs and the image's Env."""
    assert launch.image is not None
    ref = parse_image_ref(launch.image)
    started = time.monotonic()
    say(BackendEvent("Normal", "Pulling", f"Pulling {ref}"))
    image = store.ensure(ref, launch.image_auth, PullReporter(str(ref), say), holder=launch.key)
    try:
        python = find_python(image)
    except ImageUnusable:
        store.release(image.rootfs, launch.key)
        raise
    took = time.monotonic() - started
    say(BackendEvent("Normal", "Pulled", f"{ref} is {image.digest[:19]}… (ready in {took:.1f} s)"))
    return ImageRoot(image.rootfs, python), image.env


@dataclass(frozen=True)
class Runtime:
    """A job's image, pulled and checked, and its runtime environment in it."""

    image: ImageRoot
    #: the image's Env ("NAME=value" entries)
    env: tuple[str, ...]
    #: the venv the image's Python made, with the package's requirements (``envs.py``)
    venv: Path


@dataclass(frozen=True)
class ImageRuntimes:
    """What the local and Slurm backends prepare a job with an image with, the same way."""

    store: ImageStore
    envs: EnvCache
    #: whether the backend runs workers in the sandbox (an image is the sandbox's system)
    confined: bool

    def prepare(self, launch: JobLaunch, requirements: str, log: Path, say: Say) -> Runtime:
        """Pull ``launch.image`` and make its runtime environment (``log``: pip's words); raises
        ImageError or ImageUnusable, which fail the job with their reason."""
        if not self.confined:
            raise ImageUnusable(
                "running in an image needs the sandbox, and this server runs workers unconfined "
                "(up --isolation none, or bubblewrap missing): submit without --image"
            )
        image, env = prepare_image(self.store, launch, say)  # pinned by the job from here
        try:
            venv = self.envs.ensure(requirements, log, launch.key, image=image)
        except EnvBuildError as exc:
            self.release(requirements, launch.key, image)  # the job fails: it holds neither any more
            raise ImageUnusable(str(exc)) from None
        except BaseException:
            self.release(requirements, launch.key, image)
            raise
        return Runtime(image, env, venv)

    def pin(self, requirements: str, holder: str, image: ImageRoot | None) -> None:
        """A job adopted after a restart holds its environment and image again."""
        self.envs.pin(requirements, holder, image)
        if image is not None:
            self.store.pin(image.rootfs, holder)

    def release(self, requirements: str, holder: str, image: ImageRoot | None) -> None:
        """The job no longer uses its environment (and image): evictable once nobody holds them."""
        self.envs.release(requirements, holder, image)
        if image is not None:
            self.store.release(image.rootfs, holder)


def image_worker_env(base: Mapping[str, str], image_env: tuple[str, ...]) -> dict[str, str]:
    """A worker's environment in an image: the image's variables, then the platform's on top; its
    PATH the job's environment (``base``'s VIRTUAL_ENV, made by the image's Python) before the
    image's PATH instead of the host's system path."""
    own = dict(e.split("=", 1) for e in image_env if "=" in e)
    env = {**own, **base}
    path = own.get("PATH", SYSTEM_PATH)
    venv = base.get("VIRTUAL_ENV")
    env["PATH"] = f"{venv}/bin{os.pathsep}{path}" if venv else path
    # the host's GPU driver, where a GPU sandbox binds it (``gpu_driver.py``), after the image's own
    # (the image's own first; the server's, which names the host's folders, not at all)
    libs = [p for p in own.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, f"{DRIVER_DIR}/lib"])
    return env
