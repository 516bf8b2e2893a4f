"""The scheduler: pure functions from a frozen :class:`Snapshot` to a :class:`Plan` of decisions.

No I/O, no database, no wall clock: the caller passes the time in the snapshot. The live server and
(later) the simulator drive this same package. Policies are chosen by name with :func:`policy`.
"""

from __future__ import annotations

from typing import Protocol

from paddlecloud.scheduler.decisions import Admit, Plan, Preempt, Resize, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.elastic import EdlPolicy, ElasticPolicy
from paddlecloud.scheduler.fifo import FifoPolicy
from paddlecloud.scheduler.snapshot import JobRequest, NodeState, Snapshot

__all__ = [
    "Admit",
    "EdlPolicy",
    "ElasticPolicy",
    "FifoPolicy",
    "JobRequest",
    "NodeState",
    "Plan",
    "Policy",
    "Preempt",
    "Resize",
    "Snapshot",
    "Wait",
    "WaitReason",
    "WorkerPlacement",
    "policy",
]


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def schedule(self, snap: Snapshot) -> Plan: ...


def policy(name: str) -> Policy:
    """Construct a policy by name: ``fifo``, ``fifo-backfill``, ``tiresias``, ``edl``, ``elastic``."""
    policies: dict[str, Policy] = {
        "fifo": FifoPolicy(),
        "fifo-backfill": FifoPolicy(backfill=True, name="fifo-backfill"),
        "tiresias": ElasticPolicy(name="tiresias", elastic=False, grow=False),
        "edl": EdlPolicy(),
        "elastic": ElasticPolicy(),
    }
    if name not in policies:
        raise ValueError(f"unknown scheduling policy {name!r} (known: {', '.join(policies)})")
    return policies[name]
