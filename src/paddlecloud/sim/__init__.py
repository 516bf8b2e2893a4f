"""Trace-driven scheduler simulator: the data layer.

Pure Python, no I/O beyond the loaders that read the shared data files (``../shared/data``):

- :mod:`paddlecloud.sim.profiles`: measured speed (step time, throughput with gradient
  accumulation) and work to completion of the six Pollux applications, plus the synthetic EDL CPU
  model;
- :mod:`paddlecloud.sim.workload`: :class:`SimJob` and the Pollux, Philly and EDL workloads;
- :mod:`paddlecloud.sim.paper`: the Pollux paper's simulated JCTs, as reference numbers.

and the simulation itself: :mod:`~paddlecloud.sim.engine` (virtual clock driving the live scheduler
package; records a :class:`~paddlecloud.sim.series.Series` per run), :mod:`~paddlecloud.sim.runner`
(policies x workloads -> summaries, series, JSON) and :mod:`~paddlecloud.sim.plot` (the optional
matplotlib PNG, the only module that writes a file).

This package must not import the server, store, storage, backends, controller, client or CLI
(import-linter enforces it).
"""

from __future__ import annotations

from paddlecloud.sim.paper import LOADS, POLICIES, PaperResult, load_result, load_results
from paddlecloud.sim.profiles import (
    APPLICATIONS,
    EPOCH_LIMITS,
    AppProfile,
    BatchPlan,
    ElasticCpuModel,
    ThroughputModel,
    load_profiles,
    packed_nodes,
)
from paddlecloud.sim.workload import (
    EDL_APP,
    EDL_CLUSTER,
    POLLUX_CLUSTER,
    ClusterSpec,
    SimJob,
    edl_scenario,
    job_work,
    load_philly,
    load_pollux,
    load_pollux_dir,
    philly_application,
    speedup_table,
)

__all__ = [
    "APPLICATIONS",
    "EDL_APP",
    "EDL_CLUSTER",
    "EPOCH_LIMITS",
    "LOADS",
    "POLICIES",
    "POLLUX_CLUSTER",
    "AppProfile",
    "BatchPlan",
    "ClusterSpec",
    "ElasticCpuModel",
    "PaperResult",
    "SimJob",
    "ThroughputModel",
    "edl_scenario",
    "job_work",
    "load_philly",
    "load_pollux",
    "load_pollux_dir",
    "load_profiles",
    "load_result",
    "load_results",
    "packed_nodes",
    "philly_application",
    "speedup_table",
]
