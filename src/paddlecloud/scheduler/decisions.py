"""Decisions are values: what one scheduling cycle wants done, and why every waiting job waits."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "Admit",
    "Plan",
    "Preempt",
    "Resize",
    "Wait",
    "WaitReason",
    "WorkerPlacement",
    "admit_of",
    "resize_of",
    "trainer_at",
]


class WaitReason(StrEnum):
    #: The cluster has not enough free capacity now.
    INSUFFICIENT_RESOURCES = "InsufficientResources"
    #: No node could ever host one of the job's workers, even empty.
    EXCEEDS_NODE_CAPACITY = "ExceedsNodeCapacity"
    #: An earlier (or higher-priority) job is waiting and this policy does not overtake it.
    BEHIND_EARLIER_JOB = "BehindEarlierJob"
    #: Preemptive policies: jobs ahead of it in the policy's order hold what it needs.
    LOWER_PRIORITY = "LowerPriority"
    #: Its user's quota would be exceeded (it waits without blocking other users' jobs).
    QUOTA_EXCEEDED = "QuotaExceeded"
    #: Waiting for capacity while jobs of users with a smaller dominant share of the cluster, which
    #: would otherwise come after it, go first (fair share between users, see scheduler.fairshare).
    FAIR_SHARE = "FairShare"
    #: Admitted by a plan that preempted other jobs: it starts once their processes have stopped
    #: (the server's loop; the simulator's preemptions are instantaneous).
    PREEMPTION_IN_PROGRESS = "PreemptionInProgress"


@dataclass(frozen=True)
class WorkerPlacement:
    role: str
    index: int
    node: str
    gpus: tuple[int, ...] = ()


def trainer_at(index: int, node: str, gpus: tuple[int, ...]) -> WorkerPlacement:
    """``WorkerPlacement("trainer", index, node, gpus)`` at a third of the cost of the frozen
    dataclass's ``__init__`` (a round places thousands of trainers): the same fields in the instance's
    ``__dict__``, as that ``__init__`` leaves them (the class has no ``__post_init__``)."""
    p = _new(WorkerPlacement)
    d = p.__dict__
    d["role"], d["index"], d["node"], d["gpus"] = "trainer", index, node, gpus
    return p


_new = object.__new__


@dataclass(frozen=True)
class Admit:
    job: str
    placement: tuple[WorkerPlacement, ...]
    message: str
    #: adaptive-batch jobs: the global batch chosen for this many trainers (0: the job's own)
    batch_size: int = 0


@dataclass(frozen=True)
class Resize:
    """Change a running job's trainers to ``placement`` (the full new trainer placement: kept
    trainers first, in index order; a shrink drops the highest indices)."""

    job: str
    trainers: int
    placement: tuple[WorkerPlacement, ...]
    message: str
    #: adaptive-batch jobs: the global batch chosen for ``trainers`` (0: the job's own)
    batch_size: int = 0


def admit_of(job: str, placement: tuple[WorkerPlacement, ...], message: str, batch_size: int = 0) -> Admit:
    """``Admit(job, placement, message, batch_size)`` without the frozen dataclass's ``__init__``
    (as :func:`trainer_at`: a round admits thousands of jobs)."""
    a = _new(Admit)
    d = a.__dict__
    d["job"], d["placement"], d["message"], d["batch_size"] = job, placement, message, batch_size
    return a


def resize_of(
    job: str, trainers: int, placement: tuple[WorkerPlacement, ...], message: str, batch_size: int = 0
) -> Resize:
    """``Resize(job, trainers, placement, message, batch_size)`` without the frozen dataclass's
    ``__init__`` (as :func:`trainer_at`)."""
    r = _new(Resize)
    d = r.__dict__
    d["job"], d["trainers"], d["placement"], d["message"], d["batch_size"] = (
        job,
        trainers,
        placement,
        message,
        batch_size,
    )
    return r


@dataclass(frozen=True)
class Preempt:
    job: str
    message: str


@dataclass(frozen=True)
class Wait:
    job: str
    reason: WaitReason
    message: str


@dataclass(frozen=True)
class Plan:
    cycle: int
    admit: list[Admit] = field(default_factory=list)
    wait: list[Wait] = field(default_factory=list)
    resize: list[Resize] = field(default_factory=list)
    preempt: list[Preempt] = field(default_factory=list)
