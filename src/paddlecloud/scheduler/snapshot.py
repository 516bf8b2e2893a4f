"""The frozen view of the cluster that one scheduling cycle decides on.

The controller builds a :class:`Snapshot` from the database and the backend's node list, numbers the
cycle and stamps it with the injected clock's time; policies read it and never change it. What-if
placement works on the cycle's own index of free capacity (``pool.NodePool``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import WorkerPlacement

__all__ = ["JobRequest", "NodeState", "Snapshot"]


@dataclass(frozen=True)
class NodeState:
    name: str
    capacity: Resources
    allocated: Resources = field(default_factory=Resources)
    #: GPU indices on this node not assigned to any worker.
    free_gpus: tuple[int, ...] = ()

    @property
    def free(self) -> Resources:
        return self.capacity - self.allocated


@dataclass(frozen=True)
class JobRequest:
    """A job as the scheduler sees it: waiting (``running == 0``) or running on ``placement``.

    ``trainers`` is what the user asked for; elastic jobs may run anywhere in
    ``[min_trainers, max_trainers]`` (0 means "= trainers"). ``speedup[n - 1]`` is the job's
    throughput on n trainers relative to one (empty: linear). ``attained`` is the service it has
    received so far, in trainer-seconds (GPU-seconds for GPU jobs).
    """

    key: str  # "user/name"
    user: str
    priority: int
    submitted_at: float
    pservers: int
    pserver: Resources
    trainers: int
    trainer: Resources
    min_trainers: int = 0
    max_trainers: int = 0
    attained: float = 0.0
    speedup: tuple[float, ...] = ()
    running: int = 0
    placement: tuple[WorkerPlacement, ...] = ()
    #: when its trainer count last changed (the grow cooldown)
    resized_at: float = float("-inf")
    #: adaptive-batch jobs: when its global batch was last set by a resize, batch-only or not (the
    #: re-batch cooldown; a batch-only resize leaves ``resized_at`` as it was)
    rebatched_at: float = float("-inf")
    #: adaptive-batch jobs (``scheduler.goodput``): the best global batch per trainer count
    #: (``batches[n - 1]``), and ``speedup`` is then goodput, not throughput; empty: a fixed batch
    batches: tuple[int, ...] = ()
    #: adaptive-batch jobs that run: the global batch they train at now (0: unknown or fixed)
    batch_size: int = 0
    #: nodes that hold the job's SampleSet cache (cache-aware placement)
    cache_nodes: frozenset[str] = frozenset()

    @property
    def lo(self) -> int:
        return self.min_trainers or self.trainers

    @property
    def hi(self) -> int:
        return max(self.max_trainers or self.trainers, self.lo)

    @property
    def elastic(self) -> bool:
        return self.hi > self.lo

    def batch(self, n: int) -> int:
        """The global batch an adaptive job gets on ``n`` trainers (0: a fixed-batch job)."""
        if not self.batches or n <= 0:
            return 0
        return self.batches[min(n, len(self.batches)) - 1]

    def rate(self, n: int) -> float:
        """Relative throughput on ``n`` trainers."""
        if n <= 0:
            return 0.0
        if not self.speedup:
            return float(n)
        return self.speedup[min(n, len(self.speedup)) - 1]


@dataclass(frozen=True)
class Snapshot:
    cycle: int
    now: float
    nodes: tuple[NodeState, ...]
    queue: tuple[JobRequest, ...]
    #: jobs holding resources now (their ``placement``); ``nodes[].allocated`` includes them
    running: tuple[JobRequest, ...] = ()
    #: per-user limits (a user without an entry is unlimited); usage is what ``running`` holds
    quotas: Mapping[str, Resources] = field(default_factory=dict)
