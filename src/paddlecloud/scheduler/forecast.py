"""When will each job start, and end? The policy run forward from a snapshot, on what is known.

    Snapshot (now) + Work per job (how much it has left, how sure that is, how fast it goes)
      ─▶ round: policy.schedule(snapshot) ─▶ advance_states (scheduler.apply, as the simulator does)
               ─▶ running jobs progress; a job that runs out of work ends (its resources are
                  free from the next round, as in the simulator and the server)
               ─▶ the next snapshot (nodes re-counted, attained service grown)
      ─▶ Forecast: per job an :class:`Estimate` (start, end, and the least certain knowledge each
         rests on), how far the run reached and whether it reached every job's end

No job arrives in a forecast (it knows only the jobs of the snapshot), so a later job that the
policy puts first (priority, least attained service) is what makes a start come later than
estimated. Everything else is the policy's own decisions on the durations it is given.

Steps. The first rounds are ``round_s`` apart; a round then jumps to the next end of a running
job (rounded up to ``round_s``), but never further than ``growth`` x the time forecast so far, so
the near future is forecast round by round and a forecast a day ahead costs tens of rounds, not
thousands. A forecast stops when every job has ended, when nothing runs and nothing can start,
after ``max_rounds`` rounds, when ``out_of_time()`` says so (the caller's wall-clock budget: this
package reads no clock), or once every job of ``until`` has started (``until_end``: ended). A job
still running then is given the end its speed at that point gives (no later resize or preemption
foreseen); a job that has not started has ``start`` / ``end`` None: "not before ``Forecast.horizon``".

How sure (:class:`Basis`, from surest to least sure): ``profile`` (a measured throughput model:
the simulator), ``learned`` (measured progress of this run, e.g. its task master's), ``declared``
(the user's ``expected_duration``), ``unknown`` (a default assumed). A start rests on the ends of the
jobs that ended before it in the forecast (the least sure of them; None when it rests on none, e.g.
it starts at once); an end also on the job's own work.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from paddlecloud.scheduler.apply import JobState, advance_states
from paddlecloud.scheduler.decisions import Plan, WorkerPlacement
from paddlecloud.scheduler.snapshot import JobRequest, NodeState, Snapshot

__all__ = [
    "Basis",
    "Estimate",
    "Forecast",
    "ForecastConfig",
    "Work",
    "forecast",
    "learned_work",
    "least_sure",
    "seconds_work",
]


class Basis(StrEnum):
    PROFILE = "profile"
    LEARNED = "learned"
    DECLARED = "declared"
    UNKNOWN = "unknown"


_ORDER = {b: i for i, b in enumerate(Basis)}


def least_sure(a: Basis | None, b: Basis | None) -> Basis | None:
    """The less certain of two bases (None: rests on nothing)."""
    if a is None or b is None:
        return b if a is None else a
    return a if _ORDER[a] >= _ORDER[b] else b


@dataclass(frozen=True)
class Work:
    """What is known of how much a job has left to do."""

    #: work left: in ``speed``'s units, or (``speed`` None) in seconds at its requested trainer count
    left: float
    basis: Basis
    #: work per second on (trainers, nodes they span); None: ``JobRequest.rate(n) / rate(trainers)``
    speed: Callable[[int, int], float] | None = None
    #: it makes no progress before this time (starting up)
    paused_until: float = 0.0


@dataclass(frozen=True)
class Estimate:
    #: None: not within the forecast (not before ``Forecast.horizon``)
    start: float | None
    end: float | None
    #: the least certain knowledge the start rests on (None: none, e.g. it starts at once)
    start_basis: Basis | None
    end_basis: Basis | None


@dataclass(frozen=True)
class ForecastConfig:
    round_s: float = 60.0
    #: seconds without progress after a start or a resize
    restart_s: float = 30.0
    #: a round jumps at most this fraction of the time forecast so far (at least ``round_s``)
    growth: float = 0.1
    max_rounds: int = 400


@dataclass(frozen=True)
class Forecast:
    made_at: float
    #: the time the forward run reached
    horizon: float
    rounds: int
    #: every job's end was reached
    complete: bool
    estimates: Mapping[str, Estimate] = field(default_factory=dict)


@dataclass(kw_only=True)
class _Job(JobState):
    req: JobRequest
    work: Work
    left: float
    attained: float
    start_basis: Basis | None = None
    end: float | None = None
    end_basis: Basis | None = None
    #: trainers and work per second on the placement last seen (``sync``)
    n: int = 0
    speed: float = 0.0
    _seen: tuple[WorkerPlacement, ...] | None = field(default=None, repr=False)
    #: every worker it holds (pservers, then trainers), recounted with the placement
    held: tuple[WorkerPlacement, ...] = ()

    def sync(self) -> None:
        """Recount what depends on the placement, once per change of it."""
        if self._seen is self.placement:
            return
        self._seen = self.placement
        self.held = (*self.pservers, *self.placement) if self.pservers else self.placement
        trainers = self.placement
        self.n = n = len(trainers)
        if self.work.speed is not None:
            self.speed = self.work.speed(n, len({p.node for p in trainers})) if n else 0.0
        else:
            self.speed = self.req.rate(n) / (self.req.rate(self.req.trainers) or 1.0)

    def finish_after(self, t: float) -> float:
        """When it would end if nothing changed from ``t`` (inf: it makes no progress)."""
        return max(t, self.paused_until) + self.left / self.speed if self.speed > 0 else math.inf


def _with(req: JobRequest, **changes: object) -> JobRequest:
    """``dataclasses.replace`` at a fraction of its cost (one copy per running job per round)."""
    new = object.__new__(JobRequest)
    new.__dict__.update(req.__dict__)
    new.__dict__.update(changes)
    return new


def _ran(req: JobRequest) -> float:
    """Seconds at its requested size that the service it received is worth (linear speed-up)."""
    return req.attained / (max(req.trainer.gpu, 1) * max(req.trainers, 1))


def seconds_work(req: JobRequest, seconds: float, basis: Basis = Basis.DECLARED) -> Work:
    """A job said to need ``seconds`` at its requested size, less what it has run (its attained
    service). One that has run longer than that was wrong: a quarter of it more, ``unknown``."""
    left = seconds - _ran(req)
    if left <= 0 and req.attained > 0:
        return Work(0.25 * seconds, Basis.UNKNOWN)
    return Work(max(left, 0.0), basis)


def learned_work(req: JobRequest, fraction_done: float) -> Work | None:
    """A running job that reports ``fraction_done`` of its work (e.g. its task master): what is
    left at the pace so far; None until it has done 1 % and run a minute."""
    ran = _ran(req)
    if not 0.01 <= fraction_done < 1.0 or ran < 60.0:
        return None
    return Work(ran * (1.0 - fraction_done) / fraction_done, Basis.LEARNED)


class _Run:
    """The forward run's state: what each node holds and has free, and the jobs."""

    def __init__(self, snap: Snapshot, work: Mapping[str, Work], unknown: Work) -> None:
        self.snap, self.t = snap, snap.now
        running = {j.key for j in snap.running}
        self.jobs: dict[str, _Job] = {}
        for req in (*snap.running, *snap.queue):
            w = work.get(req.key, unknown)
            self.jobs[req.key] = job = _Job(
                req=req, work=w, left=max(w.left, 0.0), attained=req.attained,
                placement=tuple(p for p in req.placement if p.role == "trainer"),
                pservers=tuple(p for p in req.placement if p.role != "trainer"),
                batch=req.batch_size,
                first_start=snap.now if req.key in running else None, paused_until=w.paused_until,
                resized_at=req.resized_at, rebatched_at=req.rebatched_at,
            )  # fmt: skip
            job.sync()
        self.queue = [j.key for j in snap.queue]
        self.running = [j.key for j in snap.running]
        self.nodes = {n.name: n for n in snap.nodes}
        self.alloc = {n.name: n.allocated for n in snap.nodes}
        self.free = {n.name: set(n.free_gpus) for n in snap.nodes}
        self.dirty: set[str] = set()

    def move(self, job: _Job, placement: tuple[WorkerPlacement, ...], sign: int) -> None:
        """``placement`` of ``job`` taken (sign 1) or given back (-1) on the nodes."""
        alloc, free = self.alloc, self.free
        for p in placement:
            res = job.req.trainer if p.role == "trainer" else job.req.pserver
            if sign > 0:
                alloc[p.node] = alloc[p.node] + res
                free[p.node].difference_update(p.gpus)
            else:
                alloc[p.node] = alloc[p.node] - res
                free[p.node].update(p.gpus)
            self.dirty.add(p.node)

    def apply(self, plan: Plan, restart_s: float) -> None:
        """``scheduler.apply.advance_states``, the nodes' holdings following the changed placements."""
        touched = [a.job for a in plan.admit] + [z.job for z in plan.resize] + [p.job for p in plan.preempt]
        before = {k: self.jobs[k].held for k in touched}
        advance_states(plan, self.jobs, self.queue, self.running, self.t, restart_s)
        for key, old in before.items():
            job = self.jobs[key]
            self.move(job, old, -1)
            job.sync()
            self.move(job, job.held, 1)

    def snapshot(self, cycle: int) -> Snapshot:
        for name in self.dirty:
            n = self.nodes[name]
            self.nodes[name] = NodeState(name, n.capacity, self.alloc[name], tuple(sorted(self.free[name])))
        self.dirty.clear()
        return dataclasses.replace(
            self.snap, cycle=cycle, now=self.t, nodes=tuple(self.nodes.values()),
            queue=tuple(self._request(k) for k in self.queue),
            running=tuple(self._request(k) for k in self.running),
        )  # fmt: skip

    def _request(self, key: str) -> JobRequest:
        job = self.jobs[key]
        req = job.req
        batch = job.batch if req.batches and job.n else 0  # the batch it trains at (as the simulator's)
        same = req.placement is job.held and req.resized_at == job.resized_at and req.batch_size == batch
        if same and req.attained == job.attained and req.rebatched_at == job.rebatched_at:
            return req
        job.req = _with(
            req, attained=job.attained, placement=job.held, running=job.n, resized_at=job.resized_at,
            rebatched_at=job.rebatched_at, batch_size=batch,
        )  # fmt: skip
        return job.req

    def progress(self, end: float) -> Basis | None:
        """Every running job progresses to ``end``; those that run out of work leave. Returns the
        least sure knowledge among the jobs that ended."""
        ended: Basis | None = None
        still = []
        for key in self.running:
            job = self.jobs[key]
            job.attained += max(job.req.trainer.gpu, 1) * job.n * (end - self.t)
            start, rate = max(self.t, job.paused_until), job.speed
            if start < end and rate > 0 and rate * (end - start) >= job.left:
                job.end, job.left = start + job.left / rate, 0.0
                job.end_basis = least_sure(job.start_basis, job.work.basis)
                ended = least_sure(ended, job.end_basis)
                self.move(job, job.held, -1)
                continue
            if start < end and rate > 0:
                job.left -= rate * (end - start)
            still.append(key)
        self.running = still
        self.t = end
        return ended

    def reached(self, wanted: Collection[str], ended: bool) -> bool:
        """Whether every job of ``wanted`` has started (``ended``: ended)."""
        jobs = [self.jobs[k] for k in wanted if k in self.jobs]
        return all((j.end if ended else j.first_start) is not None for j in jobs)

    def step(self, cfg: ForecastConfig, first: float) -> float:
        """How far the next round is: to the next end, in whole rounds, within the growth bound."""
        nxt = min((self.jobs[k].finish_after(self.t) for k in self.running), default=math.inf)
        cap = max(cfg.round_s, math.floor(cfg.growth * (self.t - first) / cfg.round_s) * cfg.round_s)
        if math.isinf(nxt):
            return cap
        return min(cap, max(cfg.round_s, math.ceil((nxt - self.t) / cfg.round_s - 1e-9) * cfg.round_s))


def forecast(
    schedule: Callable[[Snapshot], Plan],
    snap: Snapshot,
    work: Mapping[str, Work],
    cfg: ForecastConfig | None = None,
    *,
    unknown: Work | None = None,
    until: Collection[str] | None = None,
    until_end: bool = False,
    out_of_time: Callable[[], bool] | None = None,
) -> Forecast:
    """Run ``schedule`` (a policy's) forward from ``snap``; ``work`` by job key (a job without an
    entry gets ``unknown``, by default one hour at its requested size, ``Basis.UNKNOWN``)."""
    cfg = cfg or ForecastConfig()
    run = _Run(snap, work, unknown or Work(3600.0, Basis.UNKNOWN))
    for key in run.running:
        run.jobs[key].start_basis = None
    released: Basis | None = None  # the least sure of the ends so far
    wanted = set(until) if until is not None else None
    rounds = 0
    while run.queue or run.running:
        if rounds >= cfg.max_rounds or (rounds and out_of_time is not None and out_of_time()):
            break
        plan = schedule(run.snapshot(snap.cycle + rounds))
        rounds += 1
        for a in plan.admit:
            if run.jobs[a.job].first_start is None:
                run.jobs[a.job].start_basis = released
        run.apply(plan, cfg.restart_s)
        if wanted is not None and run.reached(wanted, until_end):
            break
        if not run.running:
            break  # nothing runs and nothing could start: nothing will change
        released = least_sure(released, run.progress(run.t + run.step(cfg, snap.now)))
    for key in run.running:  # still running where the forecast stopped: at the speed it has then
        job = run.jobs[key]
        if job.speed > 0:
            job.end, job.end_basis = job.finish_after(run.t), least_sure(job.start_basis, job.work.basis)
    estimates = {
        key: Estimate(
            start=job.first_start,
            end=job.end,
            start_basis=job.start_basis if job.first_start is not None else None,
            end_basis=job.end_basis,
        )
        for key, job in run.jobs.items()
    }
    done = not run.queue and not run.running
    return Forecast(made_at=snap.now, horizon=run.t, rounds=rounds, complete=done, estimates=estimates)
