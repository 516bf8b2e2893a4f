"""What the console's pages show, gathered from the controller's view functions (the same ones the
REST routes call) and arranged for the templates. No decisions about jobs here: only grouping,
ordering and bounding what a page lists.

    unfinished_jobs, finished_jobs       JobService.list_json of the unfinished jobs (cached),
                                         JobService.finished (one page of the history)
      ─▶ jobs_page(...)                  ─▶ waiting / active / finished
    job_page(platform, who, name, user)  JobService.get + TaskService.status + FileService.listdir
    trainer_chart, cluster_chart         JobService.trainers_history, History ─▶ uPlot columns
    log_tail / log_live(platform, who, q)  JobService.logs (a bounded tail); JobService.workers:
                                         may more come?
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.api.files import FileInfo
from paddlecloud.api.models import JobDetail, JobList, JobView, WorkerView
from paddlecloud.api.tasks import TaskSummary
from paddlecloud.backends.base import Capability
from paddlecloud.controller import Identity, Platform
from paddlecloud.controller.services.jobs import JobListQuery
from paddlecloud.controller.services.tasks import TaskPage
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, WorkerState

__all__ = [
    "FINISHED_PAGE",
    "MAX_EVENTS",
    "MAX_FINISHED",
    "MAX_LOG_BYTES",
    "MAX_OUTPUTS",
    "PHASE_FILTERS",
    "FinishedPage",
    "JobPageData",
    "JobsFilter",
    "JobsPageData",
    "LogQuery",
    "cluster_chart",
    "finished_jobs",
    "job_page",
    "job_users",
    "jobs_page",
    "log_live",
    "log_tail",
    "trainer_chart",
    "unfinished_jobs",
]

#: finished jobs listed by default, and at most (``?limit=``)
FINISHED_PAGE = 50
MAX_FINISHED = 1000
#: the newest events a job page shows, output files it lists, bytes of log it sends
MAX_EVENTS = 300
MAX_OUTPUTS = 200
MAX_LOG_BYTES = 512 * 1024

ACTIVE = frozenset({JobPhase.STARTING, JobPhase.RUNNING, JobPhase.PREEMPTING})
PHASE_FILTERS: dict[str, frozenset[JobPhase]] = {
    "": frozenset(JobPhase),
    "waiting": frozenset({JobPhase.QUEUED}),
    "active": ACTIVE,
    "finished": frozenset(TERMINAL_PHASES),
    **{str(p): frozenset({p}) for p in JobPhase},
}
_LIVE_WORKER = frozenset({WorkerState.PENDING, WorkerState.RUNNING, WorkerState.PREEMPTING})


@dataclass(frozen=True)
class JobsFilter:
    """``?phase=`` (a key of PHASE_FILTERS), ``?user=`` (admins: one user's; "" everyone's),
    ``?limit=`` (finished jobs shown)."""

    phase: str = ""
    user: str = ""
    limit: int = FINISHED_PAGE


@dataclass
class JobsPageData:
    waiting: list[JobView]
    active: list[JobView]
    finished: list[JobView]
    finished_total: int
    users: list[str]


@dataclass
class FinishedPage:
    jobs: list[JobView]
    total: int


def _query(who: Identity, f: JobsFilter) -> JobListQuery:
    everyone = who.is_admin and not f.user
    return JobListQuery(all_jobs=False, all_users=everyone, user=None if everyone else (f.user or None))


def unfinished_jobs(platform: Platform, who: Identity, f: JobsFilter) -> list[JobView]:
    """The caller's (admins: everyone's, or ``f.user``'s) jobs not finished yet, in ``f.phase``."""
    q = _query(who, f)
    body = platform.jobs.cached_list(who, q) or platform.jobs.list_json(who, q)
    wanted = PHASE_FILTERS.get(f.phase, PHASE_FILTERS[""])
    return [j for j in JobList.model_validate_json(body).items if j.phase in wanted]


def finished_jobs(platform: Platform, who: Identity, f: JobsFilter) -> FinishedPage:
    """The ``f.limit`` most recently finished of them, and how many finished: one page of the
    history, however long (it changes only with a job's events: its end, its removal)."""
    ended = PHASE_FILTERS.get(f.phase, PHASE_FILTERS[""]) & TERMINAL_PHASES
    if not ended:
        return FinishedPage([], 0)
    return FinishedPage(*platform.jobs.finished(who, _query(who, f), ended, f.limit))


def job_users(platform: Platform, who: Identity) -> list[str]:
    """Admins: every user's name (the Jobs page's filter); others: none."""
    if not who.is_admin:
        return []
    with platform.ctx.session() as s:
        return [u.name for u in platform.users.list_users(s, who).items]


def jobs_page(unfinished: list[JobView], finished: FinishedPage, users: list[str]) -> JobsPageData:
    """The Jobs page's groups: waiting (oldest first: they have waited longest), active, and the
    most recently finished."""
    return JobsPageData(
        waiting=[j for j in unfinished if j.phase == JobPhase.QUEUED],
        active=[j for j in unfinished if j.phase in ACTIVE],
        finished=finished.jobs,
        finished_total=finished.total,
        users=users,
    )


@dataclass
class JobPageData:
    job: JobDetail
    tasks: TaskSummary | None
    outputs: list[FileInfo]
    outputs_total: int
    outputs_error: str
    events_hidden: int
    can_previous: bool
    env: list[tuple[str, str]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.job.phase in TERMINAL_PHASES

    @property
    def workers(self) -> list[WorkerView]:
        return self.job.workers

    @property
    def events(self) -> list[Any]:
        return self.job.events[-MAX_EVENTS:][::-1]  # newest first


def job_page(platform: Platform, who: Identity, name: str, user: str | None) -> JobPageData:
    job = platform.jobs.get(who, name, user)
    tasks = None
    if job.spec.tasks is not None:
        try:
            tasks = platform.tasks.status(who, name, user, TaskPage(limit=0)).summary
        except PaddleCloudError:  # not planned (yet): the page goes on without it
            tasks = None
    outputs: list[FileInfo] = []
    error = ""
    if job.spec.output:
        try:
            outputs = platform.files.listdir(who, job.spec.output, recursive=False)
        except PaddleCloudError as exc:
            error = exc.message if job.phase != JobPhase.QUEUED else ""
    outputs.sort(key=lambda f: (f.type != "dir", f.path))
    return JobPageData(
        job=job,
        tasks=tasks,
        outputs=outputs[:MAX_OUTPUTS],
        outputs_total=len(outputs),
        outputs_error=error,
        events_hidden=max(0, len(job.events) - MAX_EVENTS),
        can_previous=Capability.LOGS_PREVIOUS in platform.ctx.backend.capabilities,
        env=sorted(job.spec.env.items()),
    )


@dataclass(frozen=True)
class LogQuery:
    name: str
    worker: str
    tail: int
    previous: bool = False
    user: str | None = None


def log_tail(platform: Platform, who: Identity, q: LogQuery) -> str:
    """The last ``q.tail`` lines of a worker's log, at most MAX_LOG_BYTES (cut at a line)."""
    chunks = platform.jobs.logs(
        who, q.name, worker=q.worker, tail=q.tail, follow=False, previous=q.previous, user=q.user
    )
    data = b"".join(chunks)
    if len(data) > MAX_LOG_BYTES:
        data = data[-MAX_LOG_BYTES:]
        data = data[data.find(b"\n") + 1 :]
    return data.decode("utf-8", "replace")


def log_live(platform: Platform, who: Identity, q: LogQuery) -> bool:
    """Whether more of the log may come: the worker (for ``prepare``, the job) has not ended."""
    if q.previous:
        return False
    workers = platform.jobs.workers(who, q.name, q.user)
    if not workers:  # queued, or building its environment (``prepare``), unless it ended so
        return platform.jobs.get(who, q.name, q.user).phase not in TERMINAL_PHASES
    if q.worker == "prepare":
        return any(w.state == WorkerState.PENDING for w in workers)
    return any(w.name == q.worker and w.state in _LIVE_WORKER for w in workers)


def trainer_chart(platform: Platform, who: Identity, name: str, user: str | None) -> dict[str, Any]:
    """The job's trainers over time (``History``, via ``JobService.trainers_history``) as uPlot
    columns: a step chart, each point holding until the next."""
    points = platform.jobs.trainers_history(who, name, user).items
    return {
        "x": [p.t for p in points],
        "series": [
            {"label": "trainers", "values": [p.trainers for p in points]},
            {"label": "running", "values": [p.running for p in points]},
        ],
        "step": True,
    }


def cluster_chart(platform: Platform, kind: str) -> dict[str, Any]:
    """The last hour of the cluster (``History.cluster_history``) as uPlot columns: ``util``, the
    share of each resource held (%), or ``queue``, jobs waiting and running."""
    points = platform.history.cluster_history()
    x = [p.t for p in points]
    if kind == "queue":
        return {"x": x, "series": [{"label": "waiting", "values": [p.queued for p in points]},
                                   {"label": "running", "values": [p.running for p in points]}]}  # fmt: skip

    def share(part: float, whole: float) -> float | None:
        return round(100 * part / whole, 1) if whole else None

    series = [
        {"label": "CPU", "values": [share(p.cpu_allocated, p.cpu_capacity) for p in points]},
        {"label": "memory", "values": [share(p.memory_allocated, p.memory_capacity) for p in points]},
    ]
    if any(p.gpu_capacity for p in points):
        series.append({"label": "GPUs", "values": [share(p.gpu_allocated, p.gpu_capacity) for p in points]})
    return {"x": x, "series": series, "unit": "%", "max": 100}
