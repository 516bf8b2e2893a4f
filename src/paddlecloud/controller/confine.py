"""One job's trouble stays that job's: a backend call that raises fails the job, never the cycle.

The reconciler and the plan's effects catch what every backend call about one job (``start``,
``adopt``, ``sync``, ``stop``, ``remove_trainer``) raises. An exception there (a backend bug,
an unexpected answer from Kubernetes, a spec an earlier version accepted that cannot run) is logged
with its traceback and made that job's failure by :func:`fail_job`:

    phase Failed, reason StartFailed | AdoptFailed | ObserveFailed | StopFailed | InvalidSpec,
    the error in the message (``describe``), a Warning event; the backend is asked (best effort)
    to stop whatever of the job still runs; a terminal job holds no placement, so the next cycle
    admits other jobs in its place.

The cycle goes on with the next job. Expected trouble is not raised at all: backends report it in
the job's status (a worker that cannot be started, ``StartFailed``) or as an event (Kubernetes
unreachable for a while).
"""

from __future__ import annotations

import logging
from enum import StrEnum

from paddlecloud.controller.context import Context, job_key
from paddlecloud.core.phases import JobPhase
from paddlecloud.store.tables import JobRow

__all__ = ["FailReason", "fail_job"]

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


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:2000]


def fail_job(ctx: Context, row: JobRow, reason: FailReason, what: str, exc: BaseException) -> None:
    """Fail ``row`` because ``what`` raised ``exc``: stop what may still run, record why."""
    key = job_key(row.user, row.name)
    message = f"{what} failed: {_describe(exc)}"
    log.error("job %s: %s", key, message, exc_info=exc)
    try:  # release what it may hold; a job whose stop itself fails is still taken off the cluster
        ctx.backend.stop(key, 0.0)
    except Exception:
        log.exception("job %s: stopping it after %s failed too", key, what)
    row.phase, row.reason, row.message = JobPhase.FAILED, str(reason), message
    row.finished_at = ctx.clock.now()
    ctx.event(row, "Warning", str(reason), message)
