"""The data task master's decisions, as pure functions over values (no database, no clock).

A job's input is split once, at submit, into tasks (:func:`split_files`, :func:`item_tasks`). Each
task then moves through this state machine within a pass; the service (``controller/services/tasks.py``)
loads rows, asks these functions and writes the result back::

            grant                    complete (the lease's owner)
    todo ───────────▶ leased ──────────────────────────────────────▶ done
     ▲                  │ fail, or the lease expired (reclaim):
     │                  │ failures + 1
     └── < max_failures ┤
                        └── = max_failures ──────────────────────────▶ failed

A lease is a random id chosen by the trainer: whoever holds it may renew, complete or fail the task.
Its holder is the worker and run that leased it (``trainer-1#0``): when the platform sees that run
end (the worker failed, was restarted or retired), its leases are abandoned at once
(:func:`holder_gone`, :func:`abandon`), counted as a failure like an expiry, instead of waiting for
the lease time.
An expired lease stays valid until the task is handed to someone else (reclaiming is lazy, on the
next lease request), so a slow trainer that finishes before anyone else asks still counts. The
lease that completed a task stays recorded (``done_lease``), so a retried ``done`` is answered
"already acknowledged" instead of being counted twice.

When no task is todo and none is leased the pass is over (:func:`pass_step`): every task starts
the next pass as todo (failures counted per pass), until ``num_passes`` passes are done.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "LeaseError",
    "PassStep",
    "TaskDef",
    "TaskKind",
    "TaskLimits",
    "TaskSlot",
    "TaskState",
    "abandon",
    "complete",
    "expired",
    "fail",
    "grant",
    "holder_gone",
    "holder_name",
    "item_tasks",
    "next_pass",
    "pass_step",
    "reclaim",
    "renew",
    "retry_after",
    "split_files",
]

#: how long a trainer waits before asking again while every remaining task is leased (at most)
WAIT_S = 0.25
#: ... and at least (a lease about to expire)
MIN_WAIT_S = 0.05


class TaskState(StrEnum):
    TODO = "todo"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"


class TaskKind(StrEnum):
    FILE = "file"  # a whole file of the input
    RANGE = "range"  # bytes [offset, offset + length) of a file of the input
    ITEM = "item"  # an entry of the spec's explicit list


class LeaseError(ValueError):
    """The caller does not hold the task's lease (any longer): another trainer has it, or it ended."""


@dataclass(frozen=True)
class TaskDef:
    """What one task is: the part of the input a trainer processes."""

    kind: TaskKind
    path: str  # relative to the job's input (file, range) or the item's text
    offset: int = 0
    length: int | None = None  # None: to the end (whole file) or not a file


@dataclass(frozen=True)
class TaskLimits:
    lease_seconds: float
    max_failures: int


@dataclass(frozen=True)
class TaskSlot:
    """The lease state of one task in the current pass."""

    state: TaskState = TaskState.TODO
    lease: str = ""
    holder: str = ""
    expires: float | None = None
    failures: int = 0
    #: the lease that completed the task last (kept across passes: a retried ``done`` is not a new one)
    done_lease: str = ""
    #: the last failure in this pass (kept when the task is then done: why it took more leases)
    error: str = ""


class PassStep(StrEnum):
    LEASE = "lease"  # some task is todo: hand it out
    WAIT = "wait"  # every remaining task is leased: ask again later
    NEXT_PASS = "next_pass"  # the pass is over and another one follows
    FINISHED = "finished"  # the last pass is over


# -- splitting the input --------------------------------------------------------------------------


def split_files(
    files: Iterable[tuple[str, int]], chunk_size: int | None, pattern: str = "*"
) -> list[TaskDef]:
    """One task per file (relative path, size) whose name matches ``pattern``, in path order; with
    ``chunk_size``, files larger than it become consecutive byte ranges of at most ``chunk_size``."""
    out: list[TaskDef] = []
    for path, size in sorted(files):
        if not (fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)):
            continue
        if chunk_size is None or size <= chunk_size:
            out.append(TaskDef(TaskKind.FILE, path, 0, size))
            continue
        out.extend(
            TaskDef(TaskKind.RANGE, path, off, min(chunk_size, size - off))
            for off in range(0, size, chunk_size)
        )
    return out


def item_tasks(items: Sequence[str]) -> list[TaskDef]:
    """One task per item of an explicit list, in the order given."""
    return [TaskDef(TaskKind.ITEM, item) for item in items]


# -- leases ---------------------------------------------------------------------------------------


def expired(t: TaskSlot, now: float) -> bool:
    """A leased task whose lease ran out: it may be handed to someone else."""
    return t.state == TaskState.LEASED and t.expires is not None and t.expires <= now


def _failed_once(t: TaskSlot, limits: TaskLimits, error: str) -> TaskSlot:
    failures = t.failures + 1
    state = TaskState.FAILED if failures >= limits.max_failures else TaskState.TODO
    return dataclasses.replace(
        t, state=state, lease="", holder="", expires=None, failures=failures, error=error
    )


def reclaim(t: TaskSlot, now: float, limits: TaskLimits) -> TaskSlot:
    """An expired lease counts as a failure: the task is todo again, or failed at the limit."""
    if not expired(t, now):
        return t
    return _failed_once(t, limits, f"lease of {t.holder or 'a trainer'} expired")


def abandon(t: TaskSlot, limits: TaskLimits) -> TaskSlot:
    """The holder's run is known to have ended: a failure, like an expired lease."""
    if t.state != TaskState.LEASED:
        return t
    return _failed_once(t, limits, f"{t.holder or 'the holder'} ended while holding the task")


def holder_name(worker: str, run: int) -> str:
    """Who holds a lease: a worker and its run (``PADDLECLOUD_RESTART``), ``trainer-1#0``."""
    return f"{worker}#{run}" if worker else ""


def holder_gone(holder: str, runs: Mapping[str, tuple[int, bool]]) -> bool:
    """Whether the run holding a lease has ended, from each worker's (current run, ended?): the
    worker is on a later run, or its run ended. Holders the job does not have are never judged."""
    name, sep, run = holder.rpartition("#")
    if not sep or not run.isdigit() or name not in runs:
        return False
    current, ended = runs[name]
    return int(run) < current or (int(run) == current and ended)


def grant(t: TaskSlot, lease: str, holder: str, now: float, limits: TaskLimits) -> TaskSlot:
    """Hand a todo task to ``holder`` under ``lease`` until ``now + lease_seconds``."""
    if t.state != TaskState.TODO:
        raise LeaseError(f"task is {t.state}, not todo")
    return dataclasses.replace(
        t, state=TaskState.LEASED, lease=lease, holder=holder, expires=now + limits.lease_seconds
    )


def _holds(t: TaskSlot, lease: str) -> bool:
    return t.state == TaskState.LEASED and bool(lease) and t.lease == lease


def renew(t: TaskSlot, lease: str, now: float, limits: TaskLimits) -> TaskSlot:
    """Extend the lease to ``now + lease_seconds`` (only its holder)."""
    if not _holds(t, lease):
        raise LeaseError("the lease is not held: the task was handed to another trainer or ended")
    return dataclasses.replace(t, expires=now + limits.lease_seconds)


def complete(t: TaskSlot, lease: str) -> tuple[TaskSlot, bool]:
    """Acknowledge the task done; returns the new slot and whether this is a new acknowledgement
    (False: the same lease already completed it, e.g. a retried request)."""
    if lease and t.done_lease == lease:
        return t, False
    if not _holds(t, lease):
        raise LeaseError("the lease is not held: the task was handed to another trainer or ended")
    done = dataclasses.replace(t, state=TaskState.DONE, lease="", expires=None, done_lease=lease)
    return done, True


def fail(t: TaskSlot, lease: str, limits: TaskLimits, error: str) -> TaskSlot:
    """The holder gave up on the task: todo again, or failed at the failure limit."""
    if not _holds(t, lease):
        raise LeaseError("the lease is not held: the task was handed to another trainer or ended")
    return _failed_once(t, limits, error or "reported failed")


# -- passes ---------------------------------------------------------------------------------------


def pass_step(counts: Mapping[TaskState, int], pass_no: int, num_passes: int) -> PassStep:
    """What a lease request does, from the task counts of the current pass (after reclaiming)."""
    if counts.get(TaskState.TODO, 0):
        return PassStep.LEASE
    if counts.get(TaskState.LEASED, 0):
        return PassStep.WAIT
    return PassStep.NEXT_PASS if pass_no + 1 < num_passes else PassStep.FINISHED


def next_pass(t: TaskSlot) -> TaskSlot:
    """A task at the start of the next pass: todo, no failures yet (``done_lease`` kept)."""
    return TaskSlot(done_lease=t.done_lease)


def retry_after(expiries: Iterable[float | None], now: float) -> float:
    """How long a waiting trainer sleeps: until the first lease could expire, within
    [MIN_WAIT_S, WAIT_S] (a task may also come back earlier, by ``fail`` or at the end of a pass)."""
    soonest = min((e for e in expiries if e is not None), default=now + WAIT_S)
    return max(MIN_WAIT_S, min(WAIT_S, soonest - now))
