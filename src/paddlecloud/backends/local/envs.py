"""Runtime environments: one virtual environment per distinct ``requirements.txt`` content.

This is the local stand-in for a container image. ``EnvCache.ensure`` builds
``<root>/<sha256 of requirements>/`` once (``venv --without-pip``, then the platform's own pip
installs into it with ``pip --python``) and marks it ready; later jobs with the same requirements reuse
it at once. A file lock makes concurrent builds of the same content wait for one another, and a half
built environment (crash, failed install) is removed and rebuilt.

With a sandbox (``sandbox.py``) pip runs confined: a requirement may be a source package whose build
runs any code, so it sees only the system, pip and its configuration, and the new environment. The
environment is the build's to write, so the ready mark is written without following links.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO

from paddlecloud.backends.local.sandbox import Command, Sandbox

__all__ = ["EnvBuildError", "EnvCache"]

READY = ".paddlecloud-ready"


class EnvBuildError(RuntimeError):
    """The requirements could not be installed; the message ends with pip's last lines."""


def _key(requirements: str) -> str:
    lines = [ln.strip() for ln in requirements.splitlines()]
    norm = "\n".join(ln for ln in lines if ln and not ln.startswith("#"))
    return hashlib.sha256(norm.encode()).hexdigest()[:20]


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(ln.strip() for ln in lines[-n:] if ln.strip())


class EnvCache:
    def __init__(self, root: Path, install_timeout: float = 1800.0, sandbox: Sandbox | None = None) -> None:
        self.root = root
        self.install_timeout = install_timeout
        self.sandbox = sandbox
        root.mkdir(parents=True, exist_ok=True)

    def path_for(self, requirements: str) -> Path:
        return self.root / _key(requirements)

    def ensure(self, requirements: str, log: Path) -> Path:
        """Return a ready venv for ``requirements``, building it if needed; raises EnvBuildError."""
        target = self.path_for(requirements)
        if (target / READY).exists():
            return target
        with open(self.root / f"{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if (target / READY).exists():
                    return target
                if target.exists():
                    shutil.rmtree(target)
                self._build(target, requirements, log)
                _mark_ready(target, requirements)
                return target
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

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


def _mark_ready(target: Path, requirements: str) -> None:
    """Write the ready mark; whatever the build left under that name (a link) is replaced, not
    followed."""
    mark = target / READY
    mark.unlink(missing_ok=True)
    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(requirements)
