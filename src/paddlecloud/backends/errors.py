"""What a backend raises when a call about a job cannot be done, by what the controller should do.

    BackendError            the base; ``kind`` says what it means for the job
    ├─ BackendUnavailable   TRANSIENT: the engine cannot be reached or is overloaded now (connection
    │                       refused, timeout, 5xx, 429). The job is kept and the call is tried again
    │                       next cycle (an event says so), for at most ``PlatformConfig.backend_retry_s``
    ├─ JobRejected          REJECTED: the engine refused this job (a bad request, a quota, a shape it
    │                       can never hold). The job fails with the engine's own message
    └─ NotSupported         NOT_SUPPORTED: an operation outside this backend's capabilities (asked
                            anyway, or refused by the engine's version). The job fails (or, for a
                            grow, stays as it is), saying which operation

Modelled on kopf's ``TemporaryError`` / ``PermanentError`` (retry later vs. give up) and SkyPilot's
``NotSupportedError``. Anything else a backend raises is a bug or a surprise: it still fails that
job alone (``controller.loop.failures``), with its type and traceback in the log.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

__all__ = ["BackendError", "BackendUnavailable", "ErrorKind", "IsolationError", "JobRejected", "NotSupported"]


class ErrorKind(StrEnum):
    TRANSIENT = "transient"
    REJECTED = "rejected"
    NOT_SUPPORTED = "not-supported"


class BackendError(Exception):
    """A backend's refusal or trouble with one call; ``str(err)`` is the engine's message."""

    kind: ClassVar[ErrorKind] = ErrorKind.REJECTED
    #: the stable reason the controller records (a job event's reason, a failed job's reason)
    reason: ClassVar[str] = "BackendError"


class BackendUnavailable(BackendError):
    kind = ErrorKind.TRANSIENT
    reason = "BackendUnavailable"


class JobRejected(BackendError):
    kind = ErrorKind.REJECTED
    reason = "BackendRejected"


class NotSupported(BackendError):
    kind = ErrorKind.NOT_SUPPORTED
    reason = "NotSupported"

    def __init__(self, backend: str, operation: str, detail: str = "") -> None:
        super().__init__(
            f"the {backend} backend does not support {operation}" + (f": {detail}" if detail else "")
        )
        self.backend = backend
        self.operation = operation


class IsolationError(RuntimeError):
    """The isolation a backend was asked for (``up --isolation``) cannot be had here, found when it
    is set up, not in a call about a job; the message says what to change. Here (not in the local
    sandbox's module) so that the server and the CLI name it without importing a backend."""
