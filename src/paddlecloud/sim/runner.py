"""Run policies over workloads and summarise: what ``paddlecloud sim`` and ``bench/sim_*.py`` call.

workloads (files or the EDL scenario) ─▶ SimJob lists ─▶ simulate(policy) per workload
    ─▶ :class:`Report`: summaries {policy: {workload: summary, "mean": summary}} (keys: see
       SimResult.summary), the per-round :class:`~paddlecloud.sim.series.Series` of every run, and
       what was simulated (cluster, utilisation unit, jobs per application, the speed-up model)
    ─▶ :meth:`Report.to_json` (the ``--summary-json`` document) and :meth:`Report.policy_series`
       (one series per policy, workloads averaged: the ``--plot`` lines)

:func:`run` returns the summaries only, as before.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import DEFAULT_POLICY
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.sim.engine import SimConfig, SimResult, simulate, widen
from paddlecloud.sim.estimates import EstimateSpec
from paddlecloud.sim.profiles import AppProfile, ElasticCpuModel, ThroughputModel, load_profiles
from paddlecloud.sim.series import Series, combine
from paddlecloud.sim.workload import (
    EDL_APP,
    EDL_CLUSTER,
    EDL_ROUND_S,
    EDL_WINDOW_AFTER_LAST_S,
    POLLUX_CLUSTER,
    ClusterSpec,
    SimJob,
    edl_scenario,
    load_philly,
    load_pollux,
)

__all__ = [
    "ADAPTIVE_RULE",
    "DEFAULT_POLICY",
    "Report",
    "RunSpec",
    "choose_adaptive",
    "edl_window",
    "make_adaptive",
    "run",
    "run_report",
    "speedup_model",
]

ELASTIC_POLICIES = ("elastic", "goodput", "edl")
Summary = dict[str, float]

_PROFILE_RULE = (
    "a job runs at throughput(n GPUs over the k nodes it was placed on, global batch B), interpolated "
    "piecewise-linearly in the measured step and all-reduce times of pollux/traces/<application> "
    "(gradient accumulation above the largest measured per-GPU batch; B never changes with n); the "
    "policies see speedup(n) = throughput(n GPUs packed {g} per node) / throughput(1 GPU) at B; elastic "
    "policies (edl, elastic) may give 1 .. max(requested, floor(B / min_local_bsz)) GPUs, at most the "
    "cluster's"
)
_PHILLY_RULE = (
    "each Philly job stands for a measured Pollux application chosen by its GPU time (< 1 GPU-hour "
    "cifar10 or ncf, < 10 deepspeech2 or bert, < 100 yolov3, else imagenet); B is the smallest "
    "validated batch giving each traced GPU at least min_local_bsz; it requests its traced GPU count "
    "(at most floor(B / min_local_bsz)) and its work is traced duration x throughput(those GPUs packed "
    "4 per node, B), so that allocation reproduces the traced duration and any other runs at the "
    "application's measured speed-up: "
)


def speedup_model(fmt: str, gpus_per_node: int = 4) -> str:
    """How a job's speed depends on its allocation, for workload format ``fmt`` (the JSON's
    ``speedup_model``)."""
    if fmt == "edl":
        m = ElasticCpuModel()
        return (
            f"synthetic near-linear CPU model (no measured profile): n trainers process "
            f"n x {m.per_trainer:g} / (1 + {m.contention:g} x (n - 1)) samples/s whatever the nodes, "
            f"{m.work_samples:,.0f} samples per job; the EDL report's jobs (10 pservers of 4 CPU, "
            f"trainers of 5 CPU): static policies (fifo, fifo-backfill, tiresias, pods) run each at a fixed "
            f"{m.trainer_cap} trainers (autoscaling OFF), edl and elastic at 2..{m.trainer_cap} (ON); "
            f"{EDL_ROUND_S:g} s rounds; report_pending_s and report_cpu_util are measured over the "
            f"report's window, to {EDL_WINDOW_AFTER_LAST_S:g} s after the last submission"
        )
    rule = _PROFILE_RULE.format(g=gpus_per_node or 4)
    if fmt == "philly":
        return _PHILLY_RULE + rule
    return "measured Pollux profiles: " + rule


@dataclass(frozen=True)
class RunSpec:
    workloads: Sequence[str]  # file paths; ignored for format "edl"
    policies: Sequence[str]
    format: str = "pollux"  # pollux | philly | edl
    traces: str | None = None  # Pollux profiles dir; default: beside the workload files
    nodes: int | None = None
    gpus_per_node: int | None = None
    philly_limit: int | None = 1000
    #: EDL: how many seeded passes (each a workload ``pass-<k>``), drawn from seeds seed..seed+passes-1
    passes: int = 10
    seed: int = 0
    #: the share of each workload's jobs made adaptive-batch (see :func:`choose_adaptive`)
    adaptive_fraction: float = 0.0
    adaptive_seed: int = 0
    #: record each job's start and end estimate at submit (``sim.estimates``, profile durations)
    estimate_starts: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.adaptive_fraction <= 1.0:
            raise ValueError(f"the adaptive fraction must be between 0 and 1, got {self.adaptive_fraction}")
        if self.adaptive_fraction > 0 and self.format != "pollux":
            raise ValueError(
                f"adaptive batch sizes need the pollux format (measured gradient noise), "
                f"not {self.format!r}: drop --adaptive-fraction"
            )


ADAPTIVE_RULE = (
    "round(F x jobs) jobs of each workload, drawn without replacement by random.Random('<seed>:<workload>'), "
    "are adaptive-batch: each starts at its own batch (the unit of its progress) and the scheduler may "
    "pick any global batch between its application's smallest and largest validated batch sizes (the "
    "range the traces' statistical-efficiency measurements cover), with any replica count that gives "
    "each replica at least the profile's smallest local batch at the largest one"
)


def choose_adaptive(jobs: Sequence[SimJob], fraction: float, seed: int, workload: str) -> set[str]:
    """The names of the jobs made adaptive (:data:`ADAPTIVE_RULE`)."""
    k = round(fraction * len(jobs))
    return {j.name for j in random.Random(f"{seed}:{workload}").sample(list(jobs), k)}


def make_adaptive(job: SimJob, profile: AppProfile, cap: int) -> SimJob:
    """``job`` as an adaptive-batch job (:data:`ADAPTIVE_RULE`), elastic over 1 .. its widest count."""
    lo, hi = min(profile.init_batch_size, job.global_bsz), max(profile.max_batch_size, job.global_bsz)
    top = max(job.num_replicas, min(profile.max_replicas(hi), cap))
    return dataclasses.replace(job, adaptive=(lo, hi), min_replicas=1, max_replicas=top)


def _traces(spec: RunSpec) -> Path:
    if spec.traces:
        return Path(spec.traces)
    first = Path(spec.workloads[0])
    # shared/data/pollux/workloads*/x.csv -> shared/data/pollux/traces ; philly/philly.csv -> pollux/traces
    for base in (first.parent.parent, first.parent.parent / "pollux"):
        if (base / "traces").is_dir():
            return base / "traces"
    raise ValueError(f"cannot find the Pollux traces beside {first}: pass --traces DIR")


def _inputs(spec: RunSpec) -> tuple[dict[str, list[SimJob]], Mapping[str, ThroughputModel], ClusterSpec]:
    if spec.format == "edl":
        if spec.passes < 1:
            raise ValueError(f"--passes must be >= 1, got {spec.passes}")
        loads = {f"pass-{k}": edl_scenario(seed=spec.seed + k) for k in range(spec.passes)}
        return loads, {EDL_APP: ElasticCpuModel()}, _shape(EDL_CLUSTER, spec)
    if not spec.workloads:
        raise ValueError("name at least one workload file")
    profiles = load_profiles(_traces(spec))
    if spec.format == "philly":
        loads = {Path(w).stem: load_philly(w, spec.philly_limit, profiles=profiles) for w in spec.workloads}
    elif spec.format == "pollux":
        loads = {Path(w).stem: load_pollux(w) for w in spec.workloads}
    else:
        raise ValueError(f"unknown workload format {spec.format!r} (pollux, philly, edl)")
    return loads, profiles, _shape(POLLUX_CLUSTER, spec)


def _shape(base: ClusterSpec, spec: RunSpec) -> ClusterSpec:
    node = base.node
    if spec.gpus_per_node is not None:
        node = Resources(node.cpu_m, node.memory, spec.gpus_per_node)
    return ClusterSpec(nodes=spec.nodes or base.nodes, node=node)


@dataclass
class Report:
    """Everything one ``paddlecloud sim`` produced."""

    spec: RunSpec
    cluster: ClusterSpec
    #: utilisation units of the cluster: its GPUs, or its CPU cores when it has none
    capacity: int
    workloads: dict[str, list[SimJob]]
    summaries: dict[str, dict[str, Summary]] = field(default_factory=dict)
    #: policy -> workload -> one row per round
    series: dict[str, dict[str, Series]] = field(default_factory=dict)
    #: policy -> workload -> each finished job's completion time (s), sorted
    jcts: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    #: workload -> the names of its adaptive-batch jobs
    adaptive: dict[str, list[str]] = field(default_factory=dict)
    #: policy -> workload -> job name -> completion time (s), finished jobs only
    job_jcts: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    #: policy -> workload -> job -> its estimates at submit and actual start / end (``estimate_starts``)
    starts: dict[str, dict[str, dict[str, dict[str, float | None]]]] = field(default_factory=dict)

    @property
    def util_unit(self) -> str:
        return "gpu" if self.cluster.node.gpu else "cpu_core"

    def policy_series(self, bins: int = 400) -> dict[str, Series]:
        """Per policy, its workloads' series averaged on one time axis (see ``series.combine``) that
        runs to the end of the longest run of any policy."""
        span = max((s.span for per in self.series.values() for s in per.values()), default=0.0)
        return {pol: combine(list(per.values()), bins, span) for pol, per in self.series.items()}

    def to_json(self, series_points: int = 0) -> dict[str, Any]:
        """The summary document; ``series_points`` > 0 adds each run's series in that many bins."""
        doc: dict[str, Any] = {
            "format": self.spec.format,
            "cluster": {
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.node.gpu,
                "capacity": self.capacity,
                "util_unit": self.util_unit,
            },
            "speedup_model": speedup_model(self.spec.format, self.cluster.node.gpu),
            "workloads": {
                wl: {"jobs": len(jobs), "applications": dict(sorted(Counter(j.app for j in jobs).items()))}
                for wl, jobs in self.workloads.items()
            },
            "policies": self.summaries,
        }
        if self.spec.adaptive_fraction > 0:
            doc["adaptive"] = {
                "fraction": self.spec.adaptive_fraction,
                "seed": self.spec.adaptive_seed,
                "rule": ADAPTIVE_RULE,
                "jobs": self.adaptive,
            }
        if self.starts:
            doc["start_estimates"] = self.starts
        if series_points > 0:
            doc["series"] = {
                pol: {wl: s.resample(series_points).to_json(self.capacity) for wl, s in per.items()}
                for pol, per in self.series.items()
            }
        return doc


def _jobs_for(policy: str, spec: RunSpec, jobs: list[SimJob], models: Mapping[str, ThroughputModel],
              cluster: ClusterSpec, adaptive: set[str]) -> list[SimJob]:  # fmt: skip
    """Elastic policies get elastic bounds; on the EDL scenario static ones run the report's
    autoscaling-OFF jobs, each a fixed ``max`` trainers. The ``adaptive`` jobs get batch bounds
    (and, under elastic policies, their widest replica range)."""
    cap = cluster.nodes * (cluster.node.gpu or 64)
    if adaptive:
        elastic = policy in ELASTIC_POLICIES
        out = []
        for j in widen(jobs, models, cap) if elastic else jobs:
            if j.name in adaptive:
                a = make_adaptive(j, models[j.app], cap)  # type: ignore[arg-type]  # pollux: AppProfile
                j = a if elastic else dataclasses.replace(a, min_replicas=0, max_replicas=0)
            out.append(j)
        return out
    if policy in ELASTIC_POLICIES and spec.format != "edl":
        return widen(jobs, models, cap)
    if policy not in ELASTIC_POLICIES and spec.format == "edl":
        return [dataclasses.replace(j, min_replicas=0, max_replicas=0, num_replicas=j.hi) for j in jobs]
    return jobs


def edl_window(jobs: Sequence[SimJob], res: SimResult, capacity: int) -> Summary:
    """The EDL report's two figures, measured as its scripts did over its window (every job is
    killed ``EDL_WINDOW_AFTER_LAST_S`` after the last submission): ``report_pending_s``, the mean
    of each job's first start (or the kill, if it never started) minus its submission, and
    ``report_cpu_util``, the CPU cores running pods hold over the window / the cluster's."""
    first = min(j.submit_time for j in jobs)
    end = max(j.submit_time for j in jobs) + EDL_WINDOW_AFTER_LAST_S
    waits = [min(res.first_start.get(j.name, end), end) - j.submit_time for j in jobs]
    s = res.series
    rows = zip(s.t, s.dt, s.allocated, strict=True)
    held = sum(a * max(0.0, min(t + dt, end) - max(t, first)) for t, dt, a in rows)
    return {"report_pending_s": sum(waits) / len(waits), "report_cpu_util": held / (capacity * (end - first))}


def run_report(spec: RunSpec) -> Report:
    """Simulate every policy of ``spec`` on every workload."""
    loads, models, cluster = _inputs(spec)
    capacity = (
        cluster.nodes * cluster.node.gpu if cluster.node.gpu else cluster.nodes * cluster.node.cpu_m // 1000
    )
    report = Report(spec, cluster, capacity, loads)
    chosen = {
        wl: choose_adaptive(jobs, spec.adaptive_fraction, spec.adaptive_seed, wl)
        for wl, jobs in loads.items()
    }
    report.adaptive = {wl: sorted(names) for wl, names in chosen.items()}
    cfg = SimConfig(
        cluster,
        round_s=EDL_ROUND_S if spec.format == "edl" else SimConfig.round_s,
        estimates=EstimateSpec() if spec.estimate_starts else None,
    )
    for name in spec.policies:
        pol = make_policy(name)
        per: dict[str, Summary] = {}
        report.series[name] = {}
        report.jcts[name] = {}
        report.job_jcts[name] = {}
        for wl, jobs in loads.items():
            res = simulate(_jobs_for(name, spec, jobs, models, cluster, chosen[wl]), models, pol, cfg)
            per[wl] = res.summary(capacity)
            if spec.format == "edl":
                per[wl].update(edl_window(jobs, res, capacity))
            if spec.adaptive_fraction > 0:
                per[wl].update(_split_jct(res.jct, chosen[wl]))
            if res.starts:
                report.starts.setdefault(name, {})[wl] = res.starts
            report.series[name][wl] = res.series
            report.jcts[name][wl] = sorted(res.jct.values())
            report.job_jcts[name][wl] = dict(res.jct)
        keys = next(iter(per.values())).keys()
        per["mean"] = {k: sum(s[k] for s in per.values()) / len(per) for k in keys}
        report.summaries[name] = per
    return report


def _split_jct(jct: Mapping[str, float], adaptive: set[str]) -> Summary:
    """Mean JCT of the adaptive-batch jobs and of the others (0 where there are none)."""
    a = [v for k, v in jct.items() if k in adaptive]
    f = [v for k, v in jct.items() if k not in adaptive]
    return {
        "adaptive_avg_jct_s": sum(a) / len(a) if a else 0.0,
        "fixed_avg_jct_s": sum(f) / len(f) if f else 0.0,
    }


def run(spec: RunSpec) -> dict[str, dict[str, Summary]]:
    """The summaries of :func:`run_report`: ``{policy: {workload: summary, "mean": summary}}``."""
    return run_report(spec).summaries
