"""Resource limits of one worker run: a cgroup per run holding its memory, CPU and process limits.

    backend  Hierarchy.detect()                 which cgroup version this host runs and where
             Hierarchy.create(name, Limits) ──▶ RunCgroup: one folder (v2) or one per controller (v1)
    monitor  RunCgroup.join()                   the run's monitor moves itself in before it starts
                                                the sandbox: every process of the run is inside
    backend  RunCgroup.oom_kills()              after the run: did the kernel kill for memory?
             RunCgroup.kill_all(), remove()     nothing of the run survives it, and the folder goes

cgroup v2 (one unified hierarchy, most current hosts) is used where the controllers ``memory``,
``pids`` and ``cpu`` are available in it; otherwise cgroup v1 where those three are mounted as v1
hierarchies (some older or containerised hosts, this project's CI machine among them). A run's
folders are made under the server's own cgroup, in ``paddlecloud/`` (``Hierarchy.base``), or under a
folder the operator gives (``up --cgroup-root``, a delegated subtree). Limits:

    memory   v2 memory.max (+ memory.swap.max 0)    v1 memory.limit_in_bytes (+ memsw, when present)
    CPU      v2 cpu.max "QUOTA 100000"              v1 cpu.cfs_quota_us / cpu.cfs_period_us
    pids     v2 pids.max                            v1 pids.max

A process over its memory limit is killed by the kernel's OOM killer inside the cgroup
(``oom_kill`` in memory.events / memory.oom_control counts it); a fork past pids.max fails with
EAGAIN and ``pids.events`` counts it; CPU over the quota is throttled. Nothing else on the host is
affected by what happens inside.

Standard library only (the monitor imports it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CONTROLLERS",
    "CgroupError",
    "Hierarchy",
    "Limits",
    "RunCgroup",
    "describe_memory",
    "join_all",
    "safe_name",
]

#: what a run's cgroup limits
CONTROLLERS = ("memory", "pids", "cpu")
#: the CFS period the CPU quota is a share of (100 ms, the kernel's default)
CPU_PERIOD_US = 100_000
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class CgroupError(RuntimeError):
    """A run's cgroup cannot be made or joined here; the message says what to change."""


@dataclass(frozen=True)
class Limits:
    """What one worker run may use (None: unlimited)."""

    memory: int | None = None  # bytes
    cpu_m: int | None = None  # millicores: 1000 = one core
    pids: int | None = None  # processes and threads

    def cpu_quota_us(self) -> int | None:
        """The CFS quota per ``CPU_PERIOD_US`` for ``cpu_m`` (at least 1 ms)."""
        if self.cpu_m is None:
            return None
        return max(1000, self.cpu_m * CPU_PERIOD_US // 1000)


def describe_memory(n: int) -> str:
    """``n`` bytes the way a user wrote them (``512Mi``, ``2Gi``), for messages."""
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}"


def safe_name(*parts: str) -> str:
    """A cgroup folder name from ``parts`` (anything but letters, digits, ``_.-`` becomes ``_``)."""
    return ".".join(_NAME.sub("_", p) for p in parts)[:200] or "run"


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise CgroupError(f"writing {value!r} to {path} failed: {exc.strerror}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _counter(text: str, key: str) -> int:
    """The value of line ``key N`` in a flat-keyed cgroup file (memory.events, oom_control)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class _Mount:
    root: str  # the hierarchy's path mounted there (mountinfo field 4)
    point: Path
    controllers: frozenset[str]
    v2: bool


def _mounts(mountinfo: str) -> list[_Mount]:
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(","))
        root, point = fields[3], Path(fields[4].replace("\\040", " "))
        out.append(_Mount(root, point, frozenset(options & set(CONTROLLERS)), tail[0] == "cgroup2"))
    return out


def _own_paths(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """This process's cgroup per v1 controller, and its v2 cgroup (None without a v2 line)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if names == "":
            v2 = path
        for name in names.split(","):
            v1[name] = path
    return v1, v2


def _inside(mount: _Mount, path: str) -> Path:
    """Where cgroup ``path`` (as /proc/self/cgroup names it) lies under ``mount``."""
    rel = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        rel = path[len(mount.root) :]
    return mount.point / rel.lstrip("/")


@dataclass(frozen=True)
class Hierarchy:
    """Where this host's run cgroups are made: v2 (``dirs`` has one entry, ``""``) or v1 (one base
    folder per controller)."""

    version: int
    dirs: Mapping[str, Path] = field(default_factory=dict)

    @property
    def base(self) -> Path:
        return next(iter(self.dirs.values()))

    @classmethod
    def detect(cls, root: str | None = None, *, mountinfo: str | None = None,
               proc_cgroup: str | None = None) -> Hierarchy:  # fmt: skip
        """This host's hierarchy. ``root``: the cgroup (a path as /proc/self/cgroup names them,
        ``/paddlecloud.slice/workers``) to make runs' cgroups in, on every controller's hierarchy
        (default: ``paddlecloud`` under the server's own cgroup). CgroupError when no usable
        hierarchy is there, saying what is missing."""
        mi = _read(Path("/proc/self/mountinfo")) if mountinfo is None else mountinfo
        pc = _read(Path("/proc/self/cgroup")) if proc_cgroup is None else proc_cgroup
        mounts = _mounts(mi)
        own_v1, own_v2 = _own_paths(pc)
        problems = []
        for m in mounts:
            if not m.v2:
                continue
            base = _inside(m, root) if root is not None else _inside(m, own_v2 or "/") / "paddlecloud"
            available = set(_read(base.parent / "cgroup.controllers").split())
            if set(CONTROLLERS) <= available:
                return cls(2, {"": base})
            lacking = ", ".join(sorted(set(CONTROLLERS) - available))
            problems.append(f"cgroup v2 at {base.parent} lacks {lacking}")
        v1 = {m_c: m for m in mounts if not m.v2 for m_c in m.controllers}
        if set(CONTROLLERS) <= set(v1):
            dirs = {}
            for c in CONTROLLERS:
                m = v1[c]
                own = _inside(m, own_v1.get(c, "/")) / "paddlecloud"
                dirs[c] = _inside(m, root) if root is not None else own
            return cls(1, dirs)
        missing = sorted(set(CONTROLLERS) - set(v1))
        problems.append(f"cgroup v1 lacks {', '.join(missing)}" if v1 else "no cgroup v1 controllers mounted")
        raise CgroupError("no cgroup hierarchy with memory, pids and cpu: " + "; ".join(problems))

    def _prepare_v2(self) -> None:
        """Enable the controllers for the base folder's children (and in its parent for it)."""
        base = self.base
        want = " ".join(f"+{c}" for c in CONTROLLERS)
        for folder in (base.parent, base):
            if folder == base:
                with contextlib.suppress(FileExistsError):
                    base.mkdir()
            enabled = set(_read(folder / "cgroup.subtree_control").split())
            if set(CONTROLLERS) <= enabled:
                continue
            try:
                _write(folder / "cgroup.subtree_control", want)
            except CgroupError as exc:
                raise CgroupError(
                    f"{exc}: cgroup v2 only delegates controllers from a folder without processes of its "
                    "own; run the server in a delegated cgroup (systemd: Delegate=yes) or give "
                    "up --cgroup-root a folder whose parent has memory, pids and cpu enabled"
                ) from None

    def create(self, name: str, limits: Limits, controllers: tuple[str, ...] = CONTROLLERS) -> RunCgroup:
        """Make the run's cgroup ``name`` with ``limits`` (an existing one of that name is reused);
        ``controllers``: on a v1 host, only in these hierarchies (a Slurm job keeps its memory and
        CPU cgroups, Slurm's own, and gets only a pids one here)."""
        try:
            if self.version == 2:
                self._prepare_v2()
                paths = {"": self.base / name}
            else:
                paths = {c: d / name for c, d in self.dirs.items() if c in controllers}
            for p in paths.values():
                p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot make the run's cgroup {name}: {exc}") from None
        run = RunCgroup(self.version, tuple(paths.items()))
        run.limit(limits)
        return run

    def cap_pids(self, total: int) -> None:
        """All runs together may have at most ``total`` processes and threads (``pids.max`` of the
        base folder): one user's many runs, each within its own limit, cannot take the host's."""
        if self.version == 2:
            self._prepare_v2()
            folder = self.base
        else:
            folder = self.dirs["pids"]
            folder.mkdir(parents=True, exist_ok=True)
        _write(folder / "pids.max", str(total))

    def collect(self, older_than: float = 600.0) -> int:
        """Remove the empty run folders made more than ``older_than`` seconds ago: left by runs whose
        end no server saw (a server stopped for good with jobs running, a killed monitor, a lost
        node). A folder holding processes is never removed (rmdir refuses), a young one may be a run
        being started. Returns how many went."""
        gone = 0
        cutoff = time.time() - older_than
        for base in self.dirs.values():
            with contextlib.suppress(OSError):
                for entry in os.scandir(base):
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                            os.rmdir(entry.path)
                            gone += 1
        return gone


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroup: its folder (v2: controller ``""``) or its folder in each controller's
    hierarchy (v1), as (controller, folder) pairs."""

    version: int
    dirs: tuple[tuple[str, Path], ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(p for _, p in self.dirs)

    def _file(self, controller: str, name: str) -> Path:
        by = dict(self.dirs)
        return by.get("" if self.version == 2 else controller, self.dirs[0][1]) / name

    def limit(self, limits: Limits) -> None:
        v2 = self.version == 2
        has = {c for c, _ in self.dirs}
        if not v2:  # only what this run's cgroup is made in
            limits = Limits(
                memory=limits.memory if "memory" in has else None,
                cpu_m=limits.cpu_m if "cpu" in has else None,
                pids=limits.pids if "pids" in has else None,
            )
        if limits.memory is not None:
            _write(self._file("memory", "memory.max" if v2 else "memory.limit_in_bytes"), str(limits.memory))
            swap = self._file("memory", "memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")
            if swap.exists():  # no swapping past the limit either
                _write(swap, "0" if v2 else str(limits.memory))
        if limits.pids is not None:
            _write(self._file("pids", "pids.max"), str(limits.pids))
        quota = limits.cpu_quota_us()
        if quota is not None:
            if v2:
                _write(self._file("cpu", "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            else:
                _write(self._file("cpu", "cpu.cfs_period_us"), str(CPU_PERIOD_US))
                _write(self._file("cpu", "cpu.cfs_quota_us"), str(quota))

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: the caller) into the run's cgroup."""
        join_all([str(p) for p in self.paths], pid)

    def oom_kills(self) -> int:
        """How many processes of the run the kernel killed for passing its memory limit."""
        if self.version == 2:
            return _counter(_read(self._file("memory", "memory.events")), "oom_kill")
        return _counter(_read(self._file("memory", "memory.oom_control")), "oom_kill")

    def pids_refused(self) -> int:
        """How many process creations were refused at the pids limit."""
        return _counter(_read(self._file("pids", "pids.events")), "max")

    def pids(self) -> list[int]:
        out: set[int] = set()
        for p in self.paths:
            out.update(int(x) for x in _read(p / "cgroup.procs").split() if x.isdigit())
        return sorted(out)

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process of the run (a fork racing the kill is killed on the next pass);
        True once none is left."""
        kill = self._file("", "cgroup.kill") if self.version == 2 else None
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            if kill is not None and kill.exists():
                with contextlib.suppress(CgroupError):
                    _write(kill, "1")
            else:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def remove(self) -> None:
        """Remove the run's folders (processes left inside are killed first)."""
        self.kill_all()
        for p in self.paths:
            for _ in range(50):  # the last processes take a moment to leave after SIGKILL
                try:
                    os.rmdir(p)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    time.sleep(0.02)

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "dirs": [[c, str(p)] for c, p in self.dirs]}

    @classmethod
    def from_json(cls, raw: object) -> RunCgroup | None:
        """Read back :meth:`to_json` (None when ``raw`` is not one: an older pid file)."""
        if not isinstance(raw, dict):
            return None
        version, dirs = raw.get("version"), raw.get("dirs")
        if version not in (1, 2) or not isinstance(dirs, list) or not dirs:
            return None
        if not all(isinstance(d, list) and len(d) == 2 and all(isinstance(x, str) for x in d) for d in dirs):
            return None
        return cls(int(version), tuple((c, Path(p)) for c, p in dirs))


def join_all(paths: Iterable[str], pid: int = 0) -> None:
    """Write process ``pid`` (0: the caller, as the monitor does) into each ``cgroup.procs`` under
    ``paths``."""
    for p in paths:
        _write(Path(p) / "cgroup.procs", str(pid or os.getpid()))
