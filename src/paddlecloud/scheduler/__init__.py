"""The scheduler: pure functions from a frozen :class:`Snapshot` to a :class:`Plan` of decisions.

No I/O, no database, no wall clock: the caller passes the time in the snapshot. The live server and
the simulator drive this same package. Policies are chosen by name with :func:`policy`.

A round costs about what it decides, not nodes x jobs: free capacity is indexed by free vector
(``pool.NodePool``), what-if admissions are journaled trials rolled back in place, and elastic
shrink candidates wait in a heap kept across admissions (figures: bench/sched_scale.py).
"""

from __future__ import annotations

from typing import Protocol

from paddlecloud.scheduler.decisions import Admit, Plan, Preempt, Resize, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.edl import EdlPolicy
from paddlecloud.scheduler.elastic import TIRESIAS_THRESHOLDS, ElasticPolicy
from paddlecloud.scheduler.fifo import FifoPolicy
from paddlecloud.scheduler.placement import never_placeable
from paddlecloud.scheduler.pods import PodsPolicy
from paddlecloud.scheduler.snapshot import JobRequest, NodeState, Snapshot

__all__ = [
    "DEFAULT_POLICY",
    "GOODPUT",
    "Admit",
    "EdlPolicy",
    "ElasticPolicy",
    "FifoPolicy",
    "JobRequest",
    "NodeState",
    "Plan",
    "PodsPolicy",
    "Policy",
    "Preempt",
    "Resize",
    "Snapshot",
    "Wait",
    "WaitReason",
    "WorkerPlacement",
    "never_placeable",
    "policy",
]


#: the policy the server runs unless told otherwise (``up --policy``), and ``paddlecloud sim``'s default
DEFAULT_POLICY = "elastic"

#: ``elastic`` with the adaptive-batch jobs' goodput share and packed placement, all opt-in fields of
#: :class:`ElasticPolicy`: the adaptive jobs are one claimant of the LAS top-up and share what they
#: hold by a power mean of their goodput speed-ups (``fair_p``, ``fair_group``, ``fair_exchange``), a
#: move pays only if it saves two 30 s restarts over the job's age (``fair_restart_s``), and a growing
#: job never spans more nodes than its count needs (``pack``). Fixed-batch jobs are scheduled as by
#: ``elastic`` but packed. Not the default: it wins every measured Pollux set (bench/README.md
#: "Packed placement") but a cold round at 1,250 x 8 GPUs / 5,000 jobs costs ~4x ``elastic``'s
#: (~280-320 against ~70-80 ms; ~7x before its re-placement trials that must fail were skipped).
GOODPUT = ElasticPolicy(
    name="goodput", fair_p=0.5, fair_group=True, fair_exchange=True, fair_restart_s=30.0, pack=True
)


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def schedule(self, snap: Snapshot) -> Plan: ...


def policy(name: str) -> Policy:
    """Construct a policy by name: ``fifo``, ``fifo-backfill``, ``tiresias``, ``edl``, ``elastic``,
    ``goodput`` (:data:`GOODPUT`), and
    ``pods`` (a baseline for the simulator: workers bound one by one without a gang, see pods.py;
    ``up --policy`` does not offer it)."""
    policies: dict[str, Policy] = {
        "fifo": FifoPolicy(),
        "fifo-backfill": FifoPolicy(backfill=True, name="fifo-backfill"),
        "tiresias": ElasticPolicy(name="tiresias", elastic=False, grow=False, thresholds=TIRESIAS_THRESHOLDS),
        "edl": EdlPolicy(),
        "elastic": ElasticPolicy(),
        "goodput": GOODPUT,
        "pods": PodsPolicy(),
    }
    if name not in policies:
        raise ValueError(f"unknown scheduling policy {name!r} (known: {', '.join(policies)})")
    return policies[name]
