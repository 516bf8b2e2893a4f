"""A backend whose "engine" is a Python object: workers are records whose lifecycle the test drives.

    MemoryEngine (outlives a backend: what a real engine keeps across a server restart)
      jobs: key -> _Job(launch, workers: name -> _Worker(state, run, logs per run, node, endpoint))
      foreign: node -> Resources held by "other users"; failures: (method, key) -> exception
    MemoryBackend(settings)  the contract over the engine

Start order as the contract asks: ``start`` records the job's workers Pending; ``sync`` starts the
pservers (Running) and, once every pserver runs, the trainers (``auto_run``; without it the test
calls ``engine.run``). ``engine.exit(key, worker, code)`` ends a worker (``Succeeded`` on 0, else
``Failed``, which fails the job as a local worker's failure does); ``stop`` ends every worker
``Stopped``. SampleSets: ``backends/memory/samplesets.py`` (``backend.samplesets``; a job launched
with one must find it mounted on its nodes). ``engine.log`` appends a line to the worker's current
run. ``engine.fail(method, key, exc)`` makes that call raise ``exc`` (once, or ``times``).
``engine.write(key, place, n)`` stands for a job writing ``n`` bytes into its own folders
(``"scratch"``: copies and /tmp, dropped when the job ends; ``"logs"``: kept until ``forget``):
``disk_usage`` reports their sum.
Endpoints are ``<node>:<port>``, ports counted from 40000 per engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from paddlecloud.backends.base import (
    BackendEvent,
    BackendSetup,
    Capability,
    Confinement,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
    WorkerStatus,
)
from paddlecloud.backends.errors import JobRejected, NotSupported
from paddlecloud.backends.memory.samplesets import MemorySampleSets, MemoryVolumes
from paddlecloud.backends.start_sequence import SERVER_ROLES, Seen, Stage, Step, next_step
from paddlecloud.core.phases import ENDED_WORKER_STATES, WorkerReason, WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["MemoryBackend", "MemoryEngine", "MemorySettings", "create"]

#: what the memory backend declares by default: every capability but those that need more of the
#: platform or the test (foreign load, a package URL) and whole-CPU allocation (its nodes give
#: millicores, as the local backend's do); nor images: its workers run nothing (a test that wants a
#: launch's image declares ``images``)
ALL = frozenset(Capability) - {
    Capability.SHARED_CAPACITY,
    Capability.FETCH_PACKAGE,
    Capability.WHOLE_CPUS,
    Capability.STORE_WORKER,
    Capability.IMAGES,
}


@dataclass
class _Worker:
    name: str
    role: str
    index: int
    node: str
    endpoint: str
    state: WorkerState = WorkerState.PENDING
    run: int = 0
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    #: lines per run
    logs: list[list[bytes]] = field(default_factory=lambda: [[]])
    reason: WorkerReason = WorkerReason.NONE
    message: str = ""

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            self.name, self.role, self.index, self.state, node=self.node, endpoint=self.endpoint,
            restarts=self.run, exit_code=self.exit_code, started_at=self.started_at,
            finished_at=self.finished_at, log_path=f"memory:{self.name}.{self.run}",
            reason=self.reason, message=self.message,
        )  # fmt: skip


@dataclass
class _Job:
    launch: JobLaunch
    workers: dict[str, _Worker]
    failure: str | None = None
    failure_reason: str = "WorkerFailed"
    stopped: bool = False
    events: list[BackendEvent] = field(default_factory=list)
    #: bytes in the job's own folders by place ("scratch", "logs")
    disk: dict[str, int] = field(default_factory=dict)

    def finished(self) -> bool:
        return all(w.state in ENDED_WORKER_STATES for w in self.workers.values())


class MemoryEngine:
    """What the memory backend runs on; a test holds it to drive workers and inject trouble."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.jobs: dict[str, _Job] = {}
        self.foreign: dict[str, Resources] = {}
        self.notes: dict[str, str] = {}
        #: SampleSet volumes (``backends.memory.samplesets``): they outlive a backend, as on disk
        self.volumes = MemoryVolumes()
        self._failures: dict[tuple[str, str], tuple[BaseException, int]] = {}
        self._ports = 40000
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)

    # -- what a test does ------------------------------------------------------------------------

    def fail(self, method: str, key: str, exc: BaseException, times: int = 1) -> None:
        """Make the backend's ``method`` raise ``exc`` for job ``key`` (``times`` calls; -1: always)."""
        self._failures[(method, key)] = (exc, times)

    def run(self, key: str, worker: str) -> None:
        with self.lock:
            w = self.jobs[key].workers[worker]
            w.state, w.started_at = WorkerState.RUNNING, self.now()
            self.changed.notify_all()

    def log(self, key: str, worker: str, line: str) -> None:
        with self.lock:
            self.jobs[key].workers[worker].logs[-1].append(line.encode() + b"\n")
            self.changed.notify_all()

    def exit(self, key: str, worker: str, code: int, reason: WorkerReason = WorkerReason.NONE,
             message: str = "") -> None:  # fmt: skip
        """``worker``'s run ends with ``code`` (and why, as a backend that knows more says it:
        ``OOMKilled`` and the limit); a failure fails the job, with ``reason`` when given."""
        with self.lock:
            job = self.jobs[key]
            w = job.workers[worker]
            w.state = WorkerState.SUCCEEDED if code == 0 else WorkerState.FAILED
            w.exit_code, w.finished_at, w.reason, w.message = code, self.now(), reason, message
            if code != 0 and job.failure is None:
                job.failure = f"{worker} exited with code {code}" + (f": {message}" if message else "")
                job.failure_reason = str(reason) or "WorkerFailed"
            self.changed.notify_all()

    def write(self, key: str, place: str, n: int) -> None:
        """The job wrote ``n`` more bytes into its folders' ``place`` (``scratch`` or ``logs``)."""
        with self.lock:
            job = self.jobs[key]
            job.disk[place] = job.disk.get(place, 0) + n

    def restart(self, key: str, worker: str) -> None:
        """A new run of ``worker`` (its earlier run's log kept, for ``logs --previous``)."""
        with self.lock:
            w = self.jobs[key].workers[worker]
            w.run, w.state, w.exit_code, w.finished_at = w.run + 1, WorkerState.RUNNING, None, None
            w.reason, w.message = WorkerReason.NONE, ""
            w.logs.append([])
            self.changed.notify_all()

    def running(self, key: str | None = None) -> list[str]:
        """Workers that are not ended, as ``key/worker`` (of one job, or of every job)."""
        with self.lock:
            return [
                f"{k}/{w.name}"
                for k, j in self.jobs.items()
                if key in (None, k)
                for w in j.workers.values()
                if w.state not in ENDED_WORKER_STATES
            ]

    # -- for the backend -------------------------------------------------------------------------

    def check(self, method: str, key: str) -> None:
        found = self._failures.get((method, key))
        if found is None:
            return
        exc, times = found
        if times > 0:
            if times == 1:
                del self._failures[(method, key)]
            else:
                self._failures[(method, key)] = (exc, times - 1)
        raise exc

    def port(self) -> int:
        self._ports += 1
        return self._ports


@dataclass(frozen=True)
class MemorySettings:
    nodes: tuple[NodeInfo, ...] = (NodeInfo("mem-0", Resources(4000, 8 * 2**30)),)
    capabilities: frozenset[Capability] = ALL
    #: start pservers, then trainers, at ``sync`` (False: the test calls ``engine.run``)
    auto_run: bool = True
    #: the engine (None: a new one per backend, so nothing survives a restart)
    engine: MemoryEngine | None = None

    OPTIONS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> MemorySettings:
        return cls()


class MemoryBackend:
    name = "memory"

    def __init__(
        self, settings: MemorySettings | None = None, wake: Callable[[], None] = lambda: None
    ) -> None:
        self.settings = settings = settings or MemorySettings()
        self.capabilities = settings.capabilities
        self.engine = settings.engine or MemoryEngine()
        self._wake = wake
        #: the jobs this backend has taken on (started or adopted): what a restart loses
        self._mine: set[str] = set()
        #: SampleSets (``Capability.SAMPLESETS``): volumes in the engine, tasks here
        self.samplesets = MemorySampleSets(self.engine.volumes, tuple(n.name for n in settings.nodes))

    def _need(self, capability: Capability, operation: str) -> None:
        if capability not in self.capabilities:
            raise NotSupported(self.name, operation)

    def _job(self, key: str) -> _Job | None:
        return self.engine.jobs.get(key) if key in self._mine else None

    # -- contract ---------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        if Capability.SHARED_CAPACITY not in self.capabilities:
            return self.settings.nodes
        e = self.engine
        return tuple(
            NodeInfo(
                n.name,
                n.capacity,
                n.gpus,
                foreign=e.foreign.get(n.name, Resources()),
                note=e.notes.get(n.name, ""),
            )
            for n in self.settings.nodes
        )

    def start(self, launch: JobLaunch) -> None:
        with self.engine.lock:
            self.engine.check("start", launch.key)
            known = {n.name for n in self.settings.nodes}
            if any(p.node not in known for p in launch.placement):
                raise JobRejected(f"no node {sorted({p.node for p in launch.placement} - known)} here")
            if launch.sampleset is not None:
                self._need(Capability.SAMPLESETS, "jobs that read a SampleSet")
                self.samplesets.check_launch(launch)
            self.engine.jobs[launch.key] = _Job(launch, {})
            for p in launch.placement:
                self._add(self.engine.jobs[launch.key], p)
            self._mine.add(launch.key)

    def _add(self, job: _Job, p: WorkerPlacement) -> None:
        name = f"{p.role}-{p.index}"
        job.workers[name] = _Worker(name, p.role, p.index, p.node, f"{p.node}:{self.engine.port()}")

    def adopt(self, launch: JobLaunch) -> None:
        self._need(Capability.ADOPT, "taking over a job after a restart")
        with self.engine.lock:
            self.engine.check("adopt", launch.key)
            if launch.key in self.engine.jobs:
                self._mine.add(launch.key)
            else:
                self.start(launch)

    def sync(self, key: str) -> JobStatus:
        with self.engine.lock:
            self.engine.check("sync", key)
            job = self._job(key)
            if job is None:
                return JobStatus(failure="the backend has no record of this job", finished=True)
            if self.settings.auto_run and not job.stopped and job.failure is None:
                self._advance(job)
            if job.finished():  # retention: scratch goes when the job ends, logs stay
                job.disk.pop("scratch", None)
            events, job.events = tuple(job.events), []
            return JobStatus(
                workers=tuple(w.status() for w in job.workers.values()),
                failure=job.failure,
                failure_reason=job.failure_reason,
                finished=job.finished(),
                events=events,
            )

    def _advance(self, job: _Job) -> None:
        """The start sequence (``backends.start_sequence``): servers run at once (a running one
        listens), trainers once every server runs."""
        ws = job.workers.values()
        seen = [
            Seen(name, w.role, w.state, w.state == WorkerState.RUNNING) for name, w in job.workers.items()
        ]
        servers_up = next_step(Stage.PSERVERS, seen) == Step.START_TRAINERS
        for w in ws:
            if w.state == WorkerState.PENDING and (w.role in SERVER_ROLES or servers_up):
                w.state, w.started_at = WorkerState.RUNNING, self.engine.now()

    def stop(self, key: str, grace: float) -> None:
        with self.engine.lock:
            self.engine.check("stop", key)
            job = self.engine.jobs.get(key)
            if job is None:
                return
            job.stopped = True
            for w in job.workers.values():
                if w.state not in ENDED_WORKER_STATES:
                    w.state, w.finished_at = WorkerState.STOPPED, self.engine.now()
            job.disk.pop("scratch", None)  # retention: the job ended
            self.engine.changed.notify_all()

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        self._need(Capability.RESIZE, "adding a trainer to a running job")
        if placement.role != "trainer":
            raise NotSupported(self.name, f"adding a {placement.role} to a running job")
        with self.engine.lock:
            self.engine.check("add_trainer", key)
            job = self._job(key)
            if job is None:
                raise JobRejected(f"cannot add trainer-{placement.index} to {key}: no such job here")
            self._add(job, placement)
            job.events.append(BackendEvent("Normal", "TrainerAdded", f"trainer-{placement.index}"))

    def remove_trainer(self, key: str, grace: float) -> None:
        self._need(Capability.RESIZE, "removing a trainer from a running job")
        with self.engine.lock:
            self.engine.check("remove_trainer", key)
            job = self._job(key)
            live = [
                w
                for w in (job.workers.values() if job else ())
                if w.role == "trainer" and w.state not in ENDED_WORKER_STATES
            ]
            if job is None or not live:
                return
            top = max(live, key=lambda w: w.index)
            top.state, top.finished_at = WorkerState.STOPPED, self.engine.now()
            job.events.append(BackendEvent("Normal", "TrainerRemoved", top.name))

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        if req.previous:
            self._need(Capability.LOGS_PREVIOUS, "the logs of earlier runs")
        if req.follow:
            self._need(Capability.LOGS_FOLLOW, "following logs")
        return self._lines(req)

    def _lines(self, req: LogRequest) -> Iterator[bytes]:
        prefix = len(req.workers) > 1
        for name in req.workers:
            sent = 0
            while True:
                with self.engine.lock:
                    job = self.engine.jobs.get(req.key)
                    w = job.workers.get(name) if job else None
                    if w is None:
                        break
                    runs = w.logs[:-1] if req.previous else w.logs
                    lines = runs[-1] if runs else []
                    if req.tail is not None and not req.follow:
                        lines = lines[len(lines) - req.tail :] if req.tail else []
                    new, sent = lines[sent:], len(lines)
                    ended = w.state in ENDED_WORKER_STATES or not req.follow or req.previous
                for line in new:
                    yield (f"[{name}] ".encode() if prefix else b"") + line
                if ended:
                    break
                with self.engine.lock:
                    self.engine.changed.wait(0.2)

    def disk_usage(self, key: str) -> Iterator[int]:
        self._need(Capability.DISK_USAGE, "measuring a job's folders")
        with self.engine.lock:
            self.engine.check("disk_usage", key)
            job = self.engine.jobs.get(key)
            total = sum(job.disk.values()) if job is not None else 0
        return iter((total,))

    def forget(self, key: str) -> None:
        with self.engine.lock:
            self.engine.jobs.pop(key, None)
            self._mine.discard(key)

    def confinement(self) -> Confinement:
        return Confinement("none: in-memory workers run no code", True)

    def close(self) -> None:
        """SampleSets are unmounted; the engine (its jobs, the volumes) lives on."""
        self.samplesets.close()


def create(setup: BackendSetup) -> MemoryBackend:
    """The registry's factory (registered by tests that want ``backend="memory"``)."""
    return MemoryBackend(setup.settings, setup.wake)
