"""The simulator: a virtual clock, a virtual cluster, and the live scheduler package unchanged.

Every ``round_s`` seconds of virtual time (60 s, as Pollux's simulator):
  1. jobs whose submit time has come join the queue;
  2. a :class:`paddlecloud.scheduler.Snapshot` is built exactly as the live server builds one
     (nodes with what running jobs hold, the queue, the running jobs with their placement, attained
     service and speed-up table), and the named policy returns a Plan;
  3. the plan is applied: admitted jobs start, resized jobs change trainers, preempted jobs go back
     to the queue keeping their progress (they checkpoint); every start, resize or resume costs
     ``restart_s`` seconds without progress;
  4. running jobs progress at their measured throughput for their trainer count and placement
     (``sim.profiles``); a job that finishes inside the round finishes at the exact moment.
The global batch size never changes: a resize only re-splits it (gradient accumulation in the model).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Policy, Snapshot, WorkerPlacement
from paddlecloud.sim.profiles import ThroughputModel
from paddlecloud.sim.workload import ClusterSpec, SimJob, job_work, speedup_table

__all__ = ["SimConfig", "SimResult", "simulate", "widen"]


@dataclass(frozen=True)
class SimConfig:
    cluster: ClusterSpec
    round_s: float = 60.0
    restart_s: float = 30.0
    #: stop after this much virtual time even if jobs remain (they are reported unfinished)
    horizon_s: float = 30 * 86400.0


@dataclass
class _Run:
    job: SimJob
    work: float
    done: float = 0.0
    placement: tuple[WorkerPlacement, ...] = ()
    first_start: float | None = None
    finished: float | None = None
    attained: float = 0.0
    resized_at: float = float("-inf")
    paused_until: float = 0.0
    resizes: int = 0
    preemptions: int = 0

    @property
    def n(self) -> int:
        return len(self.placement)


@dataclass
class SimResult:
    policy: str
    jct: dict[str, float] = field(default_factory=dict)
    queue_delay: dict[str, float] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
    makespan: float = 0.0
    allocated_gpu_s: float = 0.0
    busy_s: float = 0.0  # time while any job waited or ran
    resizes: int = 0
    preemptions: int = 0
    #: (time, allocated GPUs, queued jobs) per round
    timeline: list[tuple[float, int, int]] = field(default_factory=list)

    def summary(self, capacity_gpus: int) -> dict[str, float]:
        jcts = sorted(self.jct.values())
        waits = sorted(self.queue_delay.values())
        return {
            "jobs": float(len(jcts)),
            "unfinished": float(len(self.unfinished)),
            "avg_jct_s": _mean(jcts),
            "median_jct_s": _pct(jcts, 50),
            "p99_jct_s": _pct(jcts, 99),
            "avg_queue_s": _mean(waits),
            "p99_queue_s": _pct(waits, 99),
            "makespan_s": self.makespan,
            "gpu_util": self.allocated_gpu_s / (capacity_gpus * self.busy_s) if self.busy_s else 0.0,
            "resizes": float(self.resizes),
            "preemptions": float(self.preemptions),
        }


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
    spec = cfg.cluster
    names = [f"node-{i}" for i in range(spec.nodes)]
    runs = {j.name: _Run(j, job_work(j, models)) for j in jobs}
    pending = sorted(jobs, key=lambda j: j.submit_time)
    speedups: dict[tuple[str, int, int], tuple[float, ...]] = {}
    result = SimResult(policy=policy.name)
    queued: list[str] = []
    running: list[str] = []
    t, cycle, nxt = 0.0, 0, 0
    if pending:
        t = pending[0].submit_time
    while (nxt < len(pending) or queued or running) and t <= cfg.horizon_s:
        while nxt < len(pending) and pending[nxt].submit_time <= t:
            queued.append(pending[nxt].name)
            nxt += 1
        cycle += 1
        snap = _snapshot(cycle, t, spec, names, runs, queued, running, models, speedups)
        plan = policy.schedule(snap)
        for a in plan.admit:
            r = runs[a.job]
            r.placement = tuple(p for p in a.placement if p.role == "trainer")
            r.first_start = t if r.first_start is None else r.first_start
            r.paused_until, r.resized_at = t + cfg.restart_s, t
            queued.remove(a.job)
            running.append(a.job)
        for z in plan.resize:
            r = runs[z.job]
            r.placement, r.resized_at, r.paused_until = z.placement, t, t + cfg.restart_s
            r.resizes += 1
        for pre in plan.preempt:
            r = runs[pre.job]
            r.placement, r.preemptions = (), r.preemptions + 1
            running.remove(pre.job)
            queued.append(pre.job)
        end = t + cfg.round_s
        used = 0
        for name in list(running):
            r = runs[name]
            used += r.n * _units(r.job)
            _advance(r, t, end, models)
            if r.finished is not None:
                running.remove(name)
                result.jct[name] = r.finished - r.job.submit_time
                result.queue_delay[name] = (r.first_start or r.job.submit_time) - r.job.submit_time
                result.makespan = max(result.makespan, r.finished)
        result.allocated_gpu_s += used * cfg.round_s
        result.busy_s += cfg.round_s if (queued or running or used) else 0.0
        result.timeline.append((t, used, len(queued)))
        t = end
        if not queued and not running and nxt < len(pending):
            t = max(t, pending[nxt].submit_time)  # idle: jump to the next arrival
    result.unfinished = [n for n, r in runs.items() if r.finished is None]
    result.resizes = sum(r.resizes for r in runs.values())
    result.preemptions = sum(r.preemptions for r in runs.values())
    return result


def _units(job: SimJob) -> int:
    """What utilisation counts per replica: GPUs, or whole CPU cores on a CPU cluster."""
    return job.gpus_per_replica or max(job.cpu_m_per_replica // 1000, 1)


def _advance(r: _Run, t: float, end: float, models: Mapping[str, ThroughputModel]) -> None:
    r.attained += r.n * _units(r.job) * (end - t)
    start = max(t, r.paused_until)
    if start >= end or r.n == 0:
        return
    nodes = len({p.node for p in r.placement})
    rate = models[r.job.app].throughput(r.n, nodes, r.job.global_bsz)
    need = r.work - r.done
    if rate * (end - start) >= need:
        r.done = r.work
        r.finished = start + need / rate
    else:
        r.done += rate * (end - start)


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
) -> Snapshot:
    allocated = {n: Resources() for n in names}
    gpus_used: dict[str, set[int]] = {n: set() for n in names}
    for name in running:
        r = runs[name]
        for p in r.placement:
            allocated[p.node] = allocated[p.node] + r.job.replica
            gpus_used[p.node].update(p.gpus)
    nodes = tuple(
        NodeState(n, spec.node, allocated[n], tuple(g for g in range(spec.node.gpu) if g not in gpus_used[n]))
        for n in names
    )

    def request(r: _Run) -> JobRequest:
        j = r.job
        key = (j.app, j.global_bsz, j.hi)
        if key not in speedups:
            speedups[key] = speedup_table(models[j.app], j.global_bsz, j.hi, spec.node.gpu or 4)
        return JobRequest(
            key=j.name, user=j.tenant or "sim", priority=0, submitted_at=j.submit_time, pservers=0,
            pserver=Resources(), trainers=j.num_replicas, trainer=j.replica, min_trainers=j.lo,
            max_trainers=j.hi, attained=r.attained, speedup=speedups[key], running=r.n,
            placement=r.placement, resized_at=r.resized_at,
        )  # fmt: skip

    return Snapshot(
        cycle=cycle,
        now=t,
        nodes=nodes,
        queue=tuple(request(runs[n]) for n in queued),
        running=tuple(request(runs[n]) for n in running),
    )
