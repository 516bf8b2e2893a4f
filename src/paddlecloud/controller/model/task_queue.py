"""A job's task queue as ``core.tasks`` values, and what the reconcile loop does to it.

    task rows ──slot_of / limits_of──▶ TaskSlot, TaskLimits ──core.tasks──▶ TaskSlot
              ◀──store_slot / slot_columns (a guarded UPDATE's values)──
    reconciler ──release_ended(worker runs that ended)──▶ their leases abandoned at once

Shared by the task service (``services.tasks``: lease, done, fail, renew, status) and the loop,
which may not import each other.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from paddlecloud.backends.base import WorkerStatus
from paddlecloud.core import tasks as logic
from paddlecloud.core.phases import ENDED_WORKER_STATES
from paddlecloud.core.tasks import TaskLimits, TaskSlot, TaskState
from paddlecloud.store.tables import TaskQueueRow, TaskRow

__all__ = ["limits_of", "release_ended", "slot_columns", "slot_of", "store_slot"]


def release_ended(s: Session, job_id: int, workers: Iterable[WorkerStatus]) -> int:
    """Abandon the leases held by worker runs that have ended (failed, restarted, retired), so their
    tasks go to another trainer now rather than when the lease expires; returns how many. Called by
    the reconciler with what the backend observed; the caller commits."""
    q = s.scalar(select(TaskQueueRow).where(TaskQueueRow.job_id == job_id))
    if q is None:
        return 0
    runs = {w.name: (w.restarts, w.state in ENDED_WORKER_STATES) for w in workers}
    leased = s.scalars(select(TaskRow).where(TaskRow.queue_id == q.id, TaskRow.state == TaskState.LEASED))
    released = 0
    for t in [t for t in leased if logic.holder_gone(t.holder, runs)]:
        slot = logic.abandon(slot_of(t), limits_of(q))
        # guarded: a trainer's done / fail since the SELECT (another session) wins
        r = s.execute(
            update(TaskRow)
            .where(TaskRow.id == t.id, TaskRow.state == TaskState.LEASED, TaskRow.lease == t.lease)
            .values(slot_columns(slot))
            .execution_options(synchronize_session=False)
        )
        released += r.rowcount  # type: ignore[attr-defined]
    return released


# -- rows <-> values ------------------------------------------------------------------------------


def slot_of(t: TaskRow) -> TaskSlot:
    return TaskSlot(
        state=TaskState(t.state), lease=t.lease, holder=t.holder, expires=t.lease_expires,
        failures=t.failures, done_lease=t.done_lease, error=t.error,
    )  # fmt: skip


def store_slot(t: TaskRow, slot: TaskSlot) -> None:
    t.state, t.lease, t.holder, t.lease_expires = str(slot.state), slot.lease, slot.holder, slot.expires
    t.failures, t.done_lease, t.error = slot.failures, slot.done_lease, slot.error


def slot_columns(slot: TaskSlot) -> dict[str, object]:
    return {
        "state": str(slot.state), "lease": slot.lease, "holder": slot.holder, "lease_expires": slot.expires,
        "failures": slot.failures, "done_lease": slot.done_lease, "error": slot.error,
    }  # fmt: skip


def limits_of(q: TaskQueueRow) -> TaskLimits:
    return TaskLimits(lease_seconds=q.lease_seconds, max_failures=q.max_failures)
