"""Shared pieces of the PFS benchmarks (``pfs_throughput.py``, ``pfs_resume.py``, ``pfs_tree.py``).

A real server (``tests.e2e.conftest.Server``) on a fresh data dir in a temporary directory, the real
``paddlecloud`` CLI run as a child process with the server's environment (its wall time and peak RSS
taken from ``wait4``), the server's memory sampled from ``/proc``, and small parsing helpers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import PADDLECLOUD, Server  # noqa: E402

__all__ = [
    "MiB",
    "RssSampler",
    "RsyncDaemon",
    "Run",
    "Server",
    "Started",
    "Summary",
    "cli",
    "compile_package",
    "make_random_file",
    "mib",
    "parse_summary",
    "proc_cpu_seconds",
    "proc_status_kib",
    "running_server",
    "sha256_file",
    "sync",
    "touch_memory",
]

MiB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def compile_package() -> None:
    """Byte-compile the paddlecloud sources, as ``pip install`` does for an installed package: the
    dev venv's install is editable, and an environment with ``PYTHONDONTWRITEBYTECODE`` set (this
    machine's) would otherwise compile every changed module again in each timed CLI run."""
    import compileall

    compileall.compile_dir(str(ROOT / "src" / "paddlecloud"), quiet=1)


@contextlib.contextmanager
def running_server() -> Iterator[tuple[Server, Path]]:
    """A server on a fresh data dir; yields it and a scratch dir beside it; removes everything.
    The package is byte-compiled first (:func:`compile_package`)."""
    compile_package()
    tmp = Path(tempfile.mkdtemp(prefix="pcbench-"))
    try:
        (tmp / "home").mkdir()
        srv = Server(data_dir=tmp / "data", home=tmp / "home")
        srv.start()
        try:
            work = tmp / "work"
            work.mkdir()
            yield srv, work
        finally:
            srv.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class RsyncDaemon:
    """An rsync daemon on loopback serving one writable module (``bench``) from ``root``: the tool a
    user would reach for instead of ``pfs cp``. Installs Debian's ``rsync`` first when it is missing
    (``apt-get``, root). ``up``/``down`` copy one file whole (``--whole-file``) and fsync it
    (``--fsync``), as ``pfs cp`` does, and return the wall time of the whole command."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RsyncDaemon:
        if shutil.which("rsync") is None:
            subprocess.run(["apt-get", "install", "-y", "-q", "rsync"], check=True, capture_output=True)
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root.parent / "rsyncd.conf"
        log = self.root.parent / "rsyncd.log"
        module = f"[bench]\n  path = {self.root}\n  read only = no\n  uid = root\n  gid = root\n"
        conf.write_text(f"use chroot = no\nlog file = {log}\n{module}")
        self.proc = subprocess.Popen(
            ["rsync", "--daemon", "--no-detach", "--address", "127.0.0.1", f"--port={self.port}",
             f"--config={conf}"],
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return self
            time.sleep(0.05)
        raise SystemExit("the rsync daemon did not start in 10 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def url(self, name: str) -> str:
        return f"rsync://127.0.0.1:{self.port}/bench/{name}"

    def _run(self, src: str, dst: str) -> Run:
        args = ["rsync", "--whole-file", "--fsync", src, dst]
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rc, usage = reap(proc)
        wall = time.perf_counter() - t0
        out, err = (f.read().decode() if f else "" for f in (proc.stdout, proc.stderr))
        run = Run(args, rc, wall, usage.ru_maxrss, out, err, usage.ru_utime + usage.ru_stime)
        if rc != 0:
            raise SystemExit(f"{' '.join(args)} -> {rc}: {err}")
        return run

    def up(self, src: Path, name: str) -> Run:
        (self.root / name).unlink(missing_ok=True)
        sync()
        return self._run(str(src), self.url(name))

    def down(self, name: str, dst: Path) -> Run:
        dst.unlink(missing_ok=True)
        sync()
        return self._run(self.url(name), str(dst))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    args: list[str]
    rc: int
    wall: float  # seconds, process start to exit
    maxrss_kib: int  # the CLI process's peak RSS (ru_maxrss)
    stdout: str
    stderr: str
    cpu: float = 0.0  # user + system seconds of the CLI process
    log: Path | None = None  # the server's log, shown when the command failed

    def check(self) -> Run:
        if self.rc != 0:
            tail = self.log.read_text(errors="replace")[-3000:] if self.log is not None else ""
            raise SystemExit(f"paddlecloud {' '.join(self.args)} -> {self.rc}\nstdout: {self.stdout!r}\n"
                             f"stderr: {self.stderr!r}\nserver log (tail):\n{tail}")  # fmt: skip
        return self


class Started:
    """A ``paddlecloud`` process started in the background (output in temp files)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path | None = None) -> None:
        self.args = args
        self.log = log
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish()
        self._err = tempfile.TemporaryFile()  # noqa: SIM115
        self._usage: resource.struct_rusage | None = None
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [PADDLECLOUD, *args], stdout=self._out, stderr=self._err, env=env, cwd=ROOT
        )

    def exited(self) -> bool:
        """Has it exited? (Reaped here with ``wait4``, never with ``Popen.poll``, which would lose
        the process's resource use.)"""
        if self._usage is None:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid == 0:
                return False
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            self._usage = usage
        return True

    def finish(self) -> Run:
        """Wait for the process (killed or not) and collect its output."""
        if self._usage is None:
            _, self._usage = reap(self.proc)
        usage = self._usage
        rc = self.proc.returncode
        wall = time.perf_counter() - self.t0
        self._out.seek(0)
        self._err.seek(0)
        out, err = self._out.read().decode(), self._err.read().decode()
        run = Run(self.args, rc, wall, usage.ru_maxrss, out, err, usage.ru_utime + usage.ru_stime, self.log)
        self._out.close()
        self._err.close()
        return run


def cli(srv: Server, *args: str, env: dict[str, str] | None = None) -> Run:
    """Run ``paddlecloud ARGS`` to the end; wall time and peak RSS of that one process."""
    return Started(list(args), env or srv.env, srv.log_path).finish()


def reap(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage]:
    """Wait for ``proc`` with ``wait4``: its exit code and the resource use of that process alone
    (``ru_maxrss``: peak RSS in KiB)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a running process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sync() -> None:
    os.sync()


def touch_memory(size: int) -> float:
    """Write one byte of every page of ``size`` bytes of fresh memory, then free it; the seconds
    it took. On a VM, a page of guest memory used for the first time since boot costs the
    hypervisor's fault (here ~3 ms a MiB, 10 x a copy); the page cache then gets such pages
    too, so whichever tool happens to write into never-used memory first pays it. Touched once
    and freed, the memory is reused at the cost of a page fault."""
    t = time.perf_counter()
    step = 256 * MiB
    for _ in range(0, size, step):
        block = bytearray(step)  # calloc: mapped, not yet touched
        block[::4096] = b"\x01" * len(range(0, step, 4096))
        del block
    return time.perf_counter() - t


def make_random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes; return their sha256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 16 * MiB))
            h.update(block)
            f.write(block)
            left -= len(block)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(16 * MiB):
            h.update(block)
    return h.hexdigest()


def proc_status_kib(pid: int, field: str) -> int:
    """``VmHWM``/``VmRSS`` (KiB) of a process from /proc/<pid>/status; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for k in kids:
        out.append(int(k))
        out.extend(descendants(int(k)))
    return out


class RssSampler:
    """Max VmRSS of a process (and, separately, of its descendants, summed) while the block runs,
    sampled every ``interval`` s from a background thread. VmHWM cannot be reset, so this is how a
    peak is attributed to one transfer."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.pid, self.interval = pid, interval
        self.max_kib = 0
        self.max_children_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.max_kib = max(self.max_kib, proc_status_kib(self.pid, "VmRSS"))
            kids = sum(proc_status_kib(k, "VmRSS") for k in descendants(self.pid))
            self.max_children_kib = max(self.max_children_kib, kids)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_SUMMARY = re.compile(
    r"copied (?P<files>\d+) file\(s\), (?P<moved>[\d.]+ \w+) in (?P<secs>[\d.]+) s .*?; "
    r"sent (?P<sent>[\d.]+ \w+)(?:, (?P<skipped>[\d.]+ \w+) already there)?"
)


@dataclass
class Summary:
    files: int
    moved: float  # bytes (approximate: the CLI prints one decimal of the unit)
    secs: float
    sent: float
    skipped: float


def parse_bytes(text: str) -> float:
    num, unit = text.split()
    return float(num) * UNITS[unit]


def parse_summary(stderr: str) -> Summary:
    """The last line of ``pfs cp``: ``copied N file(s), X in T s (R/s); sent Y[, Z already there]``."""
    m = _SUMMARY.search(stderr.strip().splitlines()[-1] if stderr.strip() else "")
    if m is None:
        raise SystemExit(f"no summary line in pfs cp output:\n{stderr}")
    return Summary(
        files=int(m["files"]),
        moved=parse_bytes(m["moved"]),
        secs=float(m["secs"]),
        sent=parse_bytes(m["sent"]),
        skipped=parse_bytes(m["skipped"]) if m["skipped"] else 0.0,
    )


def mib(n: float) -> str:
    return f"{n / MiB:.1f} MiB"
