"""Wire models of what the server records over time (``controller.model.history``), for charts.

    reconciler cycle ──▶ controller.model.history.History ──▶ ClusterPoint (one per interval, last hour)
                                                    └─▶ TrainerPoint (per job, when its count changes)
    GET /api/v1/cluster/history      ──▶ ClusterHistory
    GET /api/v1/jobs/{name}/history  ──▶ TrainerHistory

Every point has ``t``, seconds since the epoch (the server's clock). Resources are in base units:
CPU in cores, memory in bytes, GPUs as a count; ``*_allocated`` is what the scheduler counts as held
on the nodes (on an engine shared with other work, that work's load included). The console and the
JSON API read the same objects: these models are what the controller stores.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ClusterHistory", "ClusterPoint", "TrainerHistory", "TrainerPoint"]


class ClusterPoint(BaseModel):
    """The cluster at one moment: what the nodes hold and have, and the jobs waiting and running."""

    model_config = ConfigDict(frozen=True)

    t: float
    cpu_allocated: float
    cpu_capacity: float
    memory_allocated: int
    memory_capacity: int
    gpu_allocated: int
    gpu_capacity: int
    #: jobs Queued (waiting to be admitted)
    queued: int
    #: jobs Starting, Running or Preempting (holding resources)
    running: int


class ClusterHistory(BaseModel):
    #: seconds between points (at most one per interval; none while the server is down)
    interval_s: float
    #: how far back points are kept
    span_s: float
    #: oldest first
    items: list[ClusterPoint]


class TrainerPoint(BaseModel):
    """One job's trainers from ``t`` on, until the next point: ``trainers`` the scheduler gave it
    (an elastic job's count changes with each resize; 0 once it holds nothing), ``running`` of them
    in state Running."""

    model_config = ConfigDict(frozen=True)

    t: float
    trainers: int
    running: int


class TrainerHistory(BaseModel):
    user: str
    job: str
    #: oldest first; a point is recorded when a value changes, and the last one repeats the current
    #: values at the latest observation, so a step chart drawn through them reaches the present
    items: list[TrainerPoint]
