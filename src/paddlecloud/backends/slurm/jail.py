"""A Slurm worker's sandbox, made on its node: what the batch script runs with isolation ``sandbox``.

    server  SlurmBackend._sbatch ── Sandbox.jail(launch) ──▶ JobJail ──JailSpec.write──▶ SPEC
            (SPEC: run/<worker>.<run>.jail.json in the job's folder on the shared directory)
            sbatch --wrap "exec PYTHON -I -m paddlecloud.backends.slurm.jail SPEC"
    node    main ── JailSpec.read ──▶ Sandbox(shim, gpus) + JobJail + WorkerDirs (the local backend's,
            ``backends/local/sandbox.py``) ──JobJail.wrap(launcher argv)──▶ bwrap argv + descriptors
            ── descriptors made inheritable, os.execv ──▶ env --ignore-signal=TERM,INT bwrap ... --
            JOB_PYTHON -m paddlecloud.runtime.launcher --status STATUS --cwd CWD ENTRY

The jail must be built where ``bwrap`` runs: user data is bound by file descriptor (each PFS place
opened from ``/`` without following links, on the node's view of the shared file system) and
``/etc/passwd``, ``/etc/group`` and ``/etc/hosts`` are memfds. So the server writes a description
(JSON, never pickle) and this module, started by Slurm on the node, opens the places and replaces
itself with ``bwrap``: the Slurm job's process tree is bwrap -> launcher -> program, ``scancel
--signal=TERM --full`` reaches the launcher (the outer bwrap ignores TERM and INT) and ``scancel``'s
SIGKILL ends the pid namespace and every process in it.

The spec lies in the job's ``run/`` folder on the shared directory, which no sandbox binds: a job
cannot rewrite what its next run is confined to. It is written by the server and trusted as such;
it is still checked for shape so that a damaged file fails the worker with a message, not a traceback.

Where the sandbox cannot be made (no bubblewrap on this node, a PFS place that became a link, a spec
that cannot be read) the reason goes to the worker's log (stderr) and the launcher's status file
gets exit code 126, so the worker fails with that reason rather than vanish.

Imports only :mod:`~paddlecloud.backends.local.sandbox` (standard library): each worker start pays
for this module's start-up.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.local.sandbox import (
    ConfinementError,
    ImageRoot,
    JobJail,
    Sandbox,
    WorkerDirs,
)
from paddlecloud.backends.slurm.nodekeep import RunKeep
from paddlecloud.node.netns import NetnsError
from paddlecloud.runtime.launcher import write_json_atomic

__all__ = ["CANNOT_CONFINE", "JailSpec", "SpecError", "exec_confined", "fail_run", "main"]

#: the exit status of a worker whose sandbox could not be made on its node
CANNOT_CONFINE = 126
_VERSION = 1
_MAX_SPEC = 1024 * 1024


class SpecError(ValueError):
    """The spec file cannot be read or does not describe a jail."""


@dataclass(frozen=True)
class JailSpec:
    """One worker run's confinement, as the server describes it to the node (JSON)."""

    #: the job's user (the sandbox's /etc/passwd names it)
    user: str
    #: the job's environment (the launcher's Python for a job without requirements.txt)
    env_dir: str
    #: the stdlib-only copy of ``paddlecloud.runtime`` (read-only, on ``PYTHONPATH`` inside)
    shim: str
    #: PFS places: (bwrap option, path, is a folder), bound by descriptor (``JobJail.data``)
    data: tuple[tuple[str, str, bool], ...]
    #: platform folders of the job it reads (the contract dir, the API's CA bundle)
    shared: tuple[str, ...]
    #: the worker's copy of the package, its status folder, its /tmp, its host name inside
    cwd: str
    status: str
    tmp: str
    hostname: str
    #: the launcher's arguments after the interpreter (``-m paddlecloud.runtime.launcher ...``)
    command: tuple[str, ...]
    #: bind the GPU device nodes (a worker that asked for GPUs)
    gpus: bool = False
    #: run as uid 1000 in a user namespace (the server's probe); False: uid 0 without capabilities
    userns: bool = True
    #: the run's SampleSet mount on the node, bound read-only ("" : the job has none)
    sampleset: str = ""
    #: what the node keeps besides the sandbox: the job's network, pids, the log, the API relay
    #: (``nodekeep.py``); None: the sandbox alone (a spec written by an earlier version)
    keep: RunKeep | None = None
    #: the unpacked image the run's sandbox has as its system ("": the node's own) and the python3
    #: in it that runs the launcher
    image_rootfs: str = ""
    image_python: str = ""

    @classmethod
    def of(
        cls, jail: JobJail, dirs: WorkerDirs, command: list[str], *, gpus: bool, keep: RunKeep | None = None
    ) -> JailSpec:
        """The spec of ``jail`` (made by the server's sandbox) for one run of a worker."""
        return cls(
            user=jail.user, env_dir=str(jail.env_dir), shim=str(jail.sandbox.shim),
            data=tuple((opt, str(path), is_dir) for opt, path, is_dir in jail.data),
            shared=tuple(map(str, jail.shared)), cwd=str(dirs.cwd), status=str(dirs.status),
            tmp=str(dirs.tmp), hostname=dirs.hostname, command=tuple(command), gpus=gpus,
            userns=jail.sandbox.userns, sampleset=str(dirs.sampleset or ""), keep=keep,
            image_rootfs=str(jail.image.rootfs) if jail.image else "",
            image_python=jail.image.python if jail.image else "",
        )  # fmt: skip

    def write(self, path: Path) -> None:
        data = {"version": _VERSION, **asdict(self)}
        data["keep"] = self.keep.to_dict() if self.keep is not None else None
        write_json_atomic(str(path), data)

    @classmethod
    def read(cls, path: Path) -> JailSpec:
        try:
            with open(path, "rb") as f:
                raw = json.loads(f.read(_MAX_SPEC))
        except (OSError, ValueError) as exc:
            raise SpecError(f"{path}: {exc}") from None
        return cls.from_dict(raw, str(path))

    @classmethod
    def from_dict(cls, raw: Any, where: str = "spec") -> JailSpec:
        if not isinstance(raw, dict) or raw.get("version") != _VERSION:
            raise SpecError(f"{where}: not a version {_VERSION} jail spec")

        def get(key: str, ok: Callable[[Any], bool], what: str) -> Any:
            value = raw.get(key)
            if not ok(value):
                raise SpecError(f"{where}: {key!r} is not {what}")
            return value

        def text(key: str) -> str:
            return str(get(key, lambda v: isinstance(v, str), "a string"))

        def texts(key: str) -> tuple[str, ...]:
            strings = lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)  # noqa: E731
            return tuple(get(key, strings, "a list of strings"))

        def flag(key: str) -> bool:
            return bool(get(key, lambda v: isinstance(v, bool), "true or false"))

        place = lambda d: (  # noqa: E731
            isinstance(d, list) and len(d) == 3 and d[0] in ("--bind-fd", "--ro-bind-fd")
            and isinstance(d[1], str) and isinstance(d[2], bool)
        )  # fmt: skip
        data = get("data", lambda v: isinstance(v, list) and all(map(place, v)),
                   "a list of [--bind-fd|--ro-bind-fd, path, is a folder]")  # fmt: skip
        return cls(
            user=text("user"), env_dir=text("env_dir"), shim=text("shim"),
            data=tuple((d[0], d[1], d[2]) for d in data), shared=texts("shared"), cwd=text("cwd"),
            status=text("status"), tmp=text("tmp"), hostname=text("hostname"), command=texts("command"),
            gpus=flag("gpus"), userns=flag("userns"),
            sampleset=text("sampleset") if "sampleset" in raw else "", keep=_keep(raw.get("keep"), where),
            image_rootfs=text("image_rootfs") if "image_rootfs" in raw else "",
            image_python=text("image_python") if "image_python" in raw else "",
        )  # fmt: skip

    def jail(self, sandbox: Sandbox, api_socket: str = "") -> tuple[JobJail, WorkerDirs]:
        """The local backend's jail and worker folders for this run, with ``sandbox`` (this node's);
        ``api_socket``: the run's API socket on this node, bound into the sandbox."""
        data = tuple((opt, Path(path), is_dir) for opt, path, is_dir in self.data)
        shared = tuple(map(Path, self.shared))
        # the batch step (slurmstepd) starts bwrap: the sandbox ends with it and with the launcher
        image = ImageRoot(Path(self.image_rootfs), self.image_python) if self.image_rootfs else None
        jail = JobJail(
            sandbox, self.user, Path(self.env_dir), data, shared, die_with_parent=True, image=image
        )
        dirs = WorkerDirs(
            cwd=Path(self.cwd), status=Path(self.status), tmp=Path(self.tmp), hostname=self.hostname,
            address=_node_address(), sampleset=Path(self.sampleset) if self.sampleset else None,
            api_socket=Path(api_socket) if api_socket else None,
        )  # fmt: skip
        return jail, dirs


def _keep(raw: Any, where: str) -> RunKeep | None:
    if raw is None:
        return None
    try:
        return RunKeep.from_dict(raw)
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def _node_address() -> str:
    """What this node's host name resolves to (the sandbox's own name resolves there too)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def exec_confined(spec: JailSpec) -> None:
    """Replace this process with the worker's launcher in its sandbox; returns only by raising
    (IsolationError, ConfinementError, OSError)."""
    if shutil.which("bwrap") is None:
        raise IsolationError(
            f"bubblewrap is not installed on node {socket.gethostname()}: every Slurm node needs it "
            "(Debian: apt-get install bubblewrap; docs/security.md), or run the server with --isolation none"
        )
    sandbox = Sandbox(Path(spec.shim), gpus=spec.gpus)
    sandbox.userns = spec.userns
    monitor: list[str] = []
    api = ""
    if spec.keep is not None:  # the job's network, pids, the log cap, the API relay (nodekeep.py)
        run = os.environ.get("SLURM_JOB_ID") or str(os.getpid())
        monitor = spec.keep.prepare(
            os.environ.get("SLURMD_NODENAME", ""), run, os.path.join(spec.status, "exit.json")
        )
        api = spec.keep.api_socket(run) if spec.keep.netns else ""
    jail, dirs = spec.jail(sandbox, api)
    with jail.wrap(dirs, [jail.python, *spec.command]) as cmd:
        for fd in cmd.fds:
            os.set_inheritable(fd, True)
        argv = [*monitor, *cmd.argv]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)


def fail_run(status: str, code: int, message: str) -> int:
    """A worker run that ends before its launcher starts: ``message`` to its log (stderr) and
    ``code`` to its launcher's status folder ``status`` ("" : none), as the launcher would write it."""
    print(f"paddlecloud: {message}", file=sys.stderr, flush=True)
    if status:
        try:
            os.makedirs(status, exist_ok=True)
            write_json_atomic(
                os.path.join(status, "exit.json"),
                {"exit_code": code, "signal": None, "finished_at": time.time()},
            )
        except OSError as exc:
            print(f"paddlecloud: writing the exit status failed: {exc}", file=sys.stderr, flush=True)
    return code


def _fail(status: str, message: str) -> int:
    return fail_run(status, CANNOT_CONFINE, f"the worker's sandbox cannot be made here: {message}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -I -m paddlecloud.backends.slurm.jail SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = JailSpec.read(Path(args[0]))
    except SpecError as exc:
        return _fail("", str(exc))
    try:
        exec_confined(spec)
    except (IsolationError, ConfinementError, OSError, NetnsError) as exc:
        return _fail(spec.status, str(exc))
    return CANNOT_CONFINE  # not reached: exec_confined returns only by raising


if __name__ == "__main__":
    sys.exit(main())
