"""The scheduler: pure functions from a frozen :class:`Snapshot` to a :class:`Plan` of decisions.

No I/O, no database, no wall clock: the caller passes the time in the snapshot. The live server and
(later) the simulator drive this same package. Policies are chosen by name with :func:`policy`.
"""

from __future__ import annotations

from typing import Protocol

from paddlecloud.scheduler.decisions import Admit, Plan, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.fifo import FifoPolicy
from paddlecloud.scheduler.snapshot import JobRequest, NodeState, Snapshot

__all__ = [
    "Admit",
    "FifoPolicy",
    "JobRequest",
    "NodeState",
    "Plan",
    "Policy",
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
    """Construct a policy by name (``fifo``, ``fifo-backfill``)."""
    if name == "fifo":
        return FifoPolicy()
    if name == "fifo-backfill":
        return FifoPolicy(backfill=True, name="fifo-backfill")
    raise ValueError(f"unknown scheduling policy {name!r} (known: fifo, fifo-backfill)")
