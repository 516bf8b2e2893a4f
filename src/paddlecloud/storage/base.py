"""The storage contract of the file service.

Keys are tuples of already validated path components (``("home", "alice", "data", "x")``);
the store never sees a user-supplied string it has to check for ``..``. Uploads are staged outside
the namespace and become visible only through :meth:`FileStore.upload_commit` (an atomic rename), so
nobody ever lists a partial file.

    FileService ──key──▶ FileStore.stat / list / mkdir / remove / move / read
                ──upload_begin(id) ─ upload_write(id, offset, bytes) ─ upload_mark(id, i, digest)
                ──upload_commit(id, key)   (atomic)        or  put_small(key, bytes) (atomic)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

__all__ = ["Entry", "FileStore", "Kind", "Piece", "StorageError", "StorageErrorKind", "UploadState"]

Key = tuple[str, ...]
#: a run of bytes to write: an upload's pieces arrive as bytes (the API) or as views of a reused
#: buffer (the data port)
Piece = bytes | bytearray | memoryview


class Kind(StrEnum):
    FILE = "file"
    DIR = "dir"


class StorageErrorKind(StrEnum):
    NOT_FOUND = "not_found"
    EXISTS = "exists"
    NOT_A_DIRECTORY = "not_a_directory"
    IS_A_DIRECTORY = "is_a_directory"
    NOT_EMPTY = "not_empty"
    UNSAFE = "unsafe"  # a symlink or anything else that would leave the store
    NO_SPACE = "no_space"  # the store's disk is full
    DENIED = "denied"  # the file system refused the server (a job changed a folder's permissions)
    ENGINE = "engine"  # the SampleSet cache engine (storage.juicefs) failed: the message says how


class StorageError(Exception):
    def __init__(self, kind: StorageErrorKind, key: Key, detail: str = "") -> None:
        super().__init__(detail or kind)
        self.kind = kind
        self.key = key


@dataclass(frozen=True)
class Entry:
    key: Key
    kind: Kind
    size: int
    mtime: float


@dataclass
class UploadState:
    id: str
    key: Key
    size: int
    chunk_size: int
    owner: str
    #: chunk index -> digest of the bytes received for it
    received: dict[int, str] = field(default_factory=dict)
    #: when the upload last received a chunk (or began), seconds since the epoch
    updated_at: float = 0.0

    @property
    def chunks(self) -> int:
        return (self.size + self.chunk_size - 1) // self.chunk_size


class FileStore(Protocol):
    #: True when files are plain local paths that job workers can open directly.
    local_paths: bool

    def stat(self, key: Key) -> Entry | None: ...

    def listdir(self, key: Key, recursive: bool) -> Iterator[Entry]:
        """Entries below ``key`` (a directory), depth first; raises NOT_FOUND / NOT_A_DIRECTORY."""
        ...

    def mkdir(self, key: Key, parents: bool) -> Entry: ...

    def remove(self, key: Key, recursive: bool) -> int:
        """Remove a file or (with ``recursive``) a tree; returns the bytes freed."""
        ...

    def move(self, src: Key, dst: Key) -> Entry: ...

    def read(self, key: Key, offset: int, length: int | None, block: int) -> Iterator[bytes]: ...

    def open_read(self, key: Key) -> int:
        """A read-only descriptor of the regular file ``key`` (opened without following links);
        the caller closes it. Raises NOT_FOUND / IS_A_DIRECTORY / UNSAFE."""
        ...

    def put_small(self, key: Key, data: Iterable[bytes], overwrite: bool) -> Entry:
        """Write a whole file atomically from ``data`` (staged, then renamed into place)."""
        ...

    def usage(self, key: Key) -> int:
        """Bytes of regular files under ``key``."""
        ...

    def usage_walk(self, key: Key) -> Iterator[int]:
        """:meth:`usage` as a walk that can be paused: running totals every few hundred entries,
        the last one the total (the disk watch gives each walk a time budget)."""
        ...

    def local_path(self, key: Key) -> Path | None: ...

    # -- resumable uploads ---------------------------------------------------------------------

    def upload_begin(self, state: UploadState) -> UploadState:
        """Create the staging area, or return the existing one (with what it already received)."""
        ...

    def upload_get(self, upload_id: str) -> UploadState | None: ...

    def upload_write(
        self, upload_id: str, offset: int, data: Iterable[Piece], on_piece: Callable[[Piece], object]
    ) -> int:
        """Write ``data`` at ``offset`` of the staged file (``on_piece`` sees every piece, e.g. to hash
        it); returns the number of bytes written. Pieces are written as they come, never buffered whole."""
        ...

    def upload_copy_in(self, upload_id: str, src_fd: int, offset: int, length: int) -> str:
        """Copy bytes ``offset..offset+length`` of the open file ``src_fd`` to the same place of the
        staged file without passing them through the caller; return the BLAKE3 digest of what the
        staged file then holds there."""
        ...

    def upload_mark(self, upload_id: str, index: int, digest: str) -> None: ...

    def upload_unmark(self, upload_id: str, index: int) -> None: ...

    def upload_commit(self, upload_id: str, overwrite: bool, checksum: str | None = None) -> Entry:
        """Place the staged file at its key atomically (``checksum``: recorded with it)."""
        ...

    def recorded_checksum(self, fd: int) -> str | None:
        """The checksum recorded with the open file ``fd`` while it is unchanged since, else None."""
        ...

    def record_checksum(self, fd: int, checksum: str, before: os.stat_result) -> None:
        """Record ``checksum`` with ``fd`` unless the file changed since ``before`` was taken."""
        ...

    def upload_abort(self, upload_id: str) -> None: ...

    def uploads_of(self, owner: str) -> list[UploadState]: ...
