"""The simulator: a virtual clock, a virtual cluster, and the live scheduler package unchanged.

Every ``round_s`` seconds of virtual time (60 s, as Pollux's simulator):
  1. jobs whose submit time has come join the queue;
  2. a :class:`paddlecloud.scheduler.Snapshot` is built exactly as the live server builds one
     (nodes with what running jobs hold, the queue, the running jobs with their placement, attained
     service and speed-up table), and the named policy returns a Plan;
  3. the plan is applied: admitted jobs start (their pservers, if any, stay where they were placed
     until the job ends or is preempted), resized jobs change trainers, preempted jobs go back
     to the queue keeping their progress (they checkpoint); every start, resize or resume costs
     ``restart_s`` seconds without progress, a batch-only resize ``rebatch_s`` (no restart);
  4. running jobs progress at their measured throughput for their trainer count and placement
     (``sim.profiles``); a job that finishes inside the round finishes at the exact moment;
  5. the round becomes one row of :class:`~paddlecloud.sim.series.Series`: units allocated, units
     useful, jobs queued, jobs running. When nothing waits or runs the clock jumps to the next
     arrival and the gap is one empty row.
The global batch size of a fixed-batch job never changes: a resize only re-splits it (gradient
accumulation in the model). An adaptive-batch job (``SimJob.adaptive``) trains at the batch of its
last Admit / Resize and progresses by the paper's per-epoch gain at that batch (``sim.adaptive``);
its snapshot entry carries the goodput table (``batches``, goodput ``speedup``) for the gradient
noise scale of its current epoch. Fixed-batch jobs take exactly the code path they took before.

Utilisation counts GPUs, or whole CPU cores of CPU-only jobs (trainers and pservers). *Allocated* is
what running jobs hold for the whole round (a job that finishes mid-round holds its GPUs until the
next round, as the scheduler only reallocates then). *Useful* is the part that trained at
single-replica speed: per job, ``GPUs x seconds progressing (not restarting, not finished) x
parallel efficiency``, where the efficiency is ``throughput(n replicas, placement) / (n x
throughput(1 replica))`` at the job's fixed global batch (capped at 1). Both summary ratios divide by
``capacity x busy time`` (rounds in which a job waited or ran).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Policy, Snapshot
from paddlecloud.scheduler.apply import JobState, advance_states
from paddlecloud.sim.adaptive import AdaptiveModel, Tables
from paddlecloud.sim.estimates import EstimateSpec, StartLog, accuracy
from paddlecloud.sim.profiles import AppProfile, ThroughputModel
from paddlecloud.sim.series import Series
from paddlecloud.sim.workload import ClusterSpec, SimJob, job_work, speedup_table

__all__ = ["SimConfig", "SimResult", "simulate", "widen"]


@dataclass(frozen=True)
class SimConfig:
    cluster: ClusterSpec
    round_s: float = 60.0
    restart_s: float = 30.0
    #: a batch-only resize (an adaptive job re-batched on the trainers it holds): the live workers
    #: switch at a step boundary without a restart (poll <= 5 s + agreement <= 10 steps, training on
    #: at the old batch meanwhile); charged as this many seconds without progress
    rebatch_s: float = 5.0
    #: stop after this much virtual time even if jobs remain (they are reported unfinished)
    horizon_s: float = 30 * 86400.0
    #: record each job's start estimate at submit (``sim.estimates``); None: none (faster)
    estimates: EstimateSpec | None = None


@dataclass
class _Run(JobState):
    job: SimJob
    work: float
    done: float = 0.0
    finished: float | None = None
    attained: float = 0.0
    #: throughput of one replica at the job's global batch (set on first progress)
    base_rate: float = 0.0
    #: adaptive-batch jobs: their model and the global batch they train at now
    adaptive: AdaptiveModel | None = None

    @property
    def n(self) -> int:
        return len(self.placement)


@dataclass
class SimResult:
    policy: str
    jct: dict[str, float] = field(default_factory=dict)
    queue_delay: dict[str, float] = field(default_factory=dict)
    #: each job's first start, finished or not (a run cut at the horizon has unfinished ones)
    first_start: dict[str, float] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
    #: first submission to last completion
    makespan: float = 0.0
    allocated_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    busy_s: float = 0.0  # time while any job waited or ran
    resizes: int = 0
    preemptions: int = 0
    series: Series = field(default_factory=Series)
    #: progress in unit-seconds at single-replica speed and initial batch; adaptive jobs' unit-seconds
    #: of training, and the same weighted by their statistical efficiency
    goodput_gpu_s: float = 0.0
    adaptive_gpu_s: float = 0.0
    efficient_gpu_s: float = 0.0
    #: with ``SimConfig.estimates``: per job, its estimated and actual start (``sim.estimates``)
    starts: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def summary(self, capacity_gpus: int) -> dict[str, float]:
        jcts = sorted(self.jct.values())
        waits = sorted(self.queue_delay.values())
        busy = capacity_gpus * self.busy_s
        return {
            "jobs": float(len(jcts)),
            "unfinished": float(len(self.unfinished)),
            "avg_jct_s": _mean(jcts),
            "median_jct_s": statistics.median(jcts) if jcts else 0.0,
            "p99_jct_s": _pct(jcts, 99),
            "avg_queue_s": _mean(waits),
            "p99_queue_s": _pct(waits, 99),
            "makespan_s": self.makespan,
            "gpu_util": self.allocated_gpu_s / busy if busy else 0.0,
            "useful_gpu_util": self.useful_gpu_s / busy if busy else 0.0,
            "resizes": float(self.resizes),
            "preemptions": float(self.preemptions),
            "goodput_util": self.goodput_gpu_s / busy if busy else 0.0,
            "adaptive_stat_eff": self.efficient_gpu_s / self.adaptive_gpu_s if self.adaptive_gpu_s else 0.0,
        } | (accuracy(self.starts) if self.starts else {})


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _pct(xs: Sequence[float], p: float) -> float:
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))
    return xs[k]


def widen(jobs: Sequence[SimJob], models: Mapping[str, ThroughputModel], cap: int) -> list[SimJob]:
    """Elastic variants: 1 .. the most replicas at which each still gets the profile's minimum local
    batch (at most ``cap``); the requested count and the global batch stay as asked."""
    out = []
    for j in jobs:
        hi = max(j.num_replicas, min(models[j.app].max_replicas(j.global_bsz), cap))
        out.append(dataclasses.replace(j, min_replicas=1, max_replicas=hi))
    return out


def simulate(
    jobs: Sequence[SimJob], models: Mapping[str, ThroughputModel], policy: Policy, cfg: SimConfig
) -> SimResult:
    """Replay ``jobs`` under ``policy`` until every job is done or ``cfg.horizon_s`` passes."""
    w = _World(cfg, models, jobs)
    result = SimResult(policy=policy.name)
    log = (
        StartLog(cfg.estimates, policy, models, cfg.cluster.node.gpu, cfg.round_s, cfg.restart_s)
        if cfg.estimates
        else None
    )
    while w.active() and w.t <= cfg.horizon_s:
        arrived = w.arrive()
        w.cycle += 1
        snap = w.snapshot()
        if log is not None:
            log.observe(snap, w.runs, arrived)
        w.apply(policy.schedule(snap))
        w.progress(result)
        w.skip_idle(result.series)
    result.unfinished = [n for n, r in w.runs.items() if r.finished is None]
    result.first_start = {n: r.first_start for n, r in w.runs.items() if r.first_start is not None}
    result.resizes = sum(r.resizes for r in w.runs.values())
    result.preemptions = sum(r.preemptions for r in w.runs.values())
    if log is not None:
        result.starts = log.per_job(w.runs)
    return result


class _World:
    """The virtual cluster's state between rounds: the clock, the queue, the running jobs."""

    def __init__(self, cfg: SimConfig, models: Mapping[str, ThroughputModel], jobs: Sequence[SimJob]) -> None:
        self.cfg, self.models = cfg, models
        self.names = [f"node-{i}" for i in range(cfg.cluster.nodes)]
        self.runs = {j.name: _Run(j, job_work(j, models)) for j in jobs}
        self.tables = _adaptive_runs(self.runs, models, cfg.cluster.node.gpu or 4)
        self.pending = sorted(jobs, key=lambda j: j.submit_time)
        self.speedups: dict[tuple[str, int, int], tuple[float, ...]] = {}
        self.queued: list[str] = []
        self.running: list[str] = []
        self.t = self.pending[0].submit_time if self.pending else 0.0
        self.first = self.t
        self.cycle = self.nxt = 0

    def active(self) -> bool:
        return self.nxt < len(self.pending) or bool(self.queued) or bool(self.running)

    def arrive(self) -> list[str]:
        """The jobs whose submit time has come join the queue; returns them."""
        first = self.nxt
        while self.nxt < len(self.pending) and self.pending[self.nxt].submit_time <= self.t:
            self.queued.append(self.pending[self.nxt].name)
            self.nxt += 1
        return [j.name for j in self.pending[first : self.nxt]]

    def snapshot(self) -> Snapshot:
        return _snapshot(
            self.cycle, self.t, self.cfg.cluster, self.names, self.runs, self.queued, self.running,
            self.models, self.speedups, self.tables,
        )  # fmt: skip

    def apply(self, plan: Plan) -> None:
        """Admitted jobs start, resized ones change trainers (both pay ``restart_s``), preempted ones
        go back to the queue with their progress (``scheduler.apply.advance_states``, shared with
        forecasts)."""
        advance_states(
            plan, self.runs, self.queued, self.running, self.t, self.cfg.restart_s, self.cfg.rebatch_s
        )

    def progress(self, result: SimResult) -> None:
        """One round of progress; finished jobs leave; the round's row goes into the series."""
        t, dt = self.t, self.cfg.round_s
        used, useful, holding = 0, 0.0, len(self.running)
        goodput, adaptive, efficient = 0.0, 0.0, 0.0
        for name in list(self.running):
            r = self.runs[name]
            used += r.n * _units(r.job) + len(r.pservers) * _pserver_units(r.job)
            if r.adaptive is None:
                done = _advance(r, t, t + dt, self.models)
                useful, goodput = useful + done[0], goodput + done[1]
            else:
                u, g, e = _advance_adaptive(r, t, t + dt, r.adaptive)
                useful, goodput = useful + u, goodput + g
                adaptive, efficient = adaptive + e[0], efficient + e[1]
            if r.finished is not None:
                self.running.remove(name)
                result.jct[name] = r.finished - r.job.submit_time
                result.queue_delay[name] = (r.first_start or r.job.submit_time) - r.job.submit_time
                result.makespan = max(result.makespan, r.finished - self.first)
        result.allocated_gpu_s += used * dt
        result.useful_gpu_s += useful
        result.busy_s += dt if (self.queued or holding) else 0.0
        result.series.add(t, dt, float(used), useful / dt, len(self.queued), holding,
                          (goodput / dt, adaptive / dt, efficient / dt))  # fmt: skip
        result.goodput_gpu_s += goodput
        result.adaptive_gpu_s, result.efficient_gpu_s = (
            result.adaptive_gpu_s + adaptive, result.efficient_gpu_s + efficient)  # fmt: skip
        self.t = t + dt

    def skip_idle(self, series: Series) -> None:
        """Nothing waits or runs: jump to the next arrival (the gap is one empty row)."""
        if self.queued or self.running or self.nxt >= len(self.pending):
            return
        nxt = self.pending[self.nxt].submit_time
        if nxt > self.t:
            series.add(self.t, nxt - self.t, 0.0, 0.0, 0, 0)
            self.t = nxt


def _units(job: SimJob) -> int:
    """What utilisation counts per replica: GPUs, or whole CPU cores on a CPU cluster."""
    return job.gpus_per_replica or max(job.cpu_m_per_replica // 1000, 1)


def _pserver_units(job: SimJob) -> int:
    """What utilisation counts per pserver: whole CPU cores on a CPU cluster (pservers hold no GPU)."""
    return 0 if job.gpus_per_replica else job.cpu_m_per_pserver // 1000


def _advance(r: _Run, t: float, end: float, models: Mapping[str, ThroughputModel]) -> tuple[float, float]:
    """Progress ``r`` over ``[t, end)``; returns the unit-seconds it did at single-replica speed,
    ``(useful, goodput)``: useful caps the parallel efficiency at 1 (see the module doc)."""
    units = r.n * _units(r.job)
    r.attained += units * (end - t)
    start = max(t, r.paused_until)
    if start >= end or r.n == 0:
        return 0.0, 0.0
    model = models[r.job.app]
    nodes = len({p.node for p in r.placement})
    rate = model.throughput(r.n, nodes, r.job.global_bsz)
    need = r.work - r.done
    stop = end
    if rate * (end - start) >= need:
        r.done = r.work
        r.finished = stop = start + need / rate
    else:
        r.done += rate * (end - start)
    if r.base_rate <= 0.0:
        r.base_rate = model.throughput(1, 1, r.job.global_bsz)
    efficiency = rate / (r.n * r.base_rate) if r.base_rate > 0 else 1.0
    return units * min(1.0, efficiency) * (stop - start), units * efficiency * (stop - start)


def _adaptive_runs(runs: Mapping[str, _Run], models: Mapping[str, ThroughputModel], gpus: int) -> Tables:
    """Give every adaptive job its :class:`AdaptiveModel` (shared per application and initial batch)."""
    shared: dict[tuple[str, int], AdaptiveModel] = {}
    for r in runs.values():
        j = r.job
        if j.adaptive is None:
            continue
        profile = models[j.app]
        if not isinstance(profile, AppProfile):
            raise ValueError(f"{j.name}: adaptive batch sizes need a measured profile, not {j.app!r}")
        key = (j.app, j.global_bsz)
        if key not in shared:
            shared[key] = AdaptiveModel.of(profile, j.global_bsz)
        r.adaptive, r.batch, r.work = shared[key], j.global_bsz, shared[key].work
    return Tables(gpus)


def _advance_adaptive(
    r: _Run, t: float, end: float, m: AdaptiveModel
) -> tuple[float, float, tuple[float, float]]:
    """:func:`_advance` for an adaptive job at ``r.batch``: ``(useful, goodput, (units, units x
    statistical efficiency))`` unit-seconds, the last two over the time it trained."""
    units = r.n * _units(r.job)
    r.attained += units * (end - t)
    start = max(t, r.paused_until)
    if start >= end or r.n == 0:
        return 0.0, 0.0, (0.0, 0.0)
    nodes = len({p.node for p in r.placement})
    rate = m.profile.throughput(r.n, nodes, r.batch)
    epoch = m.epoch(r.done)
    r.done, used = m.advance(r.done, end - start, rate, r.batch)
    if r.done >= r.work:
        r.finished = start + used
    parallel = rate / (r.n * m.profile.throughput(1, 1, r.batch))
    stat = m.efficiency(r.batch, epoch)
    base = m.profile.throughput(1, 1, m.init)
    good = units * rate * stat / (r.n * base) * used
    return units * min(1.0, parallel) * used, good, (units * used, units * stat * used)


def _snapshot(
    cycle: int,
    t: float,
    spec: ClusterSpec,
    names: list[str],
    runs: Mapping[str, _Run],
    queued: list[str],
    running: list[str],
    models: Mapping[str, ThroughputModel],
    speedups: dict[tuple[str, int, int], tuple[float, ...]],
    tables: Tables | None = None,
) -> Snapshot:
    allocated = {n: Resources() for n in names}
    gpus_used: dict[str, set[int]] = {n: set() for n in names}
    for name in running:
        r = runs[name]
        for p in r.placement:
            allocated[p.node] = allocated[p.node] + r.job.replica
            gpus_used[p.node].update(p.gpus)
        for p in r.pservers:
            allocated[p.node] = allocated[p.node] + r.job.pserver
    nodes = tuple(
        NodeState(n, spec.node, allocated[n], tuple(g for g in range(spec.node.gpu) if g not in gpus_used[n]))
        for n in names
    )

    def request(r: _Run) -> JobRequest:
        j = r.job
        batches: tuple[int, ...] = ()
        if r.adaptive is not None and j.adaptive is not None and tables is not None:
            table = tables.table(r.adaptive, j.adaptive, j.hi, r.adaptive.epoch(r.done))
            speedup, batches = table.speedup, table.batches
        else:
            key = (j.app, j.global_bsz, j.hi)
            if key not in speedups:
                speedups[key] = speedup_table(models[j.app], j.global_bsz, j.hi, spec.node.gpu or 4)
            speedup = speedups[key]
        return JobRequest(
            key=j.name, user=j.tenant or "sim", priority=0, submitted_at=j.submit_time,
            pservers=j.pservers, pserver=j.pserver, trainers=j.num_replicas, trainer=j.replica,
            min_trainers=j.lo, max_trainers=j.hi, attained=r.attained, speedup=speedup,
            running=r.n, placement=(*r.pservers, *r.placement), resized_at=r.resized_at,
            rebatched_at=r.rebatched_at, batches=batches, batch_size=r.batch if batches and r.n else 0,
        )  # fmt: skip

    return Snapshot(
        cycle=cycle,
        now=t,
        nodes=nodes,
        queue=tuple(request(runs[n]) for n in queued),
        running=tuple(request(runs[n]) for n in running),
    )
