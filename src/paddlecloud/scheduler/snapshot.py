"""The frozen view of the cluster that one scheduling cycle decides on.

The controller builds a :class:`Snapshot` from the database and the backend's node list, numbers the
cycle and stamps it with the injected clock's time; policies read it and never change it. What-if
placement works on a private copy (:class:`FreeCapacity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources

__all__ = ["FreeCapacity", "JobRequest", "NodeState", "Snapshot"]


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
    """A job waiting for admission, as the scheduler sees it."""

    key: str  # "user/name"
    user: str
    priority: int
    submitted_at: float
    pservers: int
    pserver: Resources
    trainers: int
    trainer: Resources


@dataclass(frozen=True)
class Snapshot:
    cycle: int
    now: float
    nodes: tuple[NodeState, ...]
    queue: tuple[JobRequest, ...]


@dataclass
class FreeCapacity:
    """Mutable scratch copy of free capacity, for tentative placements (committed or discarded whole)."""

    free: dict[str, Resources] = field(default_factory=dict)
    gpus: dict[str, list[int]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, nodes: tuple[NodeState, ...]) -> FreeCapacity:
        return cls(
            free={n.name: n.free for n in nodes},
            gpus={n.name: list(n.free_gpus) for n in nodes},
            order=[n.name for n in nodes],
        )

    def copy(self) -> FreeCapacity:
        return FreeCapacity(dict(self.free), {k: list(v) for k, v in self.gpus.items()}, list(self.order))

    def total(self) -> Resources:
        out = Resources()
        for r in self.free.values():
            out = out + r
        return out
