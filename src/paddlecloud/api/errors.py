"""The one exception hierarchy of PaddleCloud, shared by the server and the SDK.

    PaddleCloudError                 code                 HTTP
    ├── InvalidInput                 invalid_spec, invalid_request, invalid_package,
    │                                entry_not_found, invalid_path, checksum_mismatch,
    │                                exceeds_capacity, sampleset_path_invalid          422 / 400
    ├── PackageTooLarge              package_too_large     413
    ├── RequestTooLarge              request_too_large     413
    ├── Unauthorized                 unauthorized          401
    ├── Forbidden                    forbidden, quota_exceeded                            403
    ├── NotFound                     job_not_found, package_not_found, worker_not_found,
    │                                user_not_found, path_not_found, upload_not_found,
    │                                no_task_master, task_not_found, sampleset_not_found  404
    ├── Conflict                     job_exists, job_not_running, user_exists, path_exists,
    │                                not_a_directory, is_a_directory, directory_not_empty,
    │                                path_not_accessible, lease_lost, user_has_jobs, own_account,
    │                                sampleset_exists, sampleset_in_use,
    │                                samplesets_unavailable                               409
    ├── VersionMismatch              client_too_old, server_too_old                       426
    ├── ServerUnreachable            server_unreachable    (client side only)
    ├── InsufficientStorage          insufficient_storage  507
    └── ServerError                  internal              500

On the wire every error is ``{"error": {"code": ..., "message": ..., "field": ...}}``. Codes are
stable: clients branch on ``code``, never on ``message``. The SDK turns an error response back into the
same exception class with :func:`error_from_body`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "Conflict",
    "ErrorCode",
    "Forbidden",
    "InsufficientStorage",
    "InvalidInput",
    "NotFound",
    "PackageTooLarge",
    "PaddleCloudError",
    "RequestTooLarge",
    "ServerError",
    "ServerUnreachable",
    "Unauthorized",
    "VersionMismatch",
    "error_from_body",
]


class ErrorCode(StrEnum):
    INVALID_SPEC = "invalid_spec"
    INVALID_REQUEST = "invalid_request"
    INVALID_PACKAGE = "invalid_package"
    ENTRY_NOT_FOUND = "entry_not_found"
    INVALID_PATH = "invalid_path"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    #: a job no node (or the whole cluster) of a fixed-capacity cluster could ever hold
    EXCEEDS_CAPACITY = "exceeds_capacity"
    PACKAGE_TOO_LARGE = "package_too_large"
    #: a request body over the server's limit (``up --max-request-size``)
    REQUEST_TOO_LARGE = "request_too_large"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    QUOTA_EXCEEDED = "quota_exceeded"
    JOB_NOT_FOUND = "job_not_found"
    PACKAGE_NOT_FOUND = "package_not_found"
    WORKER_NOT_FOUND = "worker_not_found"
    USER_NOT_FOUND = "user_not_found"
    PATH_NOT_FOUND = "path_not_found"
    UPLOAD_NOT_FOUND = "upload_not_found"
    NO_TASK_MASTER = "no_task_master"
    TASK_NOT_FOUND = "task_not_found"
    #: adaptive-batch routes on a job submitted without ``batch.adaptive``
    NOT_ADAPTIVE = "not_adaptive"
    JOB_EXISTS = "job_exists"
    JOB_NOT_RUNNING = "job_not_running"
    #: the job's stored spec no longer passes the spec's rules (a damaged row, or one written by a
    #: version with other rules): the job can be listed, killed and removed, not described
    SPEC_UNREADABLE = "spec_unreadable"
    USER_EXISTS = "user_exists"
    PATH_EXISTS = "path_exists"
    NOT_A_DIRECTORY = "not_a_directory"
    IS_A_DIRECTORY = "is_a_directory"
    DIRECTORY_NOT_EMPTY = "directory_not_empty"
    #: the file system refused the file service itself (permissions changed from inside a job)
    PATH_NOT_ACCESSIBLE = "path_not_accessible"
    LEASE_LOST = "lease_lost"
    USER_HAS_JOBS = "user_has_jobs"
    OWN_ACCOUNT = "own_account"
    CLIENT_TOO_OLD = "client_too_old"
    SERVER_TOO_OLD = "server_too_old"
    SERVER_UNREACHABLE = "server_unreachable"
    INSUFFICIENT_STORAGE = "insufficient_storage"
    #: SampleSets (``api.samplesets``): another user's is not found too (never forbidden)
    SAMPLESET_NOT_FOUND = "sampleset_not_found"
    SAMPLESET_EXISTS = "sampleset_exists"
    #: deleting a SampleSet that a job not finished yet names (the message names the jobs)
    SAMPLESET_IN_USE = "sampleset_in_use"
    #: this cluster cannot cache SampleSets (a backend without the capability, no FUSE device)
    SAMPLESETS_UNAVAILABLE = "samplesets_unavailable"
    #: a SampleJob path that is absolute, holds "..", or is empty where one is needed
    SAMPLESET_PATH_INVALID = "sampleset_path_invalid"
    #: a job names a container image on a backend that cannot run one (``Capability.IMAGES``)
    IMAGES_UNAVAILABLE = "images_unavailable"
    #: logging out of a registry one has no login for
    REGISTRY_LOGIN_NOT_FOUND = "registry_login_not_found"
    #: an operation this server's backend does not offer (``version`` lists its capabilities)
    NOT_SUPPORTED = "not_supported"
    INTERNAL = "internal"


class PaddleCloudError(Exception):
    """Base of every error the platform reports; ``str(err)`` is one human line."""

    http_status = 500
    default_code = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.field = field

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.field:
            body["field"] = self.field
        return {"error": body}


class InvalidInput(PaddleCloudError):
    http_status = 422
    default_code = ErrorCode.INVALID_SPEC


class PackageTooLarge(PaddleCloudError):
    http_status = 413
    default_code = ErrorCode.PACKAGE_TOO_LARGE


class RequestTooLarge(PaddleCloudError):
    http_status = 413
    default_code = ErrorCode.REQUEST_TOO_LARGE


class Unauthorized(PaddleCloudError):
    http_status = 401
    default_code = ErrorCode.UNAUTHORIZED


class Forbidden(PaddleCloudError):
    http_status = 403
    default_code = ErrorCode.FORBIDDEN


class NotFound(PaddleCloudError):
    http_status = 404
    default_code = ErrorCode.JOB_NOT_FOUND


class Conflict(PaddleCloudError):
    http_status = 409
    default_code = ErrorCode.JOB_EXISTS


class VersionMismatch(PaddleCloudError):
    http_status = 426
    default_code = ErrorCode.CLIENT_TOO_OLD


class ServerUnreachable(PaddleCloudError):
    default_code = ErrorCode.SERVER_UNREACHABLE


class InsufficientStorage(PaddleCloudError):
    http_status = 507
    default_code = ErrorCode.INSUFFICIENT_STORAGE


class ServerError(PaddleCloudError):
    http_status = 500
    default_code = ErrorCode.INTERNAL


_BY_CODE: dict[str, type[PaddleCloudError]] = {
    ErrorCode.INVALID_SPEC: InvalidInput,
    ErrorCode.INVALID_REQUEST: InvalidInput,
    ErrorCode.INVALID_PACKAGE: InvalidInput,
    ErrorCode.ENTRY_NOT_FOUND: InvalidInput,
    ErrorCode.INVALID_PATH: InvalidInput,
    ErrorCode.CHECKSUM_MISMATCH: InvalidInput,
    ErrorCode.EXCEEDS_CAPACITY: InvalidInput,
    ErrorCode.NOT_SUPPORTED: InvalidInput,
    ErrorCode.REQUEST_TOO_LARGE: RequestTooLarge,
    ErrorCode.FORBIDDEN: Forbidden,
    ErrorCode.QUOTA_EXCEEDED: Forbidden,
    ErrorCode.USER_NOT_FOUND: NotFound,
    ErrorCode.PATH_NOT_FOUND: NotFound,
    ErrorCode.UPLOAD_NOT_FOUND: NotFound,
    ErrorCode.NO_TASK_MASTER: NotFound,
    ErrorCode.TASK_NOT_FOUND: NotFound,
    ErrorCode.USER_EXISTS: Conflict,
    ErrorCode.PATH_EXISTS: Conflict,
    ErrorCode.NOT_A_DIRECTORY: Conflict,
    ErrorCode.IS_A_DIRECTORY: Conflict,
    ErrorCode.DIRECTORY_NOT_EMPTY: Conflict,
    ErrorCode.PATH_NOT_ACCESSIBLE: Conflict,
    ErrorCode.LEASE_LOST: Conflict,
    ErrorCode.NOT_ADAPTIVE: Conflict,
    ErrorCode.USER_HAS_JOBS: Conflict,
    ErrorCode.OWN_ACCOUNT: Conflict,
    ErrorCode.PACKAGE_TOO_LARGE: PackageTooLarge,
    ErrorCode.UNAUTHORIZED: Unauthorized,
    ErrorCode.JOB_NOT_FOUND: NotFound,
    ErrorCode.PACKAGE_NOT_FOUND: NotFound,
    ErrorCode.WORKER_NOT_FOUND: NotFound,
    ErrorCode.JOB_EXISTS: Conflict,
    ErrorCode.JOB_NOT_RUNNING: Conflict,
    ErrorCode.SPEC_UNREADABLE: Conflict,
    ErrorCode.CLIENT_TOO_OLD: VersionMismatch,
    ErrorCode.SERVER_TOO_OLD: VersionMismatch,
    ErrorCode.SERVER_UNREACHABLE: ServerUnreachable,
    ErrorCode.INSUFFICIENT_STORAGE: InsufficientStorage,
    ErrorCode.INTERNAL: ServerError,
    ErrorCode.SAMPLESET_NOT_FOUND: NotFound,
    ErrorCode.SAMPLESET_EXISTS: Conflict,
    ErrorCode.SAMPLESET_IN_USE: Conflict,
    ErrorCode.SAMPLESETS_UNAVAILABLE: Conflict,
    ErrorCode.SAMPLESET_PATH_INVALID: InvalidInput,
    ErrorCode.IMAGES_UNAVAILABLE: Conflict,
    ErrorCode.REGISTRY_LOGIN_NOT_FOUND: NotFound,
}


def error_from_body(status: int, body: Any) -> PaddleCloudError:
    """Rebuild the exception a server sent; tolerant of bodies that are not ours (proxies)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or "code" not in err:
        return ServerError(f"server answered HTTP {status} without a PaddleCloud error body")
    code_text = str(err["code"])
    try:
        code = ErrorCode(code_text)
    except ValueError:
        return ServerError(str(err.get("message", code_text)))
    cls = _BY_CODE.get(code, ServerError)
    return cls(str(err.get("message", code_text)), code=code, field=err.get("field"))
