"""Answers of the file service (``/api/v1/pfs``): what the server returns and the SDK reads.

    controller.services.files ──FileInfo, UploadView, ...──▶ FastAPI (JSON) ──▶ client.pfs (from_wire)

Standard-library dataclasses, not pydantic models: a ``pfs`` command reads only these answers, and
importing pydantic and building models costs a command ~65 ms of its ~0.2 s start-up (bench/README.md).
FastAPI serialises them as it does models (``response_model=``); the SDK parses each answer once, at
the edge, with ``Cls.from_wire(json)``: a field missing or of the wrong type is a ``ServerError``
naming the field, never a ``KeyError``. ``to_wire()`` gives the same JSON back (``-o json``).
The request bodies the server reads are in ``api.file_requests`` (pydantic: the server validates them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, Self, TypeVar

from paddlecloud.api.errors import ServerError

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

_T = TypeVar("_T")


def _field(data: Any, name: str, kind: Callable[[Any], _T], default: Any = dataclasses.MISSING) -> _T:
    """``data[name]`` as ``kind``: the one place an answer's field is checked."""
    if not isinstance(data, dict):
        raise _bad(f"expected an object, got {type(data).__name__}")
    if name not in data:
        if default is not dataclasses.MISSING:
            return default  # type: ignore[no-any-return]
        raise _bad(f"field {name!r} is missing")
    try:
        return kind(data[name])
    except (TypeError, ValueError) as exc:
        raise _bad(f"field {name!r}: {exc}") from None


def _bad(why: str) -> ServerError:
    return ServerError(f"the server's answer is not understood ({why})")


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _int(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def _float(v: Any) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    return float(v)


def _time(v: Any) -> datetime:
    return datetime.fromisoformat(_str(v))


def _opt_int(v: Any) -> int | None:
    return None if v is None else _int(v)


class _Wire:
    """What every answer has: ``from_json(bytes)`` and ``from_wire(parsed JSON)``, the answer
    checked and typed; ``to_wire()``, the JSON the server sends."""

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        raise NotImplementedError

    @classmethod
    def from_json(cls, content: bytes) -> Self:
        try:
            data = json.loads(content)
        except ValueError:
            raise _bad("not JSON") from None
        return cls.from_wire(data)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = _jsonable({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})  # type: ignore[arg-type]
        return wire


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, _Wire):
        return v.to_wire()
    if isinstance(v, datetime):  # as pydantic writes it (and the server sends it): UTC as "Z"
        text = v.isoformat()
        return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text
    return v


@dataclasses.dataclass(frozen=True, slots=True)
class FileInfo(_Wire):
    path: str
    type: str  # "file" | "dir"
    size: int
    mtime: datetime

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            path=_field(d, "path", _str),
            type=_field(d, "type", _str),
            size=_field(d, "size", _int),
            mtime=_field(d, "mtime", _time),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class FileList(_Wire):
    items: list[FileInfo]

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(items=_field(d, "items", lambda v: [FileInfo.from_wire(x) for x in v]))


def _received(v: Any) -> dict[int, str]:
    if not isinstance(v, dict):
        raise TypeError(f"expected an object, got {type(v).__name__}")
    return {int(k): _str(x) for k, x in v.items()}


@dataclasses.dataclass(frozen=True, slots=True)
class UploadView(_Wire):
    """A resumable upload. ``received``: chunk index → BLAKE3 digest of what the server holds."""

    id: str
    path: str
    size: int
    chunk_size: int
    chunks: int
    received: dict[int, str]

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            id=_field(d, "id", _str),
            path=_field(d, "path", _str),
            size=_field(d, "size", _int),
            chunk_size=_field(d, "chunk_size", _int),
            chunks=_field(d, "chunks", _int),
            received=_field(d, "received", _received),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ChecksumView(_Wire):
    path: str
    size: int
    checksum: str

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            path=_field(d, "path", _str), size=_field(d, "size", _int), checksum=_field(d, "checksum", _str)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class StorageUsage(_Wire):
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

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            user=_field(d, "user", _str),
            used=_field(d, "used", _int),
            reserved=_field(d, "reserved", _int),
            limit=_field(d, "limit", _opt_int),
            samplesets=_field(d, "samplesets", _int, 0),
            jobs=_field(d, "jobs", _int, 0),
            pfs=_field(d, "pfs", _int, 0),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PfsHome(_Wire):
    """``GET /pfs/home``: where the caller's ``pfs:REL`` paths live, in one answer (the CLI needs it
    before its first path; ``/version`` + ``/whoami`` said the same in two)."""

    user: str
    datacenter: str
    #: ``/pfs/<datacenter>/home/<user>``
    path: str

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            user=_field(d, "user", _str),
            datacenter=_field(d, "datacenter", _str),
            path=_field(d, "path", _str),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class LocalGrant(_Wire):
    """Use it within ``expires_in`` seconds, once, on the server's Unix socket ``address`` (an
    abstract name, Linux): the file's data then moves as an open descriptor, not over HTTP."""

    grant: str
    address: str
    expires_in: float

    @classmethod
    def from_wire(cls, d: Any) -> Self:
        return cls(
            grant=_field(d, "grant", _str),
            address=_field(d, "address", _str),
            expires_in=_field(d, "expires_in", _float),
        )
