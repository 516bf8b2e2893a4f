"""Container images on a machine: pulled by digest into a cache, unpacked once into a root file system.

    ImageStore(root).ensure(ref, auth, progress)
      skopeo inspect --raw (the manifest: its digest pins the image, its layers' sizes the progress)
        ─▶ cached: <root>/images/<digest>/done          ─▶ Image (rootfs, Env, WorkingDir, User)
        ─▶ else, under the digest's lock (threads: one lock each; processes: an fcntl lock file):
           skopeo copy docker://REF@DIGEST oci:<root>/images/<digest>/layout:image
             (a thread reports the blob bytes written so far against the manifest's total)
           umoci unpack --rootless ─▶ <root>/images/<digest>/bundle/rootfs (+ the image's config)
           done marker written last: an interrupted pull is started again, never half used
        ─▶ pinned by the job (``holder``) until ``release``; past ``max_bytes`` the least recently
           used images no job holds are evicted (``lru_dirs``)

Tools, not hand-written code: Debian's skopeo speaks the registry protocol (token auth, manifest
lists, digests checked as blobs arrive) and umoci applies OCI layers (whiteouts, ownership mapped for
an unprivileged unpack) with the path checks of a container runtime. A registry on loopback is
reached over plain HTTP (the test bed's); any other must speak verified TLS unless the store is told
it may not (``insecure``). Credentials never go on a command line: they are written to a temporary
auth file (0600) that skopeo reads and that is removed after the call. What skopeo says is turned
into an :class:`ImageError` of one :class:`ImageProblem` with what to change.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from paddlecloud.backends.lru_dirs import LruDirs, flock
from paddlecloud.core.imageref import ImageRef

__all__ = ["Image", "ImageError", "ImageProblem", "ImageStore", "RegistryAuth"]

#: how long one skopeo / umoci call may take before the pull is given up
_CALL_TIMEOUT_S = 1800.0
_INSPECT_TIMEOUT_S = 60.0
_PROGRESS_EVERY_S = 0.5

Progress = Callable[[int, int], None]

_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
#: this machine's architecture as OCI names it (a manifest list's entry for it is pulled)
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


class ImageProblem(StrEnum):
    NOT_FOUND = "ImageNotFound"  # no such repository or tag
    UNAUTHORIZED = "ImageUnauthorized"  # credentials missing or refused
    UNREACHABLE = "RegistryUnreachable"  # nothing answers, TLS refused
    BAD_IMAGE = "BadImage"  # a manifest or layer that cannot be used


class ImageError(Exception):
    def __init__(self, problem: ImageProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True)
class RegistryAuth:
    """A user's credentials for one registry (never logged, never on a command line)."""

    registry: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"RegistryAuth({self.registry!r}, {self.username!r}, <hidden>)"


@dataclass(frozen=True)
class Image:
    """An unpacked image: its root file system and what its config says a process gets."""

    ref: str
    digest: str
    rootfs: Path
    env: tuple[str, ...] = ()
    working_dir: str = "/"
    user: str = ""


@dataclass(frozen=True)
class _Pull:
    ref: ImageRef
    digest: str
    total: int  # the layers' bytes (the manifest's); 0 when unknown
    auth: RegistryAuth | None


def _problem(ref: ImageRef, stderr: str) -> ImageError:
    text = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    low = stderr.lower()
    refused = ("unauthorized", "authentication required", "requested access to the resource is denied")
    if any(s in low for s in refused):
        return ImageError(
            ImageProblem.UNAUTHORIZED,
            f"{ref.registry} refused to serve {ref}: log in with `paddlecloud image login {ref.registry}` "
            f"(as a user allowed to pull {ref.repository}) ({text})",
        )
    if "manifest unknown" in low or "name unknown" in low or "not found" in low:
        return ImageError(
            ImageProblem.NOT_FOUND, f"{ref} is not on {ref.registry}: check the repository and tag ({text})"
        )
    unreachable = (
        "connection refused", "no such host", "timeout", "tls", "x509", "no route to host",
        "http response to https client", "network is unreachable",
    )  # fmt: skip
    if any(s in low for s in unreachable):
        return ImageError(ImageProblem.UNREACHABLE, f"cannot reach the registry {ref.registry} ({text})")
    return ImageError(ImageProblem.BAD_IMAGE, f"{ref}: {text}")


def _loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _digest(value: object, ref: ImageRef) -> str:
    """A digest the registry gave, checked: it becomes part of a path and of a pinned pull."""
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise ImageError(
            ImageProblem.BAD_IMAGE, f"{ref}: the registry gave no valid digest ({str(value)[:80]!r})"
        )
    return value


def _source(ref: ImageRef) -> str:
    """What skopeo reads: by digest when the reference has one (skopeo takes no tag beside it)."""
    return f"docker://{ref.name}@{ref.digest}" if ref.digest else f"docker://{ref.name}:{ref.tag}"


def _json(raw: str, ref: ImageRef) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ImageError(ImageProblem.BAD_IMAGE, f"{ref}: the registry's manifest is not a JSON object")
    return doc


def _this_platform(doc: dict[str, Any], ref: ImageRef) -> object:
    """The digest of this machine's linux image in a manifest list (an OCI index)."""
    for m in doc.get("manifests") or []:
        plat = m.get("platform") if isinstance(m, dict) else None
        if isinstance(plat, dict) and plat.get("os") == "linux" and plat.get("architecture") == _ARCH:
            return m.get("digest")
    raise ImageError(ImageProblem.BAD_IMAGE, f"{ref} has no linux/{_ARCH} image")


class ImageStore:
    """Pulled and unpacked images under ``root``: one directory per (repository, manifest digest),
    so an image is shared only by the pulls of one repository, each of which the registry allowed
    with its caller's own credentials (``manifest`` asks it every time, cached or not)."""

    def __init__(
        self, root: Path, insecure: frozenset[str] = frozenset(), max_bytes: int | None = None
    ) -> None:
        """``insecure``: registries reached over plain HTTP; ``max_bytes``: the cap on the unpacked
        images' total size (``lru_dirs``: the least recently used ones no job uses are evicted
        after a pull; None: no cap)."""
        self.root = root
        self.insecure = insecure
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._dirs = LruDirs(root / "images", "done", max_bytes)

    # -- the calls ----------------------------------------------------------------------------

    def _tls(self, ref: ImageRef) -> str:
        plain = _loopback(ref.registry) or ref.registry in self.insecure
        return "false" if plain else "true"

    @contextlib.contextmanager
    def _authfile(self, auth: RegistryAuth | None, anonymous: str) -> Iterator[list[str]]:
        """skopeo's credentials option: the caller's in an auth file of a private temporary folder
        (0700; removed after the call), or ``anonymous`` (never the server account's own)."""
        if auth is None:
            yield [anonymous]
            return
        token = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
        folder = tempfile.mkdtemp(prefix="paddlecloud-auth-")
        try:
            name = os.path.join(folder, "auth.json")
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"auths": {auth.registry: {"auth": token}}}, f)
            yield ["--authfile", name]
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _run(self, ref: ImageRef, args: list[str], timeout: float) -> str:
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ImageError(
                ImageProblem.UNREACHABLE, f"{ref}: {args[0]} gave no answer in {timeout:.0f} s"
            ) from None
        except OSError as exc:  # skopeo or umoci missing
            raise ImageError(ImageProblem.BAD_IMAGE, f"{ref}: {args[0]} cannot run here: {exc}") from None
        if done.returncode != 0:
            raise _problem(ref, done.stderr)
        return done.stdout

    def _inspect(self, ref: ImageRef, source: str, creds: list[str], *extra: str) -> str:
        args = ["skopeo", "inspect", *extra, f"--tls-verify={self._tls(ref)}", *creds, source]
        return self._run(ref, args, _INSPECT_TIMEOUT_S)

    def manifest(self, ref: ImageRef, auth: RegistryAuth | None = None) -> tuple[str, int]:
        """The image's manifest digest (what pins it; for a manifest list, this machine's platform's)
        and the bytes of its layers (0: unknown), asked of the registry with ``auth``."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._authfile(auth, "--no-creds") as creds:
            doc = _json(self._inspect(ref, _source(ref), creds, "--raw"), ref)
            if "manifests" in doc:  # asked again by digest, from the same repository, as the caller
                digest = _digest(_this_platform(doc, ref), ref)
                doc = _json(self._inspect(ref, f"docker://{ref.name}@{digest}", creds, "--raw"), ref)
            elif ref.digest:
                digest = ref.digest
            else:
                digest = _digest(
                    self._inspect(ref, _source(ref), creds, "--format", "{{.Digest}}").strip(), ref
                )
        layers = doc.get("layers") or []
        total = sum(int(x.get("size") or 0) for x in layers if isinstance(x, dict))
        return digest, total

    # -- the cache ----------------------------------------------------------------------------

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _dir(self, ref: ImageRef, digest: str) -> Path:
        repo = hashlib.sha256(ref.name.encode()).hexdigest()[:16]
        where = self.root / "images" / f"{repo}-{digest.replace(':', '-')}"
        if where.parent != self.root / "images":  # a checked digest never leaves the store
            raise ImageError(ImageProblem.BAD_IMAGE, f"{ref}: digest {digest[:80]!r} is not a digest")
        return where

    def cached(self, ref: ImageRef, digest: str) -> bool:
        return (self._dir(ref, digest) / "done").exists()

    def ensure(
        self, ref: ImageRef, auth: RegistryAuth | None = None, progress: Progress | None = None,
        holder: str = "",
    ) -> Image:  # fmt: skip
        """The image unpacked on this machine, pulled first unless a pull of the same digest is
        cached; concurrent calls for one digest pull it once (the others wait and reuse it).
        ``holder`` (a job's key) pins it until :meth:`release`: it is never evicted meanwhile."""
        digest, total = self.manifest(ref, auth)
        where = self._dir(ref, digest)
        if holder:
            with self._dirs.lock():
                self._dirs.pin_locked(where, holder)
        try:
            with self._lock(where.name), flock(where.parent / f"{where.name}.lock"):  # and other processes
                if not self.cached(ref, digest):
                    self._pull(_Pull(ref, digest, total, auth), progress)
                    self._dirs.measured(where)
            image = self._image(ref, digest)
        except BaseException:
            if holder:
                self.release(where / "bundle" / "rootfs", holder)
            raise
        self._dirs.evict(keep=where)
        return image

    def _of(self, rootfs: Path) -> Path | None:
        """The store's folder of an image by its unpacked root (None: not one of this store's)."""
        where = rootfs.parent.parent
        return where if where.parent == self.root / "images" and rootfs.name == "rootfs" else None

    def pin(self, rootfs: Path, holder: str) -> None:
        """Mark the image unpacked at ``rootfs`` as used by ``holder`` (idempotent; re-adoption)."""
        where = self._of(rootfs)
        if where is not None:
            with self._dirs.lock():
                self._dirs.pin_locked(where, holder)

    def release(self, rootfs: Path, holder: str) -> None:
        """``holder`` no longer uses the image unpacked at ``rootfs`` (idempotent); it becomes
        evictable once no job holds it."""
        where = self._of(rootfs)
        if where is not None:
            with self._dirs.lock():
                self._dirs.unpin_locked(where, holder)
                if self._dirs.ready(where):
                    self._dirs.touch_locked(where)

    def _pull(self, pull: _Pull, progress: Progress | None) -> None:
        ref, digest, total, auth = pull.ref, pull.digest, pull.total, pull.auth
        where = self._dir(ref, digest)
        shutil.rmtree(where, ignore_errors=True)  # what an interrupted pull left
        where.mkdir(parents=True, exist_ok=True)
        stop = threading.Event()
        watcher = None
        if progress is not None:
            watcher = threading.Thread(
                target=self._watch, args=(where / "layout", total, progress, stop), daemon=True
            )
            watcher.start()
        pinned = f"docker://{ref.registry}/{ref.repository}@{digest}"
        try:
            with self._authfile(auth, "--src-no-creds") as creds:
                self._run(
                    ref,
                    ["skopeo", "copy", "--quiet", f"--src-tls-verify={self._tls(ref)}", *creds, pinned,
                     f"oci:{where / 'layout'}:image"],
                    _CALL_TIMEOUT_S,
                )  # fmt: skip
            self._run(
                ref,
                [
                    "umoci",
                    "unpack",
                    "--rootless",
                    "--image",
                    f"{where / 'layout'}:image",
                    str(where / "bundle"),
                ],
                _CALL_TIMEOUT_S,
            )
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(timeout=5)
        if progress is not None:
            progress(total, total)
        shutil.rmtree(where / "layout", ignore_errors=True)  # the root file system is what runs
        (where / "done").write_text(str(ref))

    @staticmethod
    def _watch(layout: Path, total: int, progress: Progress, stop: threading.Event) -> None:
        while not stop.wait(_PROGRESS_EVERY_S):
            blobs = layout / "blobs"
            done = 0
            with contextlib.suppress(OSError):
                done = sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file())
            progress(min(done, total), total)

    def _image(self, ref: ImageRef, digest: str) -> Image:
        bundle = self._dir(ref, digest) / "bundle"
        try:
            spec = json.loads((bundle / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ImageError(
                ImageProblem.BAD_IMAGE, f"{ref}: its unpacked config cannot be read ({exc})"
            ) from None
        proc = spec.get("process", {})
        user = proc.get("user", {})
        return Image(
            ref=str(ref),
            digest=digest,
            rootfs=bundle / "rootfs",
            env=tuple(str(e) for e in proc.get("env", [])),
            working_dir=str(proc.get("cwd") or "/"),
            user=f"{user.get('uid', 0)}:{user.get('gid', 0)}",
        )
