"""Job and worker phases and the job state machine.

    Queued ──admit──▶ Starting ──all trainers running──▶ Running ──all trainers succeeded──▶ Succeeded
     ▲ │                 │                                  │
     │ └──kill──▶ Killed ◀┴──────────────kill───────────────┤
     │                   └──────────────failure──────────────┴──▶ Failed
     └──every process gone── Preempting ◀──preempt (Starting or Running)

A preempted job is ``Preempting`` while its processes get their grace period to checkpoint and stop
(its resources still count as held); it is ``Queued`` again once none is left.

``next_phase`` is the one place that decides a job's phase from what the backend observed; the
controller applies its result through ``Context.move``, the one writer of a job's phase, which
checks every move against the table here (:func:`check_transition`). Terminal phases never change
again. Besides the moves drawn above, a started job goes back to ``Queued`` when the engine could
not take its start after all (``BackendUnavailable``) and when a restarted server's backend cannot
take over started jobs (``NotAdopted``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ENDED_WORKER_STATES",
    "TERMINAL_PHASES",
    "InvalidTransition",
    "JobPhase",
    "JobReason",
    "PhaseChange",
    "RoleCounts",
    "WorkerReason",
    "WorkerState",
    "can_transition",
    "check_transition",
    "next_phase",
]


class JobPhase(StrEnum):
    QUEUED = "Queued"
    STARTING = "Starting"
    RUNNING = "Running"
    PREEMPTING = "Preempting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    KILLED = "Killed"


TERMINAL_PHASES = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.KILLED})

_ALLOWED: dict[JobPhase, frozenset[JobPhase]] = {
    JobPhase.QUEUED: frozenset({JobPhase.STARTING, JobPhase.KILLED, JobPhase.FAILED}),
    JobPhase.STARTING: frozenset(
        {
            JobPhase.RUNNING,
            JobPhase.FAILED,
            JobPhase.KILLED,
            JobPhase.SUCCEEDED,
            JobPhase.PREEMPTING,
            JobPhase.QUEUED,  # the engine could not take the start after all; or NotAdopted
        }
    ),
    JobPhase.RUNNING: frozenset(
        {
            JobPhase.SUCCEEDED,
            JobPhase.FAILED,
            JobPhase.KILLED,
            JobPhase.PREEMPTING,
            JobPhase.QUEUED,  # NotAdopted
        }
    ),
    JobPhase.PREEMPTING: frozenset({JobPhase.QUEUED, JobPhase.KILLED, JobPhase.FAILED}),
    JobPhase.SUCCEEDED: frozenset(),
    JobPhase.FAILED: frozenset(),
    JobPhase.KILLED: frozenset(),
}


class JobReason(StrEnum):
    """Why a job is where it is, in the controller's own words (``reason`` of ``get jobs`` and of
    its events). A job the controller failed says a ``controller.loop.failures.FailReason``; a waiting
    one a ``scheduler.WaitReason``; a worker's failure the backend's reason (``StartFailed``,
    ``WorkerFailed``, ...)."""

    SUBMITTED = "Submitted"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    COMPLETED = "Completed"
    #: every process of a started job ended, none with success, and no worker reported a failure
    ENDED = "Ended"
    #: the outcome is known; its remaining processes are being stopped
    STOPPING = "Stopping"
    KILLED = "Killed"
    PREEMPTING = "Preempting"
    PREEMPTED = "Preempted"
    #: the engine could not take the start after all: queued again (transient)
    REQUEUED = "BackendUnavailable"
    #: a restarted server's backend cannot take over started jobs: queued again
    NOT_ADOPTED = "NotAdopted"
    ADOPTED = "Adopted"
    BACKEND_AVAILABLE = "BackendAvailable"
    RESIZED = "Resized"
    RESIZE_FAILED = "ResizeFailed"
    BATCH_SIZE = "BatchSize"
    #: its SampleSet is not Ready: the job waits out of the queue
    SAMPLESET_NOT_READY = "SampleSetNotReady"
    #: a worker failed (the backend's default reason of a failure)
    WORKER_FAILED = "WorkerFailed"


class WorkerState(StrEnum):
    PENDING = "Pending"  # planned, not started yet
    RUNNING = "Running"
    PREEMPTING = "Preempting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"  # stopped by the platform (job finished, killed or shrunk)
    LOST = "Lost"  # the process vanished without an exit status


#: a worker's run in one of these states has ended (it may be restarted as a new run)
ENDED_WORKER_STATES = frozenset(
    {WorkerState.SUCCEEDED, WorkerState.FAILED, WorkerState.STOPPED, WorkerState.LOST}
)


class WorkerReason(StrEnum):
    """Why a worker's run ended as it did, where the platform knows more than its exit code (the
    ``reason`` of ``get workers``; the worker's ``message`` says the rest, such as the limit)."""

    NONE = ""
    #: killed by the kernel for using more memory than its limit (``submit --memory``)
    OOM_KILLED = "OOMKilled"
    #: ended by its own monitor: its node heard neither the platform nor the engine's controller
    #: for a while (cut off from the network: ``node.fence``), so that it never runs twice
    CUT_OFF = "CutOff"
    #: a server's port was held on its node by a process outside the platform (the launcher found it
    #: so before the program started): moved to another port (Slurm: ``PortMoved``), not restarted
    PORT_HELD = "PortHeld"


class InvalidTransition(RuntimeError):
    """A move the job state machine does not have: a bug in the controller, never a user's error."""


def can_transition(src: JobPhase, dst: JobPhase) -> bool:
    return src == dst or dst in _ALLOWED[src]


def check_transition(src: JobPhase, dst: JobPhase) -> None:
    """Raise :class:`InvalidTransition` unless ``src -> dst`` is in the table."""
    if not can_transition(src, dst):
        raise InvalidTransition(f"a job cannot go from {src} to {dst}")


@dataclass(frozen=True)
class RoleCounts:
    desired: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


@dataclass(frozen=True)
class PhaseChange:
    phase: JobPhase
    reason: str
    message: str


def next_phase(
    current: JobPhase,
    pservers: RoleCounts,
    trainers: RoleCounts,
    failure: str | None,
    failure_reason: str = JobReason.WORKER_FAILED,
) -> PhaseChange | None:
    """Decide the next phase of a started job from per-role counts; ``None`` means no change.

    ``failure`` is the backend's message when a worker failed, was lost, could not be started
    (``failure_reason`` ``StartFailed``), or the job could not be prepared (for example its
    requirements did not install).
    """
    if current in TERMINAL_PHASES or current in (JobPhase.QUEUED, JobPhase.PREEMPTING):
        return None
    if failure:
        return PhaseChange(JobPhase.FAILED, failure_reason, failure)
    if trainers.desired and trainers.succeeded >= trainers.desired:
        return PhaseChange(
            JobPhase.SUCCEEDED, JobReason.COMPLETED, f"all {trainers.desired} trainers succeeded"
        )
    if (
        current == JobPhase.STARTING
        and trainers.running + trainers.succeeded >= trainers.desired
        and pservers.running >= pservers.desired
    ):
        return PhaseChange(
            JobPhase.RUNNING,
            JobReason.RUNNING,
            f"{pservers.running} pservers and {trainers.running} trainers running",
        )
    return None
