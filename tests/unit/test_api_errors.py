"""api.errors: wire bodies and error_from_body rebuilding the same exception."""

from __future__ import annotations

from typing import Any

import pytest

from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    NotFound,
    PackageTooLarge,
    PaddleCloudError,
    RequestTooLarge,
    ServerError,
    ServerUnreachable,
    Unauthorized,
    VersionMismatch,
    error_from_body,
)

# The hierarchy of the module docstring, written out independently of the implementation's table.
EXPECTED: dict[ErrorCode, tuple[type[PaddleCloudError], int]] = {
    ErrorCode.INVALID_SPEC: (InvalidInput, 422),
    ErrorCode.INVALID_REQUEST: (InvalidInput, 422),
    ErrorCode.INVALID_PACKAGE: (InvalidInput, 422),
    ErrorCode.ENTRY_NOT_FOUND: (InvalidInput, 422),
    ErrorCode.INVALID_PATH: (InvalidInput, 422),
    ErrorCode.CHECKSUM_MISMATCH: (InvalidInput, 422),
    ErrorCode.EXCEEDS_CAPACITY: (InvalidInput, 422),
    ErrorCode.NOT_SUPPORTED: (InvalidInput, 422),
    ErrorCode.REQUEST_TOO_LARGE: (RequestTooLarge, 413),
    ErrorCode.FORBIDDEN: (Forbidden, 403),
    ErrorCode.QUOTA_EXCEEDED: (Forbidden, 403),
    ErrorCode.USER_NOT_FOUND: (NotFound, 404),
    ErrorCode.PATH_NOT_FOUND: (NotFound, 404),
    ErrorCode.UPLOAD_NOT_FOUND: (NotFound, 404),
    ErrorCode.NO_TASK_MASTER: (NotFound, 404),
    ErrorCode.TASK_NOT_FOUND: (NotFound, 404),
    ErrorCode.LEASE_LOST: (Conflict, 409),
    ErrorCode.NOT_ADAPTIVE: (Conflict, 409),
    ErrorCode.USER_HAS_JOBS: (Conflict, 409),
    ErrorCode.OWN_ACCOUNT: (Conflict, 409),
    ErrorCode.USER_EXISTS: (Conflict, 409),
    ErrorCode.PATH_EXISTS: (Conflict, 409),
    ErrorCode.NOT_A_DIRECTORY: (Conflict, 409),
    ErrorCode.IS_A_DIRECTORY: (Conflict, 409),
    ErrorCode.DIRECTORY_NOT_EMPTY: (Conflict, 409),
    ErrorCode.PATH_NOT_ACCESSIBLE: (Conflict, 409),
    ErrorCode.PACKAGE_TOO_LARGE: (PackageTooLarge, 413),
    ErrorCode.UNAUTHORIZED: (Unauthorized, 401),
    ErrorCode.JOB_NOT_FOUND: (NotFound, 404),
    ErrorCode.PACKAGE_NOT_FOUND: (NotFound, 404),
    ErrorCode.WORKER_NOT_FOUND: (NotFound, 404),
    ErrorCode.JOB_EXISTS: (Conflict, 409),
    ErrorCode.JOB_NOT_RUNNING: (Conflict, 409),
    ErrorCode.SPEC_UNREADABLE: (Conflict, 409),
    ErrorCode.CLIENT_TOO_OLD: (VersionMismatch, 426),
    ErrorCode.SERVER_TOO_OLD: (VersionMismatch, 426),
    ErrorCode.INSUFFICIENT_STORAGE: (InsufficientStorage, 507),
    ErrorCode.INTERNAL: (ServerError, 500),
    ErrorCode.SAMPLESET_NOT_FOUND: (NotFound, 404),
    ErrorCode.SAMPLESET_EXISTS: (Conflict, 409),
    ErrorCode.SAMPLESET_IN_USE: (Conflict, 409),
    ErrorCode.SAMPLESETS_UNAVAILABLE: (Conflict, 409),
    ErrorCode.SAMPLESET_PATH_INVALID: (InvalidInput, 422),
    ErrorCode.IMAGES_UNAVAILABLE: (Conflict, 409),
    ErrorCode.REGISTRY_LOGIN_NOT_FOUND: (NotFound, 404),
}


def test_table_covers_every_code_but_the_client_side_one() -> None:
    assert set(EXPECTED) | {ErrorCode.SERVER_UNREACHABLE} == set(ErrorCode)


@pytest.mark.parametrize("code", list(EXPECTED))
@pytest.mark.parametrize("field", [None, "trainers.cpu"])
def test_round_trip(code: ErrorCode, field: str | None) -> None:
    cls, status = EXPECTED[code]
    sent = cls(f"something about {code}", code=code, field=field)
    assert sent.http_status == status
    body = sent.to_body()
    assert body["error"]["code"] == str(code)
    assert ("field" in body["error"]) is (field is not None)
    got = error_from_body(status, body)
    assert type(got) is cls
    assert (got.code, got.message, got.field) == (code, sent.message, field)
    assert str(got) == sent.message


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (InvalidInput, ErrorCode.INVALID_SPEC),
        (PackageTooLarge, ErrorCode.PACKAGE_TOO_LARGE),
        (RequestTooLarge, ErrorCode.REQUEST_TOO_LARGE),
        (Unauthorized, ErrorCode.UNAUTHORIZED),
        (NotFound, ErrorCode.JOB_NOT_FOUND),
        (Conflict, ErrorCode.JOB_EXISTS),
        (VersionMismatch, ErrorCode.CLIENT_TOO_OLD),
        (ServerUnreachable, ErrorCode.SERVER_UNREACHABLE),
        (ServerError, ErrorCode.INTERNAL),
    ],
)
def test_default_codes(cls: type[PaddleCloudError], code: ErrorCode) -> None:
    assert cls("x").code == code
    assert issubclass(cls, PaddleCloudError)


@pytest.mark.parametrize(
    "body",
    [
        None,
        "Bad Gateway",
        ["error"],
        {},
        {"detail": "Not Found"},
        {"error": "boom"},
        {"error": {"message": "no code"}},
    ],
)
def test_bodies_that_are_not_ours(body: Any) -> None:
    err = error_from_body(502, body)
    assert type(err) is ServerError
    assert err.code == ErrorCode.INTERNAL
    assert "HTTP 502" in err.message


def test_unknown_code_keeps_the_message() -> None:
    err = error_from_body(418, {"error": {"code": "teapot", "message": "short and stout"}})
    assert type(err) is ServerError
    assert err.message == "short and stout"


def test_missing_message_falls_back_to_the_code() -> None:
    err = error_from_body(404, {"error": {"code": "job_not_found"}})
    assert type(err) is NotFound
    assert err.message == "job_not_found"


def test_server_unreachable_round_trip() -> None:
    sent = ServerUnreachable("cannot reach")
    assert type(error_from_body(sent.http_status, sent.to_body())) is ServerUnreachable
