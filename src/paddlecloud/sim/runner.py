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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.sim.engine import SimConfig, simulate, widen
from paddlecloud.sim.estimates import EstimateSpec
from paddlecloud.sim.profiles import ElasticCpuModel, ThroughputModel, load_profiles
from paddlecloud.sim.series import Series, combine
from paddlecloud.sim.workload import (
    EDL_APP,
    EDL_CLUSTER,
    POLLUX_CLUSTER,
    ClusterSpec,
    SimJob,
    edl_scenario,
    load_philly,
    load_pollux,
)

__all__ = ["Report", "RunSpec", "run", "run_report", "speedup_model"]

ELASTIC_POLICIES = ("elastic", "edl")
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
            f"{m.work_samples:,.0f} samples per job; static policies (fifo, fifo-backfill, tiresias) "
            f"keep each job at its minimum trainers, edl and elastic may give it up to {m.trainer_cap}"
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
    #: record each job's start and end estimate at submit (``sim.estimates``, profile durations)
    estimate_starts: bool = False


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
        cluster = EDL_CLUSTER
        return {"edl": edl_scenario()}, {EDL_APP: ElasticCpuModel()}, _shape(cluster, spec)
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
        if self.starts:
            doc["start_estimates"] = self.starts
        if series_points > 0:
            doc["series"] = {
                pol: {wl: s.resample(series_points).to_json(self.capacity) for wl, s in per.items()}
                for pol, per in self.series.items()
            }
        return doc


def _jobs_for(policy: str, spec: RunSpec, jobs: list[SimJob], models: Mapping[str, ThroughputModel],
              cluster: ClusterSpec) -> list[SimJob]:  # fmt: skip
    """Elastic policies get elastic bounds; on the EDL scenario static ones run each job at its minimum."""
    if policy in ELASTIC_POLICIES and spec.format != "edl":
        return widen(jobs, models, cluster.nodes * (cluster.node.gpu or 64))
    if policy not in ELASTIC_POLICIES and spec.format == "edl":
        return [dataclasses.replace(j, min_replicas=0, max_replicas=0, num_replicas=j.lo) for j in jobs]
    return jobs


def run_report(spec: RunSpec) -> Report:
    """Simulate every policy of ``spec`` on every workload."""
    loads, models, cluster = _inputs(spec)
    capacity = (
        cluster.nodes * cluster.node.gpu if cluster.node.gpu else cluster.nodes * cluster.node.cpu_m // 1000
    )
    report = Report(spec, cluster, capacity, loads)
    cfg = SimConfig(cluster, estimates=EstimateSpec() if spec.estimate_starts else None)
    for name in spec.policies:
        pol = make_policy(name)
        per: dict[str, Summary] = {}
        report.series[name] = {}
        report.jcts[name] = {}
        for wl, jobs in loads.items():
            res = simulate(_jobs_for(name, spec, jobs, models, cluster), models, pol, cfg)
            per[wl] = res.summary(capacity)
            if res.starts:
                report.starts.setdefault(name, {})[wl] = res.starts
            report.series[name][wl] = res.series
            report.jcts[name][wl] = sorted(res.jct.values())
        keys = next(iter(per.values())).keys()
        per["mean"] = {k: sum(s[k] for s in per.values()) / len(per) for k in keys}
        report.summaries[name] = per
    return report


def run(spec: RunSpec) -> dict[str, dict[str, Summary]]:
    """The summaries of :func:`run_report`: ``{policy: {workload: summary, "mean": summary}}``."""
    return run_report(spec).summaries
