"""Run policies over workloads and summarise: what ``paddlecloud sim`` and ``bench/sim_*.py`` call.

workloads (files or the EDL scenario) ─▶ SimJob lists ─▶ simulate(policy) per workload
    ─▶ {policy: {workload: summary, "mean": summary}}   (summary keys: see SimResult.summary)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.sim.engine import SimConfig, simulate, widen
from paddlecloud.sim.profiles import ElasticCpuModel, ThroughputModel, load_profiles
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

__all__ = ["RunSpec", "run"]

ELASTIC_POLICIES = ("elastic", "edl")
Summary = dict[str, float]


@dataclass(frozen=True)
class RunSpec:
    workloads: Sequence[str]  # file paths; ignored for format "edl"
    policies: Sequence[str]
    format: str = "pollux"  # pollux | philly | edl
    traces: str | None = None  # Pollux profiles dir; default: beside the workload files
    nodes: int | None = None
    gpus_per_node: int | None = None
    philly_limit: int | None = 1000


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


def run(spec: RunSpec) -> dict[str, dict[str, Summary]]:
    loads, models, cluster = _inputs(spec)
    capacity = cluster.nodes * (cluster.node.gpu or 1)
    out: dict[str, dict[str, Summary]] = {}
    for name in spec.policies:
        pol = make_policy(name)
        per: dict[str, Summary] = {}
        for wl, jobs in loads.items():
            cap = cluster.nodes * (cluster.node.gpu or 64)
            js = widen(jobs, models, cap) if name in ELASTIC_POLICIES and spec.format != "edl" else jobs
            if name not in ELASTIC_POLICIES and spec.format == "edl":  # static: the minimum, fixed
                js = [dataclasses.replace(j, min_replicas=0, max_replicas=0, num_replicas=j.lo) for j in jobs]
            units = capacity if cluster.node.gpu else cluster.nodes * cluster.node.cpu_m // 1000
            per[wl] = simulate(js, models, pol, SimConfig(cluster)).summary(units)
        keys = next(iter(per.values())).keys()
        per["mean"] = {k: sum(s[k] for s in per.values()) / len(per) for k in keys}
        out[name] = per
    return out
