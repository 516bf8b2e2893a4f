"""Start-time estimates in the simulator: each job's estimate at submit against its actual start.

    round in which jobs arrive ─▶ the round's snapshot (the one the policy decides on)
        ─▶ scheduler.forecast: the forecasting policy run forward on what each job has left
           (until every job that just arrived has started) ─▶ each arrival's estimated start
    end of the run ─▶ per job {submitted, estimated_start, actual_start, error_s} and the
       aggregates of :func:`accuracy`

What the forecast knows of durations (:class:`EstimateSpec`):
  - ``profile`` (default): each job's remaining work and its measured throughput on the trainers
    and nodes it holds, exactly what the simulator runs it at; the forecast misses only the jobs
    that arrive later.
  - ``limits``: what a Slurm user declares: the job's duration at its requested size rounded up to
    the next of :data:`LIMIT_LADDER` (a generous guess: it never underestimates), used as the
    live server uses a declared ``expected_duration`` (``forecast.seconds_work``). With the
    ``fifo-backfill`` policy this is how Slurm's backfill scheduler estimates starts (job time limits,
    priority order, backfill).

Error and the 25 % rule: ``error = |estimated start - actual start|``; a job is *within 25 %* when
the error is at most a quarter of its actual wait (``actual start - submit``). For a job that
started at once (wait 0) that means the estimate said "at once" exactly. ``within_25pct_waited``
is the same share among the jobs that waited, where a forecast has something to get right.
Ends likewise: ``|estimated end - actual end|`` against the job's completion time (end - submit).
A job the forecast did not reach (beyond its rounds) has no estimate: it counts as a miss and not
in the medians.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from paddlecloud.scheduler import JobRequest, Policy, Snapshot
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.scheduler.forecast import Basis, ForecastConfig, Work, forecast, seconds_work
from paddlecloud.sim.profiles import ThroughputModel, packed_nodes
from paddlecloud.sim.workload import SimJob

__all__ = ["LIMIT_LADDER", "EstimateSpec", "StartLog", "accuracy", "declared_limit"]

#: time limits users pick (s): 15 min, 30 min, 1, 2, 4, 8, 12 h, 1, 2, 3, 7 days, then whole weeks
LIMIT_LADDER = (900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 259200, 604800)


class _Progress(Protocol):
    """What the forecast reads of a simulated job (``engine._Run``)."""

    job: SimJob
    work: float
    done: float
    paused_until: float
    first_start: float | None
    finished: float | None


@dataclass(frozen=True)
class EstimateSpec:
    #: forecast with this policy (None: the simulated one)
    policy: str | None = None
    #: ``profile`` or ``limits`` (see the module doc)
    durations: str = "profile"
    #: its steps and bounds (``round_s`` and ``restart_s`` are the simulator's)
    forecast: ForecastConfig = field(default_factory=ForecastConfig)


def declared_limit(
    job: SimJob, model: ThroughputModel, work: float, gpus_per_node: int, restart_s: float
) -> float:
    """The user's time limit: the run time at the requested size (start-up included), rounded up."""
    n = job.num_replicas
    seconds = restart_s + work / model.throughput(n, packed_nodes(n, gpus_per_node or 4), job.global_bsz)
    for step in LIMIT_LADDER:
        if seconds <= step:
            return float(step)
    week = LIMIT_LADDER[-1]
    return float(-(-seconds // week) * week)


class StartLog:
    """The estimates one simulation made, recorded as jobs arrive."""

    def __init__(self, spec: EstimateSpec, sim_policy: Policy, models: Mapping[str, ThroughputModel],
                 gpus_per_node: int, round_s: float, restart_s: float) -> None:  # fmt: skip
        self.spec, self.models = spec, models
        self.policy = make_policy(spec.policy) if spec.policy else sim_policy
        self.gpus_per_node, self.restart_s = gpus_per_node, restart_s
        #: the forecast's rounds and start-up cost are the simulator's
        self.config = dataclasses.replace(spec.forecast, round_s=round_s, restart_s=restart_s)
        self.estimated: dict[str, tuple[float | None, float | None]] = {}
        self._limits: dict[str, float] = {}

    def observe(self, snap: Snapshot, runs: Mapping[str, _Progress], arrived: list[str]) -> None:
        """Forecast from ``snap`` (the round's) and record the start of each job just ``arrived``."""
        if not arrived:
            return
        work = {req.key: self._work(req, runs[req.key]) for req in (*snap.running, *snap.queue)}
        fc = forecast(self.policy.schedule, snap, work, self.config, until=arrived, until_end=True)
        for name in arrived:
            self.estimated[name] = (fc.estimates[name].start, fc.estimates[name].end)

    def _work(self, req: JobRequest, r: _Progress) -> Work:
        job = r.job
        model = self.models[job.app]
        if self.spec.durations == "limits":
            if job.name not in self._limits:
                self._limits[job.name] = declared_limit(
                    job, model, r.work, self.gpus_per_node, self.restart_s
                )
            return seconds_work(req, self._limits[job.name])
        bsz = job.global_bsz
        return Work(
            r.work - r.done,
            Basis.PROFILE,
            lambda n, k: model.throughput(n, k, bsz),
            paused_until=r.paused_until,
        )

    def per_job(self, runs: Mapping[str, _Progress]) -> dict[str, dict[str, float | None]]:
        """Per job: submitted, estimated and actual start and end (s of virtual time)."""
        return {
            name: {
                "submitted": runs[name].job.submit_time,
                "estimated_start": start,
                "actual_start": runs[name].first_start,
                "estimated_end": end,
                "actual_end": runs[name].finished,
            }
            for name, (start, end) in self.estimated.items()
        }


def _errors(per_job: Mapping[str, Mapping[str, float | None]], what: str) -> dict[str, float]:
    """``what`` = start: errors against the actual wait; end: against the actual completion time."""
    errs, waited_errs, hits, waited_hits, n, n_waited = [], [], 0, 0, 0, 0
    for rec in per_job.values():
        actual, est, sub = rec[f"actual_{what}"], rec[f"estimated_{what}"], rec["submitted"]
        if actual is None or sub is None:
            continue
        span = actual - sub
        n += 1
        n_waited += span > 0
        if est is None:
            continue
        err = abs(est - actual)
        hit = err <= 0.25 * span
        errs.append(err)
        hits += hit
        if span > 0:
            waited_errs.append(err)
            waited_hits += hit
    out = {
        f"{what}_estimates": float(n),
        f"{what}_estimate_median_abs_error_s": statistics.median(errs) if errs else 0.0,
        f"{what}_estimate_within_25pct": hits / n if n else 0.0,
    }
    if what == "start":
        out |= {
            "start_estimate_jobs_waited": float(n_waited),
            "start_estimate_median_abs_error_waited_s": statistics.median(waited_errs)
            if waited_errs
            else 0.0,
            "start_estimate_within_25pct_waited": waited_hits / n_waited if n_waited else 0.0,
        }
    return out


def accuracy(per_job: Mapping[str, Mapping[str, float | None]]) -> dict[str, float]:
    """Median absolute error and the within-25 % shares (module doc) of the starts and the ends."""
    return _errors(per_job, "start") | _errors(per_job, "end")
