"""Wire models of the file service (``/api/v1/pfs``).

Requests are strict: booleans and numbers are never taken from strings. Paths are checked (length,
NUL and control characters, ``..``) by ``core.pfspath``, which answers ``invalid_path``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from paddlecloud.api.body import Body

__all__ = [
    "ChecksumView",
    "FileInfo",
    "FileList",
    "LocalGrant",
    "LocalGrantRequest",
    "MkdirRequest",
    "MoveRequest",
    "PfsHome",
    "QuotaUpdate",
    "RemoveRequest",
    "StorageUsage",
    "UploadBegin",
    "UploadComplete",
    "UploadView",
]

MIN_CHUNK = 1 << 20
MAX_CHUNK = 64 << 20

#: a PFS path in a request (checked by ``core.pfspath``: length, NUL, control characters, ``..``)
RequestPath = str
#: a boolean of a request: ``true`` / ``false`` only
Flag = Annotated[bool, Field(strict=True)]


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")


class FileInfo(_Model):
    path: str
    type: str  # "file" | "dir"
    size: int
    mtime: datetime


class FileList(_Model):
    items: list[FileInfo]


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


class UploadView(_Model):
    """A resumable upload. ``received``: chunk index → BLAKE3 digest of what the server holds."""

    id: str
    path: str
    size: int
    chunk_size: int
    chunks: int
    received: dict[int, str]


class UploadComplete(Body):
    checksum: str = Field(max_length=256)  # blake3c:<chunk size>:<hex> (paddlecloud.core.checksum)


class ChecksumView(_Model):
    path: str
    size: int
    checksum: str


class QuotaUpdate(Body):
    """Only the fields present change. ``storage``: a quantity (``500Gi``) or None for the platform
    default; ``cpu`` / ``memory`` (quantities) and ``gpu`` (a count): None removes that limit."""

    storage: str | None = Field(None, max_length=32)
    cpu: str | None = Field(None, max_length=32)
    memory: str | None = Field(None, max_length=32)
    gpu: int | None = Field(None, ge=0, le=1 << 20, strict=True)


class StorageUsage(_Model):
    user: str
    used: int
    reserved: int  # bytes promised to uploads in progress
    limit: int | None
    #: bytes of the user's SampleSet caches (included in ``used``)
    samplesets: int = 0


class PfsHome(_Model):
    """``GET /pfs/home``: where the caller's ``pfs:REL`` paths live, in one answer (the CLI needs it
    before its first path; ``/version`` + ``/whoami`` said the same in two)."""

    user: str
    datacenter: str
    #: ``/pfs/<datacenter>/home/<user>``
    path: str


class LocalGrantRequest(Body):
    """A one-time grant for the same-host fast path: to fill the chunks of the caller's upload
    ``upload_id``, or to read the file ``path`` (exactly one of them)."""

    upload_id: str | None = Field(None, max_length=64)
    path: RequestPath | None = Field(None, max_length=8192)


class LocalGrant(_Model):
    """Use it within ``expires_in`` seconds, once, on the server's Unix socket ``address`` (an
    abstract name, Linux): the file's data then moves as an open descriptor, not over HTTP."""

    grant: str
    address: str
    expires_in: float
