"""Wire models of the file service (``/api/v1/pfs``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChecksumView",
    "FileInfo",
    "FileList",
    "MkdirRequest",
    "MoveRequest",
    "QuotaUpdate",
    "RemoveRequest",
    "StorageUsage",
    "UploadBegin",
    "UploadComplete",
    "UploadView",
]

MIN_CHUNK = 1 << 20
MAX_CHUNK = 64 << 20


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")


class FileInfo(_Model):
    path: str
    type: str  # "file" | "dir"
    size: int
    mtime: datetime


class FileList(_Model):
    items: list[FileInfo]


class MkdirRequest(_Model):
    path: str
    parents: bool = False


class RemoveRequest(_Model):
    path: str
    recursive: bool = False


class MoveRequest(_Model):
    src: str
    dst: str


class UploadBegin(_Model):
    path: str
    size: int = Field(ge=1, le=1 << 44)
    chunk_size: int = Field(8 << 20, ge=MIN_CHUNK, le=MAX_CHUNK)
    overwrite: bool = False


class UploadView(_Model):
    """A resumable upload. ``received``: chunk index → BLAKE3 digest of what the server holds."""

    id: str
    path: str
    size: int
    chunk_size: int
    chunks: int
    received: dict[int, str]


class UploadComplete(_Model):
    checksum: str  # blake3c:<chunk size>:<hex> (paddlecloud.core.checksum)


class ChecksumView(_Model):
    path: str
    size: int
    checksum: str


class QuotaUpdate(_Model):
    """Only the fields present change. ``storage``: a quantity (``500Gi``) or None for the platform
    default; ``cpu`` / ``memory`` (quantities) and ``gpu`` (a count): None removes that limit."""

    storage: str | None = None
    cpu: str | None = None
    memory: str | None = None
    gpu: int | None = Field(None, ge=0)


class StorageUsage(_Model):
    user: str
    used: int
    reserved: int  # bytes promised to uploads in progress
    limit: int | None
