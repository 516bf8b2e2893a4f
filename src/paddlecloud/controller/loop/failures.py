"""One job's trouble stays that job's: a backend call that raises fails the job, never the cycle.

The reconciler and the plan's effects catch what every backend call about one job (``start``,
``adopt``, ``sync``, ``stop``, ``remove_trainer``) raises. An exception there (a backend bug,
an unexpected answer from Kubernetes, a spec an earlier version accepted that cannot run) is logged
with its traceback and made that job's failure by :func:`fail_job`:

    phase Failed, reason StartFailed | AdoptFailed | ObserveFailed | StopFailed | InvalidSpec,
    the error in the message (``describe``), a Warning event; the backend is asked (best effort)
    to stop whatever of the job still runs; a terminal job holds no placement, so the next cycle
    admits other jobs in its place.

The disk watch's verdict (``controller.loop.diskwatch``: the owner passed their storage quota) ends a job
the same way, through :func:`end_failed` (``StorageQuotaExceeded`` / ``StorageUnmeasurable``).

The cycle goes on with the next job. Expected trouble is not raised at all: backends report it in
the job's status (a worker that cannot be started, ``StartFailed``) or as an event (Kubernetes
unreachable for a while).

What a backend raises on purpose is a ``backends.errors.BackendError`` and is treated by its kind
(:func:`backend_trouble`):

    transient     (BackendUnavailable) the job is kept: a Warning event once, the call is tried
                  again next cycle; past ``PlatformConfig.backend_retry_s`` without success the job
                  fails (BackendUnavailable)
    rejected      (JobRejected) the job fails with the engine's message (BackendRejected)
    not-supported (NotSupported) the job fails, naming the operation (NotSupported)
    anything else fails the job as above (StartFailed, ...), with the exception's type
"""

from __future__ import annotations

import logging
from enum import StrEnum

from paddlecloud.backends.errors import BackendError, ErrorKind
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.core.phases import JobPhase, JobReason
from paddlecloud.store.tables import JobRow

__all__ = ["FailReason", "backend_recovered", "backend_trouble", "end_failed", "fail_job"]

log = logging.getLogger("paddlecloud.controller")


class FailReason(StrEnum):
    """Stable reasons of a job failed by the controller (``reason`` of ``get jobs``)."""

    #: the backend could not start the job (or one of its workers)
    START_FAILED = "StartFailed"
    #: after a server restart, the backend could not take the job over
    ADOPT_FAILED = "AdoptFailed"
    #: observing the job (``sync``) failed
    OBSERVE_FAILED = "ObserveFailed"
    #: stopping the job or one of its trainers (preemption, shrink, kill) failed
    STOP_FAILED = "StopFailed"
    #: the stored spec cannot be read any more
    INVALID_SPEC = "InvalidSpec"
    #: the engine could not be reached for longer than ``backend_retry_s`` (``BackendUnavailable``)
    BACKEND_UNAVAILABLE = "BackendUnavailable"
    #: the engine refused the job (``JobRejected``)
    BACKEND_REJECTED = "BackendRejected"
    #: the operation is outside the backend's capabilities (``NotSupported``)
    NOT_SUPPORTED = "NotSupported"
    #: the owner's storage use (PFS home, the jobs' own folders, SampleSet caches) passed their
    #: storage quota while the job ran (``controller.loop.diskwatch``)
    STORAGE_QUOTA_EXCEEDED = "StorageQuotaExceeded"
    #: the owner's storage use could not be measured (a folder the server may not read, or nested
    #: too deep), so the quota could not be enforced: failed closed (``controller.loop.diskwatch``)
    STORAGE_UNMEASURABLE = "StorageUnmeasurable"


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    if isinstance(exc, BackendError):  # the engine's own words
        return text[:2000]
    return f"{type(exc).__name__}: {text}"[:2000]


def fail_job(ctx: Context, row: JobRow, reason: FailReason, what: str, exc: BaseException) -> None:
    """Fail ``row`` because ``what`` raised ``exc``: stop what may still run, record why. A backend's
    rejection or not-supported error gives its own reason (BackendRejected, NotSupported)."""
    key = job_key(row.user, row.name)
    message = f"{what} failed: {_describe(exc)}"
    if isinstance(exc, BackendError) and exc.kind != ErrorKind.TRANSIENT:
        reason = FailReason(exc.reason)
        log.warning("job %s: %s", key, message)
    else:
        log.error("job %s: %s", key, message, exc_info=exc)
    end_failed(ctx, row, reason, message)


def end_failed(ctx: Context, row: JobRow, reason: FailReason, message: str) -> None:
    """The one place where the controller fails a started job itself: whatever of it still runs is
    stopped (SIGKILL, no grace), then phase Failed with ``reason`` and ``message`` and a Warning
    event. A job whose stop fails is still taken off the cluster (its placement freed)."""
    key = job_key(row.user, row.name)
    ctx.retrying.pop(key, None)
    try:
        ctx.backend.stop(key, 0.0)
    except Exception:
        log.exception("job %s: stopping it (%s) failed", key, reason)
    ctx.move(row, JobPhase.FAILED, str(reason), message)
    ctx.event(row, "Warning", str(reason), message)


def backend_trouble(ctx: Context, row: JobRow, reason: FailReason, what: str, exc: BaseException) -> bool:
    """``what`` (a backend call about ``row``) raised ``exc``. A transient error within the retry
    bound keeps the job (True: the caller leaves it as it is and the next cycle tries again; a
    Warning event at the first failure of a streak); anything else fails it (False)."""
    key = job_key(row.user, row.name)
    if not (isinstance(exc, BackendError) and exc.kind == ErrorKind.TRANSIENT):
        fail_job(ctx, row, reason, what, exc)
        return False
    now, bound = ctx.clock.now(), ctx.config.backend_retry_s
    streak_begins = key not in ctx.retrying
    first = ctx.retrying.setdefault(key, now)
    if now - first >= bound:
        fail_job(ctx, row, FailReason.BACKEND_UNAVAILABLE, f"{what} (tried for {now - first:.0f} s)", exc)
        return False
    log.warning("job %s: %s failed, retrying next cycle: %s", key, what, exc)
    if streak_begins:
        message = f"{what} failed: {_describe(exc)}; trying again each cycle for up to {bound:g} s"
        ctx.event(row, "Warning", exc.reason, message)
    return True


def backend_recovered(ctx: Context, row: JobRow) -> None:
    """A backend call about ``row`` succeeded: a streak of transient errors ends (with an event)."""
    if ctx.retrying.pop(job_key(row.user, row.name), None) is not None:
        ctx.event(row, "Normal", JobReason.BACKEND_AVAILABLE, "the backend answers again")
