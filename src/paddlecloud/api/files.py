"""Answers of the file service (``/api/v1/pfs``): what the server returns and the SDK reads.

    controller.files ──FileInfo, UploadView, ...──▶ FastAPI (JSON) ──▶ client.pfs (model_validate_json)

The request bodies the server reads are in ``api.file_requests``: a client process (``pfs cp``) never
builds their schemas (a body model is built when its class is made; the views here are deferred to
their first use).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

__all__ = [
    "HEADER_DATA_PORT",
    "ChecksumView",
    "FileInfo",
    "FileList",
    "LocalGrant",
    "PfsHome",
    "StorageUsage",
    "UploadView",
]

#: the answer header of ``GET /pfs/home`` that names the server's PFS data port (``server.pfs_data``),
#: where clients send and fetch file chunks off the API's event loop; absent: the API serves them
HEADER_DATA_PORT = "X-PaddleCloud-Data-Port"


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")


class FileInfo(_Model):
    path: str
    type: str  # "file" | "dir"
    size: int
    mtime: datetime


class FileList(_Model):
    items: list[FileInfo]


class UploadView(_Model):
    """A resumable upload. ``received``: chunk index → BLAKE3 digest of what the server holds."""

    id: str
    path: str
    size: int
    chunk_size: int
    chunks: int
    received: dict[int, str]


class ChecksumView(_Model):
    path: str
    size: int
    checksum: str


class StorageUsage(_Model):
    user: str
    used: int
    reserved: int  # bytes promised to uploads in progress
    limit: int | None
    #: bytes of the user's SampleSet caches (included in ``used``)
    samplesets: int = 0
    #: bytes of the user's jobs' own folders on the backend's disks, as last measured (included in
    #: ``used``): the workers' copies of the package and their /tmp while a job runs, its logs until
    #: it is deleted (docs/pfs.md "What counts")
    jobs: int = 0
    #: bytes of the files in the user's PFS home (included in ``used``: used = pfs + samplesets + jobs)
    pfs: int = 0


class PfsHome(_Model):
    """``GET /pfs/home``: where the caller's ``pfs:REL`` paths live, in one answer (the CLI needs it
    before its first path; ``/version`` + ``/whoami`` said the same in two)."""

    user: str
    datacenter: str
    #: ``/pfs/<datacenter>/home/<user>``
    path: str


class LocalGrant(_Model):
    """Use it within ``expires_in`` seconds, once, on the server's Unix socket ``address`` (an
    abstract name, Linux): the file's data then moves as an open descriptor, not over HTTP."""

    grant: str
    address: str
    expires_in: float
