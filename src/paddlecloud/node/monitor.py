"""The monitor of one worker run: the process a backend starts for it, which owns the run.

    env --ignore-signal=TERM,INT python -I -S -c BOOT PATH --log FILE [--max-log-bytes N]
        [--cgroup DIR]... [--api-fd FD --api-target HOST:PORT] [--status FILE]
        [--ready-port P --ready-file F] [--hold-fd FD] [--release-netns NAME] [--remove PATH]...
        [--fence-api HOST:PORT --fence-scontrol PATH --fence-after S] -- ARGV...

(``command()`` builds the start of that line: ``BOOT`` puts ``PATH``, where this package lies, on
``sys.path`` and runs :func:`main`; without ``site`` and the package's lazy exports the interpreter
starts in about half the time of ``-m``.) In order, before the run's program exists:

1. SIGTERM and SIGINT are ignored (inherited: ``env --ignore-signal``, or the Slurm jail; checked,
   and set if they were not): a graceful stop is sent to the run's process group and must reach
   the launcher inside the sandbox (it passes it to the program); the monitor lives as long as
   what it runs and SIGKILL to the group ends it with the rest.
2. It writes itself into each ``--cgroup`` folder's ``cgroup.procs`` (``cgroups.RunCgroup``, made
   by the backend with the run's limits): everything it starts is inside, and cannot leave.
3. It runs ARGV with stdin from /dev/null and stdout and stderr into a pipe. The backend puts the
   way into the job's network namespace at the front of ARGV (``netns.enter_argv``): the program
   runs inside it while the monitor stays outside, where the API is.
4. With ``--api-fd`` (a Unix socket the backend made, listening: ``apirelay.listen``, bound into
   the sandbox) it relays connections to the API (``apirelay``), from a thread started once the
   child runs (the imports it needs are then not on the start's path).
5. It copies the pipe into ``--log``, bounded by ``--max-log-bytes`` (``logcap.CappedLog``), and
   with ``--ready-port`` writes ``--ready-file`` once the program listens there: the backend cannot
   see into the job's namespace, the monitor reads the child's ``/proc/<pid>/net/tcp``.

With ``--fence-api`` it ends the run when the node hears neither that address nor the Slurm
controller (``--fence-scontrol``'s ``scontrol ping``) for ``--fence-after`` seconds
(``node.fence``: a node cut off from the cluster, whose worker the platform restarts elsewhere,
never runs it twice).

With ``--hold-fd`` it keeps the hold on its job's namespace (``netns.hold``) for the run's life:
the namespace is never removed under it. When ARGV ends the monitor drains the pipe (at most
``DRAIN_S`` more if something the run left behind still holds it), with ``--release-netns``
removes the job's namespace on this host when nobody holds it and no process is left in it (a
Slurm node: the job's last worker there; ``netns.remove``), and exits the
way ARGV did: the same code, or the same signal. If a step
before the start fails, the reason goes to its stderr (the log) and ``--status`` (the launcher's
status file, when given) gets exit code 126, as the Slurm jail does.

Standard library only, and imports as little as it can (no argparse, dataclasses, pathlib, not
even ``signal``, whose enums cost more than the rest of the start): its start-up is part of every
worker's (bench/isolation_cost.py).
"""

from __future__ import annotations

import _thread  # built in: the fence's lock, without threading's import on the start's path
import os
import select
import sys
import time

from paddlecloud.node import ports
from paddlecloud.node.logcap import CappedLog

__all__ = ["BOOT", "CANNOT_START", "DRAIN_S", "Options", "command", "main", "parse"]

#: the exit status of a run whose monitor could not set it up
CANNOT_START = 126
#: how long the log is still read after the program ended, while something else holds the pipe
DRAIN_S = 2.0
_CHUNK = 64 * 1024
_USAGE = (
    "usage: python -I -m paddlecloud.node.monitor --log FILE [--max-log-bytes N] [--cgroup DIR]... "
    "[--api-fd FD --api-target HOST:PORT] [--status FILE] [--ready-port P --ready-file F] "
    "[--hold-fd FD] [--release-netns NAME] [--remove PATH]... "
    "[--fence-api HOST:PORT --fence-scontrol PATH --fence-after S] -- ARGV..."
)
#: the program ``python -S -c`` runs: the package's folder (argv[1]) on the path, then main()
BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from paddlecloud.node.monitor import main; sys.exit(main())"
)
#: lines the monitor's threads have for the log (``_pump`` writes them: one writer)
_NOTES: list[bytes] = []
#: with ``--fence-api``: the lock the fence and the child's reaping share, and whether it is reaped
_GUARD: list[_thread.LockType] = []
_REAPED: list[bool] = []
#: SIGINT (2) and SIGTERM (15) in /proc/self/status's SigIgn mask
_IGNORED = (1 << 1) | (1 << 14)


def command(python: str = sys.executable) -> list[str]:
    """The start of the monitor's command line: signals ignored, the interpreter without ``site``
    and the lazy package exports, the folder this package lies in on its path."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return ["/usr/bin/env", "--ignore-signal=TERM,INT", python, "-I", "-S", "-c", BOOT, here]


class Options:
    """What the command line says (``parse``)."""

    def __init__(self) -> None:
        self.log = ""
        self.max_log_bytes: int | None = None
        self.cgroups: list[str] = []
        self.api_fd = -1
        self.api_target = ""
        self.status = ""
        self.ready_port = 0
        self.ready_file = ""
        self.release_netns = ""
        self.hold_fd = -1
        self.remove: list[str] = []
        self.fence_api = ""
        self.fence_scontrol = ""
        self.fence_after = 0
        self.argv: list[str] = []


def parse(argv: list[str]) -> Options:
    """The options of ``argv`` (ValueError with the usage when they are not right)."""
    o = Options()
    i = 0
    while i < len(argv) and argv[i] != "--":
        name = argv[i]
        if i + 1 >= len(argv):
            raise ValueError(f"{name} needs a value; {_USAGE}")
        value = argv[i + 1]
        if name == "--log":
            o.log = value
        elif name == "--max-log-bytes":
            if not value.isdigit():
                raise ValueError(f"--max-log-bytes {value!r} is not a number of bytes")
            o.max_log_bytes = int(value)
        elif name == "--cgroup":
            o.cgroups.append(value)
        elif name == "--api-fd":
            o.api_fd = _descriptor(name, value)
        elif name == "--api-target":
            o.api_target = value
        elif name == "--status":
            o.status = value
        elif name == "--ready-port":
            if not value.isdigit():
                raise ValueError(f"--ready-port {value!r} is not a port")
            o.ready_port = int(value)
        elif name == "--ready-file":
            o.ready_file = value
        elif name == "--release-netns":
            o.release_netns = value
        elif name == "--remove":
            o.remove.append(value)
        elif name == "--hold-fd":
            o.hold_fd = _descriptor(name, value)
        elif name == "--fence-api":
            _address(name, value)
            o.fence_api = value
        elif name == "--fence-scontrol":
            if not os.path.isabs(value):
                raise ValueError(f"--fence-scontrol {value!r} is not an absolute path")
            o.fence_scontrol = value
        elif name == "--fence-after":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"--fence-after {value!r} is not a number of seconds")
            o.fence_after = int(value)
        else:
            raise ValueError(f"unknown option {name!r}; {_USAGE}")
        i += 2
    o.argv = argv[i + 1 :]
    if not o.log or not o.argv:
        raise ValueError(_USAGE)
    return o


def _descriptor(name: str, value: str) -> int:
    if not value.isdigit():
        raise ValueError(f"{name} {value!r} is not a descriptor")
    return int(value)


def _fail(status: str, message: str) -> int:
    print(f"paddlecloud: the worker could not be started: {message}", file=sys.stderr, flush=True)
    if status:
        try:
            _write_status(status)
        except OSError as exc:
            print(f"paddlecloud: writing the exit status failed: {exc}", file=sys.stderr, flush=True)
    return CANNOT_START


def _write_status(status: str, body: str = "") -> None:
    """The launcher's status, as the launcher would write it, in a folder the job can write to (its
    status folder): through the folder's descriptor, a new file that no link can stand for
    (``O_EXCL | O_NOFOLLOW``), renamed over the status (a rename replaces a link, never its target).
    ``body``: the JSON to write (default: exit code ``CANNOT_START``)."""
    folder, name = os.path.split(status)
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        tmp = f".{name}.monitor{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
        try:
            body = body or f'{{"exit_code": {CANNOT_START}, "signal": null, "finished_at": {time.time()}}}'
            os.write(fd, body.encode())
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def _join(folders: list[str]) -> None:
    """Into the run's cgroup (the kernel's interface: our pid into each folder's cgroup.procs)."""
    for folder in folders:
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _target(o: Options) -> tuple[str, int] | None:
    if o.api_fd < 0:
        return None
    return _address("--api-target", o.api_target)


def _address(name: str, value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{name} {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _fence(o: Options, pid: int) -> None:
    """``--fence-api``: the run ends itself on a node cut off from the cluster (``node.fence``)."""
    from paddlecloud.node import fence  # threads, sockets: after the start

    def say(message: str) -> None:  # into the log by the pump, between the child's own lines
        _NOTES.append(f"{message}\n".encode())

    def end(message: str) -> None:  # the run, then its status: ended by its monitor, and why
        with guard:  # never once the child is reaped (its pid may be another's, its status is)
            if _REAPED:
                return
            fence.kill_run(o.cgroups, pid)
            if o.status:
                try:
                    _write_status(o.status, fence.status_body(message))
                except OSError as exc:
                    say(f"paddlecloud: writing the exit status failed: {exc}")

    guard = _thread.allocate_lock()
    _GUARD.append(guard)
    watch = (_address("--fence-api", o.fence_api), o.fence_scontrol)
    fence.Fence(watch, float(o.fence_after), end, say).start()


def _reap(pid: int, block: bool) -> tuple[int, int]:
    """``waitpid`` of the child; with a fence watching, under its lock, so that the fence never
    kills after the reap and the status it writes is in place before the run's end is seen."""
    if not _GUARD:
        return os.waitpid(pid, 0 if block else os.WNOHANG)
    while True:
        with _GUARD[0]:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                _REAPED.append(True)
                return done, st
        if not block:
            return 0, 0
        time.sleep(0.05)


def _relay(fd: int, target: tuple[str, int]) -> None:
    from paddlecloud.node.apirelay import Relay  # sockets and threads: after the start

    Relay(fd, target).start()


def _ignore_stops() -> None:
    """SIGTERM and SIGINT ignored, as the backend started us (read from /proc: no ``signal``)."""
    try:
        with open("/proc/self/status") as f:
            mask = next((int(ln.split()[1], 16) for ln in f if ln.startswith("SigIgn:")), 0)
    except (OSError, ValueError):
        mask = 0
    if mask & _IGNORED != _IGNORED:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _spawn(argv: list[str], out: int) -> int:
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out, 1),
        (os.POSIX_SPAWN_DUP2, out, 2),
    ]
    return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)


class _Ready:
    """``--ready-port``: writes ``--ready-file`` once the run's program listens on the port (seen in
    the child's network namespace, held by one of the run's processes: ``ports.listening``)."""

    def __init__(self, o: Options, pid: int) -> None:
        self.port, self.path, self.pid = o.ready_port, o.ready_file, pid
        self.done = not (self.port and self.path)

    def check(self) -> None:
        # the run's own listener: held by a process of this monitor's (its child's tree, or one
        # reparented to it), never another process on the port
        if self.done or not ports.listening(self.pid, self.port, owners=os.getpid()):
            return
        try:  # in the backend's folder, not the job's (``run/``, ``RunPlan``): a plain write
            with open(self.path, "w") as f:
                f.write(f"{self.port}\n")
            self.done = True
        except OSError:  # the disk is full, say: tried again at the next look
            pass


def _write(log: CappedLog, data: bytes) -> None:
    """Into the log; what cannot be written (a full disk, an I/O error) is dropped and counted, and
    the pipe is still drained: the run never stops because its log cannot grow."""
    try:
        log.write(data)
    except OSError:
        log.dropped += len(data)


def _drained(log: CappedLog, status: int) -> int:
    """``status``, once the notes left for the log are in it."""
    while _NOTES:
        _write(log, _NOTES.pop(0))
    return status


def _pump(pipe: int, log: CappedLog, pid: int, ready: _Ready) -> int:
    """Copy the pipe into the log until it ends (or ``DRAIN_S`` after ``pid`` ended); the wait
    status of ``pid``. A server that closes its output before it listens is still seen listening."""
    status: int | None = None
    ended_at = 0.0
    reads = 0
    eof = False
    while True:
        while _NOTES:
            _write(log, _NOTES.pop(0))
        ready_to_read, _, _ = select.select([] if eof else [pipe], [], [], 0.2)
        if ready_to_read:
            data = os.read(pipe, _CHUNK)
            if data:
                _write(log, data)
                reads += 1
                if reads % 64:
                    continue
            else:
                eof = True
        if eof and status is None and ready.done:  # nothing more to read or to look for
            return _drained(log, _reap(pid, block=True)[1])
        if status is None:
            ready.check()  # not once the child is reaped: its pid may be another's
            done, st = _reap(pid, block=False)
            if done:
                status, ended_at = st, time.monotonic()
        if status is not None and (eof or time.monotonic() - ended_at > DRAIN_S):
            return _drained(log, status)


def _release(name: str) -> None:
    """The job's namespace on this host goes if no process is left in it (the monitor is outside)."""
    from paddlecloud.node import netns  # only at the end: not on the start's path

    try:
        netns.remove(name, if_unused=True)
    except netns.NetnsError as exc:
        print(f"paddlecloud: removing the job's network namespace {name} failed: {exc}", file=sys.stderr)


def _exit_like(status: int) -> int:
    """Exit the way the child did: its code, or its signal."""
    if os.WIFSIGNALED(status):
        import signal

        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the others may be ignored here: not now
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig  # not reached for a deadly signal
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def main(argv: list[str] | None = None) -> int:
    _ignore_stops()
    try:
        o = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"paddlecloud-monitor: {exc}", file=sys.stderr)
        return 2
    try:
        _join(o.cgroups)
        target = _target(o)
        for held in (o.api_fd, o.hold_fd):  # ours alone (the relay's socket, the hold on the
            if held >= 0:  # job's namespace: netns.hold): the child must not inherit them
                os.set_inheritable(held, False)
        fd = os.open(o.log, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        log = CappedLog(fd, o.max_log_bytes)
        r, w = os.pipe()
        try:
            pid = _spawn(o.argv, w)
        finally:
            os.close(w)
    except (OSError, ValueError) as exc:
        return _fail(o.status, str(exc))
    if target is not None:
        _relay(o.api_fd, target)
    if o.fence_api and o.fence_scontrol and o.fence_after:
        _fence(o, pid)
    status = _pump(r, log, pid, _Ready(o, pid))
    if o.hold_fd >= 0:
        os.close(o.hold_fd)  # before the release: a namespace is removed only when nobody holds it
    if o.release_netns:
        _release(o.release_netns)
    for path in o.remove:  # what the run's set-up made for it alone (a Slurm run's API socket)
        try:  # noqa: SIM105  (no contextlib: it is not imported here, on the start's path)
            os.unlink(path)
        except OSError:
            pass
    return _exit_like(status)


if __name__ == "__main__":
    sys.exit(main())
