"""Wire contract of the REST API: request/response models, error codes and version headers."""

from __future__ import annotations

from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    InvalidInput,
    NotFound,
    PackageTooLarge,
    PaddleCloudError,
    ServerError,
    ServerUnreachable,
    Unauthorized,
    VersionMismatch,
    error_from_body,
)

__all__ = [
    "API_PREFIX",
    "HEADER_API_VERSION",
    "HEADER_MIN_API_VERSION",
    "Conflict",
    "ErrorCode",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "PackageTooLarge",
    "PaddleCloudError",
    "ServerError",
    "ServerUnreachable",
    "Unauthorized",
    "VersionMismatch",
    "error_from_body",
]

API_PREFIX = "/api/v1"
#: Sent by both sides: the API version the sender speaks.
HEADER_API_VERSION = "X-PaddleCloud-API-Version"
#: Sent by the server: the oldest client API version it answers.
HEADER_MIN_API_VERSION = "X-PaddleCloud-Min-Client-API-Version"
