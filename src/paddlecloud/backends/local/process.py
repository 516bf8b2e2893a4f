"""One worker process of the local cluster: spawn it, observe it, stop it.

Each worker is ``python -m paddlecloud.runtime.launcher`` in a new session (so it is its own process
group and outlives the server), with stdout and stderr going to its log file. The launcher writes
the exit status to ``run/<worker>.exit.json``; the backend records ``run/<worker>.pid.json`` (pid and
process start time, to tell a re-used pid from ours) so a restarted server can re-adopt the worker.

A worker restarted by its restart policy is a new ``WorkerProc`` for its next run (``next_run``): the
same name, role, index, node, endpoint, GPUs and directory, a log file of its own, and ``restart_at``
(when it may be spawned) until it is. ``watch_exit`` wakes the controller the moment a process ends.

A confined worker (``sandbox.py``) is the same launcher inside ``bwrap``, run by the job's own
interpreter: the process the backend knows is then the outer ``bwrap``, which lives exactly as long as
the launcher; the launcher writes its status in ``run/<worker>/`` (the only part of ``run/`` the job
sees, so it cannot forge a pid file) and the status is read without following links.

Each run is started through its monitor (``paddlecloud.node.monitor``, like a container's
conmon): the process the backend knows (pid file, process group) is the monitor, which joins the
run's cgroup (``RunPlan.cgroups``: its --memory, --cpu and the pids limit), relays the API into the
sandbox when the job has a network namespace of its own, starts the sandbox inside that namespace
and keeps the log within ``RunPlan.max_log_bytes``. When the run has ended the backend reads the
cgroup's OOM counter (the worker's reason is then ``OOMKilled``, its message the limit), kills
whatever is still inside and removes it.

Every process of a run carries ``PADDLECLOUD_RUN_TAG`` (a fresh random value per run, kept in the pid
file) in its environment. Programs may start processes in sessions of their own (torchrun does so
for its workers), which a signal to the run's process group never reaches; when the run has ended
(``kill_leftovers``) or is stopped (``stop_group``, after the grace period), every process that
still carries its tag is SIGKILLed too, as the end of a container would end all of its processes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from paddlecloud.backends.local.sandbox import API_SOCKET, Command, JobJail, WorkerDirs, read_status
from paddlecloud.core.phases import WorkerReason, WorkerState
from paddlecloud.node import apirelay, monitor, netns
from paddlecloud.node.cgroups import CgroupError, Hierarchy, Limits, RunCgroup, describe_memory, safe_name
from paddlecloud.runtime import contract
from paddlecloud.runtime.launcher import write_json_atomic

__all__ = [
    "RUN_TAG",
    "RunPlan",
    "WorkerProc",
    "kill_leftovers",
    "start_ticks",
    "stop_group",
    "tagged_pids",
    "watch_exit",
]

#: the variable that marks every process of one run of a worker (see the module's doc)
RUN_TAG = "PADDLECLOUD_RUN_TAG"


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/PID/stat``);
    None where it cannot be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rsplit(b")", 1)[1].split()[19])  # after the name, which may hold anything
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class RunPlan:
    """How a run is kept beyond its sandbox (its monitor's options): where its cgroup goes and with
    which limits, its job's network namespace, the API the relay reaches, the log's cap."""

    cgroups: Hierarchy | None = None
    limits: Limits = field(default_factory=Limits)
    #: prefix of the run's cgroup name (user, job): unique among the jobs of this host
    names: tuple[str, ...] = ()
    #: the job's network namespace ("" : the host's network)
    netns: str = ""
    #: HOST:PORT of the API the run's socket is relayed to ("" : no relay)
    api_target: str = ""
    max_log_bytes: int | None = None
    #: a server (pserver, rendezvous store): its monitor marks the run ready once it listens there
    ready_port: int = 0
    #: the backend's hold on the job's namespace (``netns.hold``): the monitor keeps a copy
    hold_fd: int = -1


@dataclass
class WorkerProc:
    name: str
    role: str
    index: int
    node: str
    endpoint: str
    gpus: tuple[int, ...]
    cwd: Path
    run_dir: Path
    log_path: Path
    restart: int = 0
    pid: int | None = None
    create_time: float | None = None
    #: the process's start in clock ticks since boot (``/proc/PID/stat``): what tells a re-used pid,
    #: whatever the wall clock did since (``create_time`` moves when a VM's clock is stepped)
    start_ticks: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    #: the signal that ended the run, when the launcher saw one or was itself killed by one
    signal: int | None = None
    stopped: bool = False  # stopped by the platform, not by its own failure
    #: run this instead of the job's entry (platform-side helpers such as the rendezvous store)
    command: str | None = None
    #: a restarted worker not spawned yet: the clock time it may be
    restart_at: float | None = None
    #: this run's ``RUN_TAG`` value, set when it is spawned
    tag: str | None = None
    #: the mount of its job's SampleSet on its node (read-only at PADDLECLOUD_SAMPLESET_DIR)
    sampleset: Path | None = None
    #: this run's cgroup (None: no resource limits here) and the limits it was made with
    cgroup: RunCgroup | None = None
    limits: Limits = field(default_factory=Limits)
    #: why the run ended as it did, beyond its exit code (``OOMKilled``), and the details
    reason: WorkerReason = WorkerReason.NONE
    message: str = ""
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid.json"

    @property
    def status_dir(self) -> Path:
        """Where the launcher writes its exit status: the worker's own folder (a sandbox binds it)."""
        return self.run_dir / self.name

    @property
    def status_file(self) -> Path:
        return self.status_dir / "exit.json"

    @property
    def ready_file(self) -> Path:
        """Written by the run's monitor once a server's program listens on its port (``RunPlan``)."""
        return self.run_dir / f"{self.name}.ready"

    @property
    def api_socket(self) -> Path:
        """The run's API socket (its monitor listens there), in ``run/``: no sandbox binds that."""
        return self.run_dir / f"{self.name}.api.sock"

    def dirs(self, api: bool = False) -> WorkerDirs:
        """Its folders and its run's host name (for a sandbox); ``api``: the API socket bound in."""
        return WorkerDirs(
            cwd=self.cwd, status=self.status_dir, tmp=self.run_dir.parent / "tmp" / self.name,
            hostname=f"{self.name}-{(self.tag or '')[:8]}", sampleset=self.sampleset,
            api_socket=self.api_socket if api else None,
        )  # fmt: skip

    @property
    def port(self) -> int:
        return int(self.endpoint.rpartition(":")[2])

    def spawn(
        self, entry: str, env: dict[str, str], now: float, jail: JobJail | None = None,
        plan: RunPlan | None = None,
    ) -> None:  # fmt: skip
        """Start the launcher running ``entry`` through the run's monitor, confined by ``jail``
        (None: unconfined) and kept as ``plan`` says (CgroupError: its cgroup cannot be made)."""
        plan = plan or RunPlan()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.status_dir, ignore_errors=True)  # the job writes there: fresh per run
        self.status_dir.mkdir(parents=True)
        self.ready_file.unlink(missing_ok=True)
        self.tag = uuid.uuid4().hex
        env = {**env, RUN_TAG: self.tag}
        api = bool(plan.api_target and plan.netns and jail is not None)
        if api:
            env[contract.API_SOCKET] = API_SOCKET
        self.limits, self.reason, self.message = plan.limits, WorkerReason.NONE, ""
        self.cgroup = None
        if plan.cgroups is not None:
            name = safe_name(*plan.names, self.name, f"r{self.restart}", self.tag[:8])
            self.cgroup = plan.cgroups.create(name, plan.limits)
        python = jail.python if jail is not None else sys.executable
        launcher = [python, "-m", "paddlecloud.runtime.launcher",
                    "--status", str(self.status_file), "--cwd", str(self.cwd), entry]  # fmt: skip
        try:
            self._popen(jail, launcher, env, plan, api)
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        assert self.popen is not None
        self.pid = self.popen.pid
        try:
            self.create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self.create_time = None
        self.start_ticks = start_ticks(self.pid)
        self.started_at = now
        write_json_atomic(
            str(self.pid_file),
            {
                "pid": self.pid,
                "create_time": self.create_time,
                "start_ticks": self.start_ticks,
                "started_at": now,
                "restart": self.restart,
                "tag": self.tag,
                "cgroup": self.cgroup.to_json() if self.cgroup is not None else None,
                "memory_limit": self.limits.memory,
                "pids_limit": self.limits.pids,
            },
        )

    def _monitor(self, plan: RunPlan, api_fd: int) -> list[str]:
        """The monitor's command line up to the sandbox's (``node.monitor``), with the way into
        the job's network namespace; ``api_fd``: the run's API socket (-1: none)."""
        argv = [*monitor.command(), "--log", str(self.log_path), "--status", str(self.status_file)]
        if plan.max_log_bytes:
            argv += ["--max-log-bytes", str(plan.max_log_bytes)]
        for folder in self.cgroup.paths if self.cgroup is not None else ():
            argv += ["--cgroup", str(folder)]
        if api_fd >= 0:
            argv += ["--api-fd", str(api_fd), "--api-target", plan.api_target]
        if plan.ready_port:
            argv += ["--ready-port", str(plan.ready_port), "--ready-file", str(self.ready_file)]
        if plan.hold_fd >= 0:
            argv += ["--hold-fd", str(plan.hold_fd)]
        return [*argv, "--", *(netns.enter_argv(plan.netns) if plan.netns else [])]

    def _popen(self, jail: JobJail | None, launcher: list[str], env: dict[str, str], plan: RunPlan,
               api: bool) -> None:  # fmt: skip
        """Start the monitor; the run's API socket is made here and handed to it (``--api-fd``)."""
        sock = apirelay.listen(str(self.api_socket)) if api else None
        fds = (sock.fileno(),) if sock is not None else ()
        try:
            with self._command(jail, launcher, api) as cmd, open(self.log_path, "ab") as log:
                argv = [*self._monitor(plan, fds[0] if fds else -1), *cmd.argv]
                held = (plan.hold_fd,) if plan.hold_fd >= 0 else ()
                self._run(argv, env, log, (*cmd.fds, *fds, *held))
        finally:
            if sock is not None:
                sock.close()  # the monitor holds it now

    def _run(self, argv: list[str], env: dict[str, str], log: BinaryIO, fds: tuple[int, ...]) -> None:
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd,
            start_new_session=True, close_fds=True, pass_fds=fds,
        )  # fmt: skip

    @contextlib.contextmanager
    def _command(self, jail: JobJail | None, launcher: list[str], api: bool) -> Iterator[Command]:
        if jail is None:
            yield Command(launcher)
        else:
            with jail.wrap(self.dirs(api), launcher) as cmd:
                yield cmd

    def next_run(self, run: int, restart_at: float) -> WorkerProc:
        """The same worker's run ``run``, to be spawned at ``restart_at``, with its own log file."""
        return replace(
            self, restart=run, log_path=self.log_path.parent / f"{self.name}.{run}.log",
            pid=None, create_time=None, start_ticks=None, started_at=None, finished_at=None, exit_code=None,
            signal=None, stopped=False, restart_at=restart_at, popen=None, tag=None, cgroup=None,
            reason=WorkerReason.NONE, message="",
        )  # fmt: skip

    def load_pid_file(self) -> bool:
        """Re-adoption: read back pid and start time written by :meth:`spawn`."""
        try:
            data: dict[str, Any] = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return False
        self.pid = int(data["pid"])
        self.create_time = data.get("create_time")
        ticks = data.get("start_ticks")
        self.start_ticks = ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else None
        self.started_at = data.get("started_at")
        self.restart = int(data.get("restart", 0))
        self.tag = data.get("tag")
        self.cgroup = RunCgroup.from_json(data.get("cgroup"))
        memory, pids = data.get("memory_limit"), data.get("pids_limit")
        self.limits = Limits(
            memory=memory if isinstance(memory, int) else None, pids=pids if isinstance(pids, int) else None
        )
        self.log_path = self.log_path.parent / f"{self.name}.{self.restart}.log"  # the adopted run's log
        return True

    def alive(self) -> bool:
        if self.pid is None:
            return False
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            proc = psutil.Process(self.pid)
            if self.start_ticks is not None:
                if start_ticks(self.pid) != self.start_ticks:
                    return False  # the pid was re-used by another process
            elif self.create_time is not None and abs(proc.create_time() - self.create_time) > 1.0:
                return False  # (a run recorded by an earlier version: its wall-clock start time)
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def state(self, now: float) -> WorkerState:
        """Observe the process; records exit code and finish time the first time it is seen ended."""
        if self.pid is None:
            return WorkerState.PENDING
        if self.exit_code is None and self.finished_at is None and self.alive():
            return WorkerState.RUNNING
        if self.finished_at is None:
            self._record_exit(now)
        if self.exit_code == 0 and self.reason != WorkerReason.OOM_KILLED:
            return WorkerState.SUCCEEDED
        if self.stopped:
            return WorkerState.STOPPED
        if self.exit_code is None:
            return WorkerState.LOST
        return WorkerState.FAILED

    def _record_exit(self, now: float) -> None:
        try:
            self.exit_code, self.signal, self.finished_at = self._status(now)
        except (OSError, ValueError, KeyError, TypeError, OverflowError):
            rc = self.popen.returncode if self.popen is not None else None
            if rc is not None and not self.stopped:  # the launcher itself ended without a status
                self.exit_code, self.signal = (128 - rc, -rc) if rc < 0 else (rc, None)
            self.finished_at = now
        self._end_cgroup()

    def _end_cgroup(self) -> None:
        """The run has ended: what its cgroup saw (``read_cgroup``), then nothing of it is left
        (whatever it left behind is killed) and the cgroup goes; unless the platform is stopping it
        (``stopped``): what is left then has its whole grace period (``stop_group`` ends it)."""
        self.read_cgroup()
        if not self.stopped:
            self.release_cgroup()

    def read_cgroup(self) -> None:
        """What the run's cgroup saw, as the worker's reason and message: an OOM kill that ended
        the run (``OOMKilled``), OOM kills of some of its processes, forks refused at the pids limit."""
        cg = self.cgroup
        if cg is None:
            return
        notes = []
        limit = describe_memory(self.limits.memory) if self.limits.memory else "its limit"
        oom = cg.oom_kills()
        if oom and not self.stopped and (self.exit_code in (None, 137) or self.signal == 9):
            self.reason = WorkerReason.OOM_KILLED
            notes.append(f"killed for using more memory than its limit {limit} (submit --memory)")
            if self.exit_code is None:  # the kernel took the launcher itself: no status written
                self.exit_code, self.signal = 137, 9
        elif oom:
            notes.append(f"{oom} of its processes were killed for using more memory than its limit {limit}")
        refused = cg.pids_refused()
        if refused:
            pids = f" ({self.limits.pids})" if self.limits.pids else ""
            notes.append(f"{refused} process or thread creations refused at the process limit{pids}")
        self.message = "; ".join(notes)

    def release_cgroup(self) -> None:
        """Kill what is left in the run's cgroup and remove it."""
        if self.cgroup is not None:
            with contextlib.suppress(CgroupError):  # gone already: nothing is left to do
                self.cgroup.remove()
            self.cgroup = None

    def _status(self, now: float) -> tuple[int, int | None, float]:
        """(exit code, signal, finish time) from the launcher's status file. The file lies where the
        job can write, so anything but a well-formed status is refused (ValueError)."""
        try:
            raw = read_status(self.status_file)
        except FileNotFoundError:  # a run started by a version that wrote run/<worker>.exit.json
            raw = read_status(self.run_dir / f"{self.name}.exit.json")
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("the status is not an object")
        code, sig = int(data["exit_code"]), int(data.get("signal") or 0)
        finished = float(data.get("finished_at", now))
        if not (0 <= code <= 255 and 0 <= sig < 128):
            raise ValueError("exit code or signal out of range")
        return code, sig or None, finished if math.isfinite(finished) else now


def watch_exit(w: WorkerProc, wake: Callable[[], None]) -> None:
    """Call ``wake`` once the spawned process ``w`` has ended (it is left for ``Popen`` to reap)."""
    pid = w.pid

    def run() -> None:
        if pid is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        wake()

    threading.Thread(target=run, name=f"watch-{w.name}-{pid}", daemon=True).start()


def kill_leftovers(w: WorkerProc) -> None:
    """SIGKILL what an ended worker left behind, in its process group or outside it (children still
    holding its port, torchrun's workers)."""
    if w.pid is not None and (w.popen is None or w.popen.poll() is not None):
        _signal_group(w.pid, signal.SIGKILL)
        w.release_cgroup()
        _kill_tagged([w])


def _tagged(workers: list[WorkerProc]) -> list[int]:
    """The pids of live processes that carry the run tag of one of ``workers``."""
    return tagged_pids({w.tag for w in workers if w.tag})


def tagged_pids(tag_values: set[str]) -> list[int]:
    """The pids of live processes whose environment holds ``RUN_TAG`` = one of ``tag_values``, read
    from this host's ``/proc`` (sandboxed processes included: they are in this pid namespace's view
    too, and the server's user may read their environment)."""
    tags = {f"{RUN_TAG}={t}".encode() for t in tag_values}
    if not tags:
        return []
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # no procfs: only process groups are signalled
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        if tags.intersection(variables):
            found.append(int(entry.name))
    return found


def _kill_tagged(workers: list[WorkerProc]) -> None:
    for pid in _tagged(workers):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group (zombies wait for a slow reaper)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def stop_group(workers: list[WorkerProc], grace: float) -> None:
    """SIGTERM every worker's process group, wait up to ``grace`` s, then SIGKILL what is left (also
    the processes carrying their run tags outside their groups)."""
    live = [w for w in workers if w.pid is not None and _group_alive(w.pid)]
    for w in live:
        w.stopped = True
        assert w.pid is not None
        _signal_group(w.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        for w in live:
            if w.popen is not None:
                w.popen.poll()  # reap the launcher so its group can empty
        live = [w for w in live if w.pid is not None and _group_alive(w.pid)]
        if live:
            time.sleep(0.05)
    for w in live:
        assert w.pid is not None
        _signal_group(w.pid, signal.SIGKILL)
    for w in workers:
        if w.cgroup is not None:  # nothing of the run escapes its cgroup
            w.cgroup.kill_all()
    _kill_tagged(workers)
    for w in workers:
        if w.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.popen.wait(timeout=5)
        w.read_cgroup()
        w.release_cgroup()
