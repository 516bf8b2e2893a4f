"""Runtime environments: one virtual environment per distinct ``requirements.txt`` content, kept under
a size cap by evicting the least recently used ones that no job is using.

This is the local stand-in for a container image. ``EnvCache.ensure`` builds
``<root>/<key>/`` (``key``: sha256 of the requirements) once (``venv --without-pip``, then the
platform's own pip installs into it with ``pip --python``) and marks it ready; later jobs with the
same requirements reuse it at once. A file lock per key makes concurrent builds of the same content
wait for one another, and a half built environment (crash, failed install) is removed and rebuilt.

Files next to each environment (``<root>/``; the pins, sizes and eviction are ``backends.lru_dirs``')::

    <key>/                    the venv; <key>/.paddlecloud-ready marks it complete (mtime: last use)
    <key>.lock                held while it is being built
    <key>.size                its size in bytes, measured once after the build
    <key>.pins/<holder>       one empty file per job using it (``ensure`` .. ``release``)
    .cache.lock               held briefly while pins, last use and evictions change

Use and eviction::

    job prepares ──ensure(requirements, log, holder)──▶ pin, then reuse or build; last use = now
    job's processes all ended, or job removed ──release(requirements, holder)──▶ unpin; last use = now
    a build finished and the ready environments pass ``max_bytes`` ──▶ evict ready, unpinned ones,
        least recently used first, until under the cap (never one in use; if every one is in use the
        cache stays over its cap and the build log says so)

A pin lives on disk, so a job keeps its environment across a server restart (adoption pins again,
which changes nothing). Evicting renames the environment away under ``.cache.lock`` (atomic: a job
that pins it at the same moment either pinned first, and it is not evicted, or finds it gone and
builds it again) and then deletes it.

In an image (``ensure(..., image=)``, issue 27) the environment is the job's runtime image: the
image's own Python makes the venv with ``--system-site-packages`` (the image's packages, torch in an
NGC-style image, satisfy the requirements they meet) and runs the platform's pip (its
``__pip-runner__.py``, bound read-only), so what is installed is built for and by the image's
Python; all of it in the image's sandbox. Its name includes the image's digest (the unpacked root's
path), so each (image, requirements) is built once, and it is evicted like every other.

With a sandbox (``sandbox.py``) pip runs confined: a requirement may be a source package whose build
runs any code, so it sees only the system, pip and its configuration, and the new environment. The
environment is the build's to write, so the ready mark is written without following links.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO

import paddlecloud.runtime as runtime_pkg
from paddlecloud.backends.local.sandbox import IMAGE_PIP, Command, ImageRoot, Sandbox
from paddlecloud.backends.lru_dirs import LruDirs, flock
from paddlecloud.runtime import torchelastic

__all__ = ["EnvBuildError", "EnvCache", "install_runtime_shim"]

READY = ".paddlecloud-ready"
#: the ``paddlecloud/__init__.py`` of the runtime shim (``install_runtime_shim``)
_SHIM_INIT = '"""PaddleCloud worker runtime (stdlib only)."""\n'
#: the suffix of a shim file being written (renamed over the file once whole)
_PART = ".part"


class EnvBuildError(RuntimeError):
    """The requirements could not be installed; the message ends with pip's last lines."""


def _key(requirements: str, image: ImageRoot | None = None) -> str:
    """The environment's name: the requirements' lines (comments and blanks dropped), and for one
    made in an image, the image (its unpacked root names its digest) and the Python that made it."""
    lines = [ln.strip() for ln in requirements.splitlines()]
    norm = "\n".join(ln for ln in lines if ln and not ln.startswith("#"))
    if image is not None:
        norm = f"image {image.rootfs} {image.python}\n{norm}"
    return hashlib.sha256(norm.encode()).hexdigest()[:20]


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(ln.strip() for ln in lines[-n:] if ln.strip())


class EnvCache:
    def __init__(
        self, root: Path, max_bytes: int | None = None, install_timeout: float = 1800.0,
        sandbox: Sandbox | None = None,
    ) -> None:  # fmt: skip
        """``max_bytes``: the cap on the ready environments' total size (None: no cap); ``sandbox``:
        where pip runs (None: unconfined)."""
        self.root = root
        self.install_timeout = install_timeout
        self.sandbox = sandbox
        self._dirs = LruDirs(root, READY, max_bytes)

    @property
    def max_bytes(self) -> int | None:
        return self._dirs.max_bytes

    def path_for(self, requirements: str, image: ImageRoot | None = None) -> Path:
        return self.root / _key(requirements, image)

    # -- use ----------------------------------------------------------------------------------------

    def ensure(self, requirements: str, log: Path, holder: str = "", image: ImageRoot | None = None) -> Path:
        """Return a ready venv for ``requirements``, building it if needed; raises EnvBuildError.

        ``holder`` (a job's key) pins it until :meth:`release`: it is never evicted meanwhile.
        ``image``: the venv is made in that image, by its Python (see the module doc)."""
        target = self.path_for(requirements, image)
        with self._dirs.lock():
            if holder:
                self._dirs.pin_locked(target, holder)
            if self._dirs.ready(target):
                self._dirs.touch_locked(target)
                return target
        with flock(self.root / f"{target.name}.lock"):
            if not self._dirs.ready(target):
                try:
                    if target.exists():
                        shutil.rmtree(target)
                    if image is None:
                        self._build(target, requirements, log)
                    else:
                        self._build_in_image(target, requirements, log, image)
                    _mark_ready(target, requirements)
                    self._dirs.measured(target)
                except BaseException:
                    shutil.rmtree(target, ignore_errors=True)
                    raise
        over = self._dirs.evict(keep=target)
        if over:
            with open(log, "a") as out:
                out.write(f"note: the environment cache holds {over} bytes more than its cap, all in use\n")
        return target

    def pin(self, requirements: str, holder: str, image: ImageRoot | None = None) -> None:
        """Mark the environment of ``requirements`` as used by ``holder`` (idempotent; re-adoption)."""
        with self._dirs.lock():
            self._dirs.pin_locked(self.path_for(requirements, image), holder)

    def release(self, requirements: str, holder: str, image: ImageRoot | None = None) -> None:
        """``holder`` no longer uses the environment (idempotent); it becomes evictable once unpinned."""
        target = self.path_for(requirements, image)
        with self._dirs.lock():
            self._dirs.unpin_locked(target, holder)
            if self._dirs.ready(target):
                self._dirs.touch_locked(target)

    def entries(self) -> list[tuple[Path, int, float, bool]]:
        """Every ready environment: (path, size, last use, in use), least recently used first."""
        return self._dirs.entries()

    # -- building -----------------------------------------------------------------------------------

    def _build(self, target: Path, requirements: str, log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self._run(Command([sys.executable, "-m", "venv", "--without-pip", str(target)]), out, log)
            if not requirements.strip():
                return
            req = target / "requirements.txt"
            req.write_text(requirements)
            cmd = [
                sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"),
                "install", "--disable-pip-version-check", "--no-input", "-r", str(req),
            ]  # fmt: skip
            if self.sandbox is None:
                self._run(Command(cmd), out, log)
                return
            tmp = self.root / f"{target.name}.tmp"
            try:
                with self.sandbox.build(target, tmp, cmd) as confined:
                    self._run(confined, out, log, self.sandbox.build_env())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def _build_in_image(self, target: Path, requirements: str, log: Path, image: ImageRoot) -> None:
        """The image's Python makes the venv (seeing the image's own packages) and runs the
        platform's pip, which installs the requirements with that Python, in the image's sandbox."""
        if self.sandbox is None:
            raise EnvBuildError("an environment in an image is made in the sandbox, and this server has none")
        log.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir(parents=True)
        # written now, into the new empty folder: once the image's code has run, the server
        # writes nothing in the folder by name (a link there would lead anywhere on the host)
        _write_new(target / "requirements.txt", requirements)
        tmp = self.root / f"{target.name}.tmp"
        venv = [image.python, "-m", "venv", "--without-pip", "--system-site-packages", str(target)]
        pip = [
            str(target / "bin" / "python"), f"{IMAGE_PIP}/__pip-runner__.py", "install",
            "--disable-pip-version-check", "--no-input", "-r", str(target / "requirements.txt"),
        ]  # fmt: skip
        try:
            with open(log, "ab") as out:
                with self.sandbox.build(target, tmp, venv, image, pip=False) as confined:
                    try:
                        self._run(confined, out, log, self.sandbox.build_env(pip=False))
                    except EnvBuildError as exc:
                        raise EnvBuildError(
                            f"{image.python} of the image could not make a virtual environment "
                            f"({exc}): use an image whose Python 3 has the standard library's venv"
                        ) from None
                if not requirements.strip():
                    return
                out.write(f"installing requirements.txt with the image's {image.python}\n".encode())
                out.flush()
                with self.sandbox.build(target, tmp, pip, image) as confined:
                    try:
                        self._run(confined, out, log, self.sandbox.build_env())
                    except EnvBuildError as exc:
                        raise EnvBuildError(
                            f"the image's Python ({image.python}) could not install requirements.txt: "
                            f"{exc}; use an image whose Python can (the right version, a compiler for "
                            "source packages), or one that has these packages already (logs -w prepare)"
                        ) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, cmd: Command, out: IO[bytes], log: Path, env: dict[str, str] | None = None) -> None:
        try:
            proc = subprocess.run(
                cmd.argv, stdout=out, stderr=subprocess.STDOUT, timeout=self.install_timeout,
                check=False, pass_fds=cmd.fds, env=env, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EnvBuildError(f"building the environment took over {self.install_timeout:.0f} s") from None
        if proc.returncode != 0:
            raise EnvBuildError(f"installing requirements.txt failed (exit {proc.returncode}): {_tail(log)}")


def _write_new(path: Path, text: str) -> None:
    """``path`` made with ``text`` (never through a link, never over a file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _mark_ready(target: Path, requirements: str) -> None:
    """Write the ready mark; whatever the build left under that name (a link) is replaced, not
    followed."""
    mark = target / READY
    mark.unlink(missing_ok=True)
    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(requirements)


def install_runtime_shim(target: Path) -> Path:
    """Put a stdlib-only copy of ``paddlecloud.runtime`` where worker programs can import it (on
    ``PYTHONPATH``: a job's environment does not have the platform installed).

    Every new backend installs it again (a server restart) while workers of the jobs it adopts may be
    starting and importing their launcher from it: on Slurm a worker's job starts whenever Slurm
    runs it. So the copy is never taken away: a file already as it should be is left as it is (a
    restart of the same platform changes nothing on disk), any other is replaced atomically (a
    reader sees the old file or the new one, never none or a part), and only then are the files the
    runtime no longer has removed (``__pycache__`` folders are left to Python). Deleted and copied
    anew instead, a worker starting in between failed with ``No module named 'paddlecloud'`` before
    its launcher could write an exit status, and was taken for a lost one."""
    src = Path(runtime_pkg.__file__).parent
    pkg = target / "paddlecloud"
    want = {
        pkg / "runtime" / f.relative_to(src): f.read_bytes()
        for f in sorted(src.rglob("*"))
        if f.is_file() and "__pycache__" not in f.relative_to(src).parts
    }
    want[pkg / "__init__.py"] = _SHIM_INIT.encode()
    # torchrun's rendezvous backend "paddlecloud" (elastic torch jobs)
    want |= {target / name: text.encode() for name, text in torchelastic.entry_point_files().items()}
    for path, data in want.items():
        _put(path, data)
    for path in sorted(pkg.rglob("*")):
        if path in want or "__pycache__" in path.relative_to(pkg).parts or not path.is_file():
            continue
        if not (path.name.startswith(".") and path.name.endswith(_PART)):  # another install's, in flight
            path.unlink(missing_ok=True)
    return target


def _put(path: Path, data: bytes) -> None:
    """``path`` holding ``data``: left alone when it does, else replaced atomically (written beside
    it, then renamed over it)."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:  # not there yet
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{uuid.uuid4().hex}{_PART}")
    part.write_bytes(data)
    os.replace(part, path)
