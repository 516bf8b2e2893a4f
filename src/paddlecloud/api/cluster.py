"""Wire models of the cluster and the queue (``GET /api/v1/cluster``, ``GET /api/v1/queue``).

:class:`ClusterView`: the scheduling policy and every node with what it has and what is held on it
(by this platform's jobs, and on an engine shared with other work by that work too). Amounts are
numbers a program can use: CPUs in millicores, memory in bytes, GPUs as a count.

:class:`QueueView`: the jobs waiting to start in the order the scheduler considers them, each with
its reason and message ("why is my job pending" on one page). A user sees every waiting job's place
and size, but the names and messages of other users' jobs only if an admin.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Amounts", "ClusterView", "NodeView", "QueueEntry", "QueueView"]


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class Amounts(_Model):
    cpu_m: int = Field(0, description="CPUs, millicores")
    memory: int = Field(0, description="bytes")
    gpu: int = 0


class NodeView(_Model):
    name: str
    capacity: Amounts
    #: held by this platform's started jobs plus, on a shared engine, by other work
    allocated: Amounts
    #: the part of ``allocated`` held by work that is not this platform's (shared engines only)
    foreign: Amounts
    #: this platform's workers placed on the node
    workers: int = 0
    #: what the engine says about the node ("drained: disk"); "" when nothing
    note: str = ""


class ClusterView(_Model):
    backend: str
    policy: str
    nodes: list[NodeView]
    capacity: Amounts
    allocated: Amounts
    jobs_running: int = Field(description="jobs starting, running or being preempted")
    jobs_queued: int


class QueueEntry(_Model):
    position: int = Field(description="1: the next job the scheduler considers")
    #: the job's name and owner; both empty for another user's job (unless the caller is an admin)
    name: str
    user: str
    mine: bool
    priority: int
    submitted_at: datetime
    pservers: int
    trainers: int
    #: per trainer
    trainer: Amounts
    reason: str
    message: str


class QueueView(_Model):
    policy: str
    items: list[QueueEntry]
