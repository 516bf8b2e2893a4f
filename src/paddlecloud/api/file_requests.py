"""Request bodies of the file service (``/api/v1/pfs``) and the admin quota update, as the server
reads them (``api.body``: unknown fields refused, built at import).

    client JSON ──▶ FastAPI ──▶ MkdirRequest / UploadBegin / ... ──▶ controller.services.files

Requests are strict: booleans and numbers are never taken from strings. Paths are checked (length,
NUL and control characters, ``..``) by ``core.pfspath``, which answers ``invalid_path``. The answers
are in ``api.files``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from paddlecloud.api.body import Body

__all__ = [
    "MAX_CHUNK",
    "MIN_CHUNK",
    "LocalGrantRequest",
    "MkdirRequest",
    "MoveRequest",
    "QuotaUpdate",
    "RemoveRequest",
    "UploadBegin",
    "UploadComplete",
]

MIN_CHUNK = 1 << 20
MAX_CHUNK = 64 << 20

#: a PFS path in a request (checked by ``core.pfspath``: length, NUL, control characters, ``..``)
RequestPath = str
#: a boolean of a request: ``true`` / ``false`` only
Flag = Annotated[bool, Field(strict=True)]


class MkdirRequest(Body):
    path: RequestPath
    parents: Flag = False


class RemoveRequest(Body):
    path: RequestPath
    recursive: Flag = False


class MoveRequest(Body):
    src: RequestPath
    dst: RequestPath


class UploadBegin(Body):
    path: RequestPath
    size: int = Field(ge=1, le=1 << 44, strict=True)
    chunk_size: int = Field(8 << 20, ge=MIN_CHUNK, le=MAX_CHUNK, strict=True)
    overwrite: Flag = False


class UploadComplete(Body):
    checksum: str = Field(max_length=256)  # blake3c:<chunk size>:<hex> (paddlecloud.core.checksum)


class QuotaUpdate(Body):
    """Only the fields present change. ``storage``: a quantity (``500Gi``) or None for the platform
    default; ``cpu`` / ``memory`` (quantities) and ``gpu`` (a count): None removes that limit."""

    storage: str | None = Field(None, max_length=32)
    cpu: str | None = Field(None, max_length=32)
    memory: str | None = Field(None, max_length=32)
    gpu: int | None = Field(None, ge=0, le=1 << 20, strict=True)


class LocalGrantRequest(Body):
    """A one-time grant for the same-host fast path: to fill the chunks of the caller's upload
    ``upload_id``, or to read the file ``path`` (exactly one of them)."""

    upload_id: str | None = Field(None, max_length=64)
    path: RequestPath | None = Field(None, max_length=8192)
