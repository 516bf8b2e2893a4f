"""The file service (PFS): namespace, access rules, quota and verified, resumable, atomic uploads.

    route ──path text──▶ FileService._resolve: parse (core.pfspath) → access check → storage key
                                                                   └──▶ FileStore (storage/)

Uploads of files larger than one chunk are resumable: ``begin`` returns an id that depends only on
(user, path, size, chunk size), so a restarted ``cp`` gets the same staging area back with the
digests of the chunks it already holds and sends only the others. Each chunk is hashed while it is
written and kept only if it matches the digest the client sent; ``complete`` checks the whole-file
checksum from the kept digests and renames the file into place. Quota is checked before any byte is
written: used + reserved by uploads in progress + this file <= limit, where used is the home's files
(a walk, cached ``_USAGE_TTL`` and adjusted on writes through the service; refreshed by the disk
watch while the user has running jobs, ``walk_home``) + SampleSet caches (``held_elsewhere``) + the
user's jobs' own folders as the disk watch last measured them (``held_by_jobs``,
``controller.loop.diskwatch``). The bytes received (chunks,
small files) and sent (downloads, as they are handed to the server) are counted in the platform's
metrics (``paddlecloud_pfs_received_bytes_total`` / ``..._sent_bytes_total``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import blake3

from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    NotFound,
    PaddleCloudError,
)
from paddlecloud.api.files import ChecksumView, FileInfo, PfsHome, StorageUsage, UploadView
from paddlecloud.controller.model.identity import Identity
from paddlecloud.controller.model.metrics import PlatformMetrics
from paddlecloud.core.checksum import PREFIX, ChunkedHasher, file_checksum
from paddlecloud.core.fileio import hash_read
from paddlecloud.core.pfspath import PfsPath, PfsPathError, parse_pfs_path
from paddlecloud.core.quantity import human_bytes
from paddlecloud.storage.base import (
    Entry,
    FileStore,
    Kind,
    Piece,
    StorageError,
    StorageErrorKind,
    UploadState,
)

__all__ = ["ChunkWriter", "FileService", "QuotaSource"]

#: user -> their storage limit in bytes (None: no limit)
QuotaSource = Callable[[str], int | None]
#: user -> bytes they hold outside PFS that count against the same limit (SampleSet caches, their
#: jobs' own folders)
UsageSource = Callable[[str], int]

T = TypeVar("T")
_GLOB = set("*?[")
_USAGE_TTL = 30.0
#: an upload that has received nothing for this long is discarded (its reservation freed)
STALE_UPLOAD_S = 24 * 3600.0


@dataclass
class _Usage:
    bytes: int
    at: float


class ChunkWriter:
    """Receives one chunk's bytes block by block (written at once, hashed as they pass)."""

    def __init__(
        self, store: FileStore, state: UploadState, index: int, digest: str, received: Callable[[int], None]
    ) -> None:
        self.store, self.state, self.index, self.digest = store, state, index, digest
        self._received = received
        self.offset = index * state.chunk_size
        self.expected = min(state.chunk_size, state.size - self.offset)
        self.written = 0
        self._hash = blake3.blake3()

    def write(self, pieces: Sequence[Piece]) -> None:
        if self.written + sum(map(len, pieces)) > self.expected:
            raise InvalidInput(
                f"chunk {self.index} is longer than {self.expected} bytes", code=ErrorCode.INVALID_REQUEST
            )
        at = self.offset + self.written
        n = self._do(lambda: self.store.upload_write(self.state.id, at, pieces, self._hash.update))
        self.written += n
        self._received(n)

    def finish(self) -> None:
        if self.written != self.expected:
            raise InvalidInput(
                f"chunk {self.index} has {self.written} bytes, expected {self.expected}",
                code=ErrorCode.INVALID_REQUEST,
            )
        got = self._hash.hexdigest()
        if got != self.digest:
            raise InvalidInput(
                f"chunk {self.index} arrived damaged (blake3 {got[:12]}… != {self.digest[:12]}…); "
                "send it again",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        self._do(lambda: self.store.upload_mark(self.state.id, self.index, got))

    def _do(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except StorageError as exc:  # a full disk (507) most likely
            raise _storage_error(exc, f"upload {self.state.id}") from None


def _storage_error(exc: StorageError, path: str) -> PaddleCloudError:
    k = exc.kind
    if k == StorageErrorKind.NOT_FOUND:
        return NotFound(f"{path}: no such file or directory", code=ErrorCode.PATH_NOT_FOUND)
    if k == StorageErrorKind.EXISTS:
        return Conflict(
            f"{path} already exists (use --force to overwrite a file)", code=ErrorCode.PATH_EXISTS
        )
    if k in (StorageErrorKind.NOT_A_DIRECTORY, StorageErrorKind.IS_A_DIRECTORY, StorageErrorKind.NOT_EMPTY):
        code = {
            StorageErrorKind.NOT_A_DIRECTORY: ErrorCode.NOT_A_DIRECTORY,
            StorageErrorKind.IS_A_DIRECTORY: ErrorCode.IS_A_DIRECTORY,
            StorageErrorKind.NOT_EMPTY: ErrorCode.DIRECTORY_NOT_EMPTY,
        }[k]
        what = {
            ErrorCode.NOT_A_DIRECTORY: "is not a directory",
            ErrorCode.IS_A_DIRECTORY: "is a directory (use -r)",
            ErrorCode.DIRECTORY_NOT_EMPTY: "is not empty (use -r)",
        }[code]
        return Conflict(f"{path} {what}", code=code)
    if k == StorageErrorKind.NO_SPACE:
        return InsufficientStorage(f"{path}: the file store is out of space; try again later or ask an admin")
    if k == StorageErrorKind.DENIED:
        return Conflict(
            f"{path}: the file service may not reach it (permission denied): its permissions or those "
            "of a folder on the way were changed (from a job?); make them readable and writable by "
            "their owner again (chmod u+rwX)",
            code=ErrorCode.PATH_NOT_ACCESSIBLE,
        )
    return Forbidden(
        f"{path} leads outside the file store (symbolic link); refused", code=ErrorCode.FORBIDDEN
    )


class FileService:
    def __init__(
        self,
        store: FileStore,
        datacenter: str,
        quota_of: QuotaSource,
        metrics: PlatformMetrics | None = None,
        held_elsewhere: UsageSource | None = None,
        held_by_jobs: UsageSource | None = None,
    ) -> None:
        self.store = store
        #: bytes a user holds outside PFS (their SampleSets' caches): counted in their usage
        self.held_elsewhere: UsageSource = held_elsewhere or (lambda user: 0)
        #: bytes of a user's jobs' own folders on the backend's disks, as the disk watch last
        #: measured them (``controller.loop.diskwatch``): counted in their usage
        self.held_by_jobs: UsageSource = held_by_jobs or (lambda user: 0)
        self.metrics = metrics or PlatformMetrics()
        self.datacenter = datacenter
        self.quota_of = quota_of
        self._usage: dict[str, _Usage] = {}
        self._lock = threading.Lock()

    # -- paths and access -----------------------------------------------------------------------

    def home(self, user: str) -> PfsPath:
        return PfsPath(self.datacenter, "home", user)

    def home_of(self, who: Identity) -> PfsHome:
        """The caller's home (``GET /pfs/home``: what ``pfs:REL`` expands to)."""
        return PfsHome(user=who.name, datacenter=self.datacenter, path=str(self.home(who.name)))

    def resolve(self, who: Identity, text: str, *, write: bool) -> PfsPath:
        try:
            path = parse_pfs_path(text, self.datacenter)
        except PfsPathError as exc:
            raise InvalidInput(str(exc), code=ErrorCode.INVALID_PATH, field="path") from None
        allowed = path.can_write(who.name, who.is_admin) if write else path.can_read(who.name, who.is_admin)
        if not allowed:
            area = "written by admins only" if path.area == "public" else "not yours"
            root = str(PfsPath(path.datacenter, path.area, path.owner))
            raise Forbidden(
                f"{root} is {area}; your space is /pfs/{self.datacenter}/home/{who.name} (pfs:...)",
                code=ErrorCode.FORBIDDEN,
            )
        own_home = path.area == "home" and path.owner == who.name
        if (own_home or write) and path.area == "home":
            home = PfsPath(path.datacenter, path.area, path.owner)
            if self._do(home, lambda: self.store.stat(home.key)) is None:  # homes appear on first use
                self._do(home, lambda: self.store.mkdir(home.key, parents=True))
        return path

    def parse(self, text: str) -> PfsPath:
        """A path stored by the platform itself (already checked when it was accepted)."""
        return parse_pfs_path(text, self.datacenter)

    def discard(self, text: str) -> None:
        """Remove a file the platform itself put there (no access check; missing is fine)."""
        with contextlib.suppress(StorageError, PfsPathError):
            self.store.remove(self.parse(text).key, recursive=False)

    def open_own(self, text: str) -> int:
        """A read-only descriptor of a file the platform reads for itself (a job's package at
        submit, after its access check), reached without following any link."""
        path = self.parse(text)
        return self._do(path, lambda: self.store.open_read(path.key))

    def local_path(self, path: PfsPath) -> Path | None:
        """Where a job's workers find ``path`` on this machine (local stores only)."""
        return self.store.local_path(path.key) if self.store.local_paths else None

    def _info(self, path: PfsPath, e: Entry) -> FileInfo:
        return FileInfo(
            path=str(path), type=str(e.kind), size=e.size, mtime=datetime.fromtimestamp(e.mtime, UTC)
        )

    def _do(self, path: PfsPath, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except StorageError as exc:
            raise _storage_error(exc, str(path)) from None

    # -- namespace operations -------------------------------------------------------------------

    def stat(self, who: Identity, text: str) -> FileInfo:
        path = self.resolve(who, text, write=False)
        e = self._do(path, lambda: self.store.stat(path.key))
        if e is None:
            raise _storage_error(StorageError(StorageErrorKind.NOT_FOUND, path.key), str(path))
        return self._info(path, e)

    def listdir(self, who: Identity, text: str, recursive: bool) -> list[FileInfo]:
        pattern = None
        head, _, last = text.rstrip("/").rpartition("/")
        if _GLOB & set(last):
            text, pattern = head, last
        path = self.resolve(who, text, write=False)
        top = self._do(path, lambda: self.store.stat(path.key))
        if top is not None and top.kind == Kind.FILE and pattern is None:
            return [self._info(path, top)]
        entries = self._do(path, lambda: list(self.store.listdir(path.key, recursive)))
        out = []
        for e in entries:
            if pattern is not None and not fnmatch.fnmatchcase(e.key[-1], pattern):
                continue
            out.append(self._info(path.child(*e.key[len(path.key) :]), e))
        return out

    def mkdir(self, who: Identity, text: str, parents: bool) -> FileInfo:
        path = self.resolve(who, text, write=True)
        if path.is_root:
            raise InvalidInput(f"{path} always exists", code=ErrorCode.INVALID_PATH)
        return self._info(path, self._do(path, lambda: self.store.mkdir(path.key, parents)))

    def remove(self, who: Identity, text: str, recursive: bool) -> None:
        path = self.resolve(who, text, write=True)
        if path.is_root:
            raise InvalidInput(f"refusing to remove {path} itself", code=ErrorCode.INVALID_PATH)
        self._do(path, lambda: self.store.remove(path.key, recursive))
        self._forget_usage(path)

    def remove_home(self, user: str) -> bool:
        """Delete ``user``'s home and everything in it (a user being deleted; the caller checked who
        may); False when there was none."""
        home = self.home(user)
        if self._do(home, lambda: self.store.stat(home.key)) is None:
            return False
        self._do(home, lambda: self.store.remove(home.key, recursive=True))
        self._forget_usage(home)
        return True

    def move(self, who: Identity, src_text: str, dst_text: str) -> FileInfo:
        src = self.resolve(who, src_text, write=True)
        dst = self.resolve(who, dst_text, write=True)
        if src.is_root or dst.is_root:
            raise InvalidInput("cannot move a home or public root", code=ErrorCode.INVALID_PATH)
        if src.root_parts != dst.root_parts:
            raise InvalidInput(
                "mv works within one space; use cp to copy between spaces", code=ErrorCode.INVALID_PATH
            )
        target = self._do(dst, lambda: self.store.stat(dst.key))
        if target is not None and target.kind == Kind.DIR:
            dst = dst.child(src.name)  # like mv: into an existing directory
        if dst.key[: len(src.key)] == src.key:
            raise InvalidInput(f"cannot move {src} into itself", code=ErrorCode.INVALID_PATH)
        return self._info(dst, self._do(dst, lambda: self.store.move(src.key, dst.key)))

    def read(self, who: Identity, text: str, offset: int, length: int | None) -> tuple[int, Iterator[bytes]]:
        """A download: the file's size and its bytes (counted as sent as they are taken)."""
        size, blocks = self._read(who, text, offset, length)
        return size, self._sent(blocks)

    def _sent(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        for b in blocks:
            self.metrics.pfs_sent.inc(len(b))
            yield b

    def _read(self, who: Identity, text: str, offset: int, length: int | None) -> tuple[int, Iterator[bytes]]:
        path = self.resolve(who, text, write=False)
        e = self._do(path, lambda: self.store.stat(path.key))
        if e is None:
            raise _storage_error(StorageError(StorageErrorKind.NOT_FOUND, path.key), str(path))
        return e.size, self._do(path, lambda: self.store.read(path.key, offset, length, 1 << 20))

    def checksum(self, who: Identity, text: str, chunk_size: int) -> ChecksumView:
        """The file's ``blake3c`` checksum: the one recorded with it when it is still current (at the
        upload's commit, or by an earlier call), else each chunk hashed through ``pread``: jobs may
        truncate their owner's files meanwhile, and a mapping of a shrinking file would kill the
        server (SIGBUS)."""
        path = self.resolve(who, text, write=False)
        fd = self._do(path, lambda: self.store.open_read(path.key))
        try:
            before = os.fstat(fd)
            size = before.st_size
            recorded = self.store.recorded_checksum(fd)
            if recorded is not None and recorded.startswith(f"{PREFIX}:{chunk_size}:"):
                return ChecksumView(path=text, size=size, checksum=recorded)
            try:
                digests = [hash_read(fd, o, min(chunk_size, size - o)) for o in range(0, size, chunk_size)]
            except ValueError:  # shrunk while it was read (a job rewriting it)
                raise InvalidInput(
                    f"{path} changed while it was read; copy it again", code=ErrorCode.INVALID_REQUEST
                ) from None
            checksum = file_checksum(chunk_size, digests)
            self.store.record_checksum(fd, checksum, before)
        finally:
            os.close(fd)
        return ChecksumView(path=text, size=size, checksum=checksum)

    # -- writes ---------------------------------------------------------------------------------

    def put_small(self, who: Identity, text: str, data: bytes, checksum: str, overwrite: bool) -> FileInfo:
        path = self.resolve(who, text, write=True)
        h = ChunkedHasher(max(len(data), 1))
        h.update(data)
        if checksum != h.checksum():
            raise InvalidInput(
                f"{path} arrived damaged (checksum mismatch); send it again", code=ErrorCode.CHECKSUM_MISMATCH
            )
        self._reserve(who, path, len(data), exclude_upload=None)
        e = self._do(path, lambda: self.store.put_small(path.key, [data], overwrite))
        self.metrics.pfs_received.inc(len(data))
        self._account(path, len(data), overwrite)
        return self._info(path, e)

    def begin_upload(
        self, who: Identity, text: str, size: int, chunk_size: int, overwrite: bool
    ) -> UploadView:
        path = self.resolve(who, text, write=True)
        existing = self._do(path, lambda: self.store.stat(path.key))
        if existing is not None and (existing.kind == Kind.DIR or not overwrite):
            raise _storage_error(
                StorageError(
                    StorageErrorKind.EXISTS
                    if existing.kind == Kind.FILE
                    else StorageErrorKind.IS_A_DIRECTORY,
                    path.key,
                ),
                str(path),
            )
        if not path.is_root:  # fail before any byte is sent, not at the end
            parent = path.parent()
            p = self._do(parent, lambda: self.store.stat(parent.key))
            if p is None or p.kind != Kind.DIR:
                kind = StorageErrorKind.NOT_FOUND if p is None else StorageErrorKind.NOT_A_DIRECTORY
                raise _storage_error(StorageError(kind, parent.key), str(parent))
        upload_id = hashlib.sha256(f"{who.name}\0{path}\0{size}\0{chunk_size}".encode()).hexdigest()[:32]
        if self.store.upload_get(upload_id) is None:
            replaced = existing.size if existing is not None else 0
            self._reserve(who, path, size - replaced, exclude_upload=upload_id)
        # the reservation belongs to the space it fills (an admin writing into alice's home uses hers)
        owner = path.owner if path.area == "home" and path.owner else who.name
        state = self._do(path, lambda: self.store.upload_begin(
            UploadState(id=upload_id, key=path.key, size=size, chunk_size=chunk_size, owner=owner)
        ))  # fmt: skip
        return self._upload_view(path, state)

    def _upload_view(self, path: PfsPath, s: UploadState) -> UploadView:
        return UploadView(
            id=s.id,
            path=str(path),
            size=s.size,
            chunk_size=s.chunk_size,
            chunks=s.chunks,
            received=dict(s.received),
        )

    def _upload(self, who: Identity, upload_id: str) -> UploadState:
        state = self.store.upload_get(upload_id) if upload_id.isalnum() else None
        if state is None or (state.owner != who.name and not who.is_admin):
            raise NotFound(
                f"upload {upload_id} not found (it may have completed or been aborted)",
                code=ErrorCode.UPLOAD_NOT_FOUND,
            )
        return state

    def upload_state(self, who: Identity, upload_id: str) -> UploadState:
        """``who``'s upload ``upload_id`` (an admin: anyone's), else ``upload_not_found``."""
        return self._upload(who, upload_id)

    def copy_chunk_in(self, state: UploadState, index: int, src_fd: int, offset: int, length: int) -> str:
        """Chunk ``index`` of ``state`` copied from the open file ``src_fd`` (same-host fast path):
        hashed as it lies in the staging file, marked with that digest; returns the digest."""
        if index in state.received:  # a re-send: until it is held again, the chunk counts as missing
            self.store.upload_unmark(state.id, index)
        where = f"upload {state.id}"
        try:
            digest = self.store.upload_copy_in(state.id, src_fd, offset, length)
            self.store.upload_mark(state.id, index, digest)
        except StorageError as exc:
            raise _storage_error(exc, where) from None
        except ValueError:  # the source shrank under us
            raise InvalidInput(
                f"chunk {index}: the file being uploaded got shorter; copy it again",
                code=ErrorCode.INVALID_REQUEST,
            ) from None
        self.metrics.pfs_received.inc(length)
        return digest

    def open_read(self, who: Identity, text: str, *, count: bool = True) -> tuple[int, int]:
        """A read-only descriptor of the file ``text`` (checked as a download is) and its size
        (``count``: the whole file counted as sent)."""
        path = self.resolve(who, text, write=False)
        fd = self._do(path, lambda: self.store.open_read(path.key))
        size = os.fstat(fd).st_size
        if count:
            self.metrics.pfs_sent.inc(size)
        return fd, size

    def open_range(
        self, who: Identity, text: str, offset: int, length: int | None
    ) -> tuple[int, int, int, int]:
        """A download's range as the data port sends it: a read-only descriptor of the file ``text``
        (checked as a download is), where the range starts, how many bytes it holds (clamped to
        the file's end, as ``read`` is) and the file's size; counted as sent."""
        fd, size = self.open_read(who, text, count=False)
        start = min(offset, size)
        count = size - start if length is None else min(length, size - start)
        self.metrics.pfs_sent.inc(count)
        return fd, start, count, size

    def chunk_writer(self, who: Identity, upload_id: str, index: int, digest: str) -> ChunkWriter:
        state = self._upload(who, upload_id)
        if not 0 <= index < state.chunks:
            raise InvalidInput(
                f"chunk index {index} outside 0..{state.chunks - 1}", code=ErrorCode.INVALID_REQUEST
            )
        if len(digest) != 64:
            raise InvalidInput("missing or malformed chunk digest header", code=ErrorCode.INVALID_REQUEST)
        if index in state.received:  # a re-send: until it verifies, the chunk counts as missing again
            self.store.upload_unmark(upload_id, index)
        return ChunkWriter(self.store, state, index, digest, self.metrics.pfs_received.inc)

    def complete_upload(self, who: Identity, upload_id: str, checksum: str, overwrite: bool) -> FileInfo:
        state = self._upload(who, upload_id)
        missing = [i for i in range(state.chunks) if i not in state.received]
        if missing:
            raise InvalidInput(
                f"upload incomplete: {len(missing)} of {state.chunks} chunks missing (first: {missing[0]})",
                code=ErrorCode.INVALID_REQUEST,
            )
        expected = file_checksum(state.chunk_size, (state.received[i] for i in range(state.chunks)))
        path = self.resolve(who, str(PfsPath.from_key(self.datacenter, state.key)), write=True)
        if checksum != expected:
            self.store.upload_abort(upload_id)
            raise InvalidInput(
                f"{path}: whole-file checksum mismatch; the upload was discarded, copy it again",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        e = self._do(path, lambda: self.store.upload_commit(upload_id, overwrite, expected))
        self._account(path, state.size, overwrite)
        return self._info(path, e)

    def abort_upload(self, who: Identity, upload_id: str) -> None:
        self.store.upload_abort(self._upload(who, upload_id).id)

    # -- quota ----------------------------------------------------------------------------------

    def _live_uploads(self, owner: str) -> list[UploadState]:
        """``owner``'s uploads in progress; abandoned ones (idle > STALE_UPLOAD_S) are discarded."""
        live = []
        for u in self.store.uploads_of(owner):
            if time.time() - u.updated_at > STALE_UPLOAD_S:
                self.store.upload_abort(u.id)
            else:
                live.append(u)
        return live

    def usage(self, who: Identity) -> StorageUsage:
        cached, jobs, pfs = self.held_elsewhere(who.name), self.held_by_jobs(who.name), self._used(who.name)
        reserved = sum(u.size for u in self._live_uploads(who.name))
        return StorageUsage(
            user=who.name, used=pfs + cached + jobs, reserved=reserved, limit=self.quota_of(who.name),
            samplesets=cached, jobs=jobs, pfs=pfs,
        )  # fmt: skip

    def walk_home(self, user: str) -> Iterator[int]:
        """The bytes of ``user``'s home as a walk that can be paused (running totals, the last the
        total, then also what :meth:`usage` answers for the next ``_USAGE_TTL`` seconds): the disk
        watch's measure. Raises ``PaddleCloudError`` (``path_not_accessible``) as a request would."""
        home = self.home(user)
        total = 0
        try:
            for total in self.store.usage_walk(home.key):
                yield total
        except StorageError as exc:
            raise _storage_error(exc, str(home)) from None
        with self._lock:
            self._usage[user] = _Usage(total, time.monotonic())

    def _used(self, user: str) -> int:
        with self._lock:
            u = self._usage.get(user)
            if u is not None and time.monotonic() - u.at < _USAGE_TTL:
                return u.bytes
        n = self.bytes_below(self.home(user))
        with self._lock:
            self._usage[user] = _Usage(n, time.monotonic())
        return n

    def bytes_below(self, path: PfsPath) -> int:
        """The bytes of the files below ``path`` (0 if missing); a folder below it that the server
        may not enter (a job made it unreadable) is ``path_not_accessible``, never skipped (no bytes
        hidden from a quota)."""
        try:
            return self.store.usage(path.key)
        except StorageError as exc:
            raise _storage_error(exc, str(path)) from None

    def _add_usage(self, path: PfsPath, n: int) -> None:
        if path.area == "home" and path.owner:
            with self._lock:
                if path.owner in self._usage:
                    self._usage[path.owner].bytes += n

    def _account(self, path: PfsPath, added: int, overwrite: bool) -> None:
        if overwrite:  # the replaced file's size is unknown here: recount on next use
            self._forget_usage(path)
        else:
            self._add_usage(path, added)

    def _forget_usage(self, path: PfsPath) -> None:
        if path.owner:
            with self._lock:
                self._usage.pop(path.owner, None)

    def _reserve(self, who: Identity, path: PfsPath, size: int, exclude_upload: str | None) -> None:
        if path.area == "home" and path.owner is not None:
            self.check_room(path.owner, size, exclude_upload=exclude_upload)

    def check_room(self, owner: str, size: int, *, exclude_upload: str | None = None) -> None:
        """``quota_exceeded`` unless ``owner`` has ``size`` more bytes left under their storage
        limit: PFS files + SampleSet caches + uploads in progress (but ``exclude_upload``)."""
        limit = self.quota_of(owner)
        if limit is None:
            return
        cached, jobs = self.held_elsewhere(owner), self.held_by_jobs(owner)
        used = self._used(owner) + cached + jobs
        reserved = sum(u.size for u in self._live_uploads(owner) if u.id != exclude_upload)
        if used + reserved + size > limit:
            in_caches = f", SampleSet caches {human_bytes(cached)}" if cached else ""
            in_jobs = f", jobs' folders {human_bytes(jobs)}" if jobs else ""
            raise Forbidden(
                f"storage quota exceeded: {human_bytes(size)} more would make "
                f"{human_bytes(used + reserved + size)} of {human_bytes(limit)} "
                f"(used {human_bytes(used)}{in_caches}{in_jobs}, in uploads {human_bytes(reserved)}); "
                "remove files with `paddlecloud pfs rm`"
                + (" or clear caches with `paddlecloud sampleset clear NAME`" if cached else "")
                + (", delete finished jobs (their logs) with `paddlecloud kill JOB --rm`" if jobs else ""),
                code=ErrorCode.QUOTA_EXCEEDED,
            )
