"""The platform's Prometheus metrics: one registry per platform, scraped at ``GET /metrics``.

    events, counted where they happen                       state, read when scraped
    ─────────────────────────────────────                   ─────────────────────────────────────
    controller.loop.effects    decisions, queueing delay          LiveCollector.collect():
    Reconciler.tick       cycle and scheduling-round time      jobs by user and phase, queue length,
    controller.model.job_rows    worker restarts (backend events)     trainers per running job (database);
    controller.services.files      PFS bytes received / sent            node capacity and allocation (the
    controller.services.tasks      task leases by outcome               reconciler's last view of the nodes)
    server.metrics        API latency by route template
                          ─────────▶ PlatformMetrics ◀─────────
                                        │ exposition()
                                        ▼ text format (prometheus_client.generate_latest)

Every name starts with ``paddlecloud_`` (docs/metrics.md lists each metric, its labels and what it
means). The registry belongs to the platform, never the process-wide default one: several platforms
in one process (the tests) keep their own counts. Labels are bounded: kinds, outcomes, phases, wait
reasons, route templates (never a raw path), node and user names, and running jobs' names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from paddlecloud.controller.model.placement import count_trainers
from paddlecloud.core.phases import JobPhase, WorkerState
from paddlecloud.scheduler import NodeState, WaitReason
from paddlecloud.store.db import Database
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = [
    "CONTENT_TYPE",
    "LEASE_OUTCOMES",
    "RESTART_EVENTS",
    "LiveFigures",
    "PlatformMetrics",
    "live_figures",
]

#: the exposition's media type (Prometheus text format 0.0.4)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: the ``outcome`` label of ``paddlecloud_task_leases_total``: a lease granted, and how leases end
LEASE_OUTCOMES = ("granted", "done", "failed", "expired", "released", "lost")
#: backend events that say a worker was restarted by its restart policy (local and Kubernetes say
#: WorkerRestarted, Slurm WorkerRestarting: the restart is decided, the new run waits for its backoff)
RESTART_EVENTS = frozenset({"WorkerRestarted", "WorkerRestarting"})

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WAITING = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)


@dataclass(frozen=True)
class RunningJob:
    user: str
    name: str
    #: trainers it holds (its placement: an elastic job's count changes with resizes)
    trainers: int
    #: of which in state Running
    running: int


@dataclass(frozen=True)
class LiveFigures:
    """The state the gauges show, read at scrape time."""

    #: (user, phase) -> jobs (every phase, 0 included, for each user with a job)
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    queued: int = 0
    nodes: tuple[NodeState, ...] = ()
    running: tuple[RunningJob, ...] = ()


def live_figures(db: Database, nodes: tuple[NodeState, ...]) -> LiveFigures:
    """Jobs per user and phase, the queue and the running jobs' trainers from the database (grouped
    queries), with ``nodes`` as the reconciler last saw them."""
    by_phase = select(JobRow.user, JobRow.phase, func.count()).group_by(JobRow.user, JobRow.phase)
    waiting = select(func.count()).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
    trainers_running = (
        select(WorkerRow.job_id, func.count())
        .join(JobRow, WorkerRow.job_id == JobRow.id)
        .where(
            JobRow.phase == JobPhase.RUNNING,
            WorkerRow.role == "trainer",
            WorkerRow.state == WorkerState.RUNNING,
        )
        .group_by(WorkerRow.job_id)
    )
    placed = select(JobRow.id, JobRow.user, JobRow.name, JobRow.placement).where(
        JobRow.phase == JobPhase.RUNNING
    )
    jobs: dict[tuple[str, str], int] = {}
    with db.session() as s:
        for user, phase, count in s.execute(by_phase):
            for p in JobPhase:
                jobs.setdefault((user, str(p)), 0)
            jobs[(user, phase)] = count
        queued = s.scalar(waiting) or 0
        running_by_job = {job_id: count for job_id, count in s.execute(trainers_running)}
        running = tuple(
            RunningJob(
                user,
                name,
                trainers=count_trainers(placement),
                running=running_by_job.get(job_id, 0),
            )
            for job_id, user, name, placement in s.execute(placed)
        )
    return LiveFigures(jobs=jobs, queued=queued, nodes=nodes, running=running)


class LiveCollector(Collector):
    """The gauges, computed from ``source()`` at each scrape."""

    def __init__(self, source: Callable[[], LiveFigures]) -> None:
        self.source = source

    def describe(self) -> Iterable[Metric]:  # the names, without reading any state
        return list(self._families(LiveFigures()))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self.source()))

    @staticmethod
    def _families(f: LiveFigures) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "paddlecloud_jobs", "Jobs in the history by user and phase", labels=["user", "phase"]
        )
        for (user, phase), count in sorted(f.jobs.items()):
            jobs.add_metric([user, phase], count)
        yield jobs
        yield GaugeMetricFamily(
            "paddlecloud_queue_length", "Jobs waiting to be admitted (Queued)", value=f.queued
        )
        cap = GaugeMetricFamily(
            "paddlecloud_node_capacity",
            "What a node offers jobs (cpu: cores, memory: bytes, gpu: devices)",
            labels=["node", "resource"],
        )
        alloc = GaugeMetricFamily(
            "paddlecloud_node_allocated",
            "What the scheduler counts as held on a node (jobs' placements, and on an engine shared "
            "with other work that work's load)",
            labels=["node", "resource"],
        )
        for n in f.nodes:
            for family, r in ((cap, n.capacity), (alloc, n.allocated)):
                family.add_metric([n.name, "cpu"], r.cpu_m / 1000)
                family.add_metric([n.name, "memory"], r.memory)
                family.add_metric([n.name, "gpu"], r.gpu)
        yield cap
        yield alloc
        trainers = GaugeMetricFamily(
            "paddlecloud_job_trainers", "Trainers each Running job holds", labels=["user", "job"]
        )
        running = GaugeMetricFamily(
            "paddlecloud_job_trainers_running",
            "Trainers of each Running job in state Running",
            labels=["user", "job"],
        )
        for j in f.running:
            trainers.add_metric([j.user, j.name], j.trainers)
            running.add_metric([j.user, j.name], j.running)
        yield trainers
        yield running


class PlatformMetrics:
    """The metric objects of one platform and its registry; the event counters are updated by the
    controller and the server where the events happen."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(namespace="paddlecloud", registry=r)
        self.queueing_delay = Histogram(
            "paddlecloud_queueing_delay_seconds",
            "Seconds from a job's submit to its first admission",
            buckets=_WAITING,
            registry=r,
        )
        self.scheduling_round = Histogram(
            "paddlecloud_scheduling_round_seconds",
            "Seconds the scheduling policy took to decide one cycle's plan",
            buckets=_SECONDS,
            registry=r,
        )
        self.reconcile_cycle = Histogram(
            "paddlecloud_reconcile_cycle_seconds",
            "Seconds one whole reconcile cycle took (observe jobs, schedule, apply the plan)",
            buckets=_SECONDS,
            registry=r,
        )
        self.decisions = Counter(
            "paddlecloud_scheduler_decisions",
            "Scheduling decisions applied, by kind (wait: counted when a job starts waiting or its reason "
            "changes; reason: the wait reason, or Grow / Shrink for a resize)",
            ["kind", "reason"],
            registry=r,
        )
        self.restarts = Counter(
            "paddlecloud_worker_restarts", "Workers restarted by their restart policy", ["user"], registry=r
        )
        self.requests = Histogram(
            "paddlecloud_http_request_duration_seconds",
            "Seconds from a request's arrival to its response's start, by route template and status",
            ["method", "route", "status"],
            buckets=_SECONDS,
            registry=r,
        )
        self.pfs_received = Counter(
            "paddlecloud_pfs_received_bytes", "File bytes received by PFS uploads", registry=r
        )
        self.pfs_sent = Counter("paddlecloud_pfs_sent_bytes", "File bytes sent by PFS downloads", registry=r)
        self.pfs_data_port = Counter(
            "paddlecloud_pfs_data_port_bytes",
            "File bytes moved through the PFS data port (direction: received, sent; included in the "
            "PFS totals)",
            ["direction"],
            registry=r,
        )
        self.task_leases = Counter(
            "paddlecloud_task_leases",
            "Task master leases: granted, and how they ended (done, failed, expired, released when "
            "their worker run ended, lost: a request on a lease that was no longer the caller's)",
            ["outcome"],
            registry=r,
        )
        for kind in ("admit", "preempt"):
            self.decisions.labels(kind, "")
        for reason in WaitReason:
            self.decisions.labels("wait", str(reason))
        for way in ("Grow", "Shrink", "Rebatch"):
            self.decisions.labels("resize", way)
        for outcome in LEASE_OUTCOMES:
            self.task_leases.labels(outcome)
        #: (method, route, status) -> its histogram (bounded as the labels are)
        self._requests: dict[tuple[str, str, int], Histogram] = {}

    def watch(self, source: Callable[[], LiveFigures]) -> None:
        """Serve the gauges from ``source`` (called at each scrape)."""
        self.registry.register(LiveCollector(source))

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)

    # -- events ----------------------------------------------------------------------------------

    def decision(self, kind: str, reason: str = "", n: int = 1) -> None:
        if n:
            self.decisions.labels(kind, reason).inc(n)

    def lease(self, outcome: str, n: int = 1) -> None:
        if n:
            self.task_leases.labels(outcome).inc(n)

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        child = self._requests.get(key)  # a dict lookup instead of labels()' checks: every request
        if child is None:
            child = self._requests[key] = self.requests.labels(method, route, str(status))
        child.observe(seconds)
