"""The local-directory file store (the embedded default).

Layout under ``root``::

    files/home/<user>/...      the namespace (what users see)
    files/public/...
    uploads/<id>/meta.json     staged uploads: metadata, the data file (sparse, full size), and
    uploads/<id>/data          one ``marks/<index>`` file per verified chunk
    uploads/tmp-*              whole small files being written

Every operation maps the key to a path and refuses it if any existing component is a symlink, so a
link planted inside the store (by a job, say) cannot lead outside it. Files are opened with
``O_NOFOLLOW``; trees are walked without following links and removed with ``shutil.rmtree`` (which
does not follow them either).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat as st
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from paddlecloud.core.fileio import copy_range, hash_range, start_writeback
from paddlecloud.storage.base import Entry, Key, Kind, StorageError, StorageErrorKind, UploadState

__all__ = ["LocalDirStore"]

E = StorageErrorKind
#: the extended attribute that holds a file's recorded checksum (``recorded_checksum``)
_XATTR = "user.paddlecloud.checksum"


@contextlib.contextmanager
def _no_space(key: Key, what: str) -> Iterator[None]:
    """The file system's "disk full" (ENOSPC, EDQUOT) as NO_SPACE, whichever call ran into it."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise StorageError(E.NO_SPACE, key, f"the file store has no room for {what}") from None


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _through_link(key: Key) -> StorageError:
    return StorageError(E.UNSAFE, key, f"{'/'.join(key)} goes through a symbolic link")


class LocalDirStore:
    local_paths = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.uploads = root / "uploads"
        for d in (self.files / "home", self.files / "public", self.uploads):
            d.mkdir(parents=True, exist_ok=True)

    # -- paths ----------------------------------------------------------------------------------

    def _path(self, key: Key) -> Path:
        """The path of ``key``; raises UNSAFE if an existing component of it is a symlink."""
        p = self.files
        for part in key:
            p = p / part
            try:
                if st.S_ISLNK(os.lstat(p).st_mode):
                    raise _through_link(key)
            except (FileNotFoundError, NotADirectoryError):
                # nothing below a missing component (or a regular file) exists: no link further down
                return self.files.joinpath(*key)
        return p

    def _entry(self, key: Key, s: os.stat_result) -> Entry:
        kind = Kind.DIR if st.S_ISDIR(s.st_mode) else Kind.FILE
        return Entry(key=key, kind=kind, size=s.st_size if kind == Kind.FILE else 0, mtime=s.st_mtime)

    def local_path(self, key: Key) -> Path | None:
        return self._path(key)

    # -- namespace ------------------------------------------------------------------------------

    def stat(self, key: Key) -> Entry | None:
        try:
            s = os.lstat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not (st.S_ISREG(s.st_mode) or st.S_ISDIR(s.st_mode)):
            raise StorageError(E.UNSAFE, key, f"{'/'.join(key)} is not a regular file or directory")
        return self._entry(key, s)

    def _require_dir(self, key: Key) -> Path:
        e = self.stat(key)
        if e is None:
            raise StorageError(E.NOT_FOUND, key)
        if e.kind != Kind.DIR:
            raise StorageError(E.NOT_A_DIRECTORY, key)
        return self._path(key)

    def listdir(self, key: Key, recursive: bool) -> Iterator[Entry]:
        base = self._require_dir(key)

        def walk(path: Path, prefix: Key) -> Iterator[Entry]:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda d: d.name)
            for d in entries:
                if d.is_symlink():
                    continue  # never ours: planted links are not shown and not followed
                s = d.stat(follow_symlinks=False)
                if not (st.S_ISREG(s.st_mode) or st.S_ISDIR(s.st_mode)):
                    continue
                entry = self._entry((*prefix, d.name), s)
                yield entry
                if recursive and entry.kind == Kind.DIR:
                    yield from walk(Path(d.path), entry.key)

        return walk(base, key)

    def mkdir(self, key: Key, parents: bool) -> Entry:
        existing = self.stat(key)
        if existing is not None:
            if existing.kind == Kind.DIR and parents:
                return existing
            raise StorageError(E.EXISTS, key)
        if not parents:
            self._require_dir(key[:-1])
        p = self.files
        for i, part in enumerate(key):  # one pass: each component made, or checked where it exists
            p = p / part
            try:
                os.mkdir(p)
            except FileExistsError:
                mode = os.lstat(p).st_mode
                if st.S_ISLNK(mode):
                    raise _through_link(key) from None
                if not st.S_ISDIR(mode):
                    raise StorageError(E.NOT_A_DIRECTORY, key[: i + 1]) from None
        made = self.stat(key)
        assert made is not None
        return made

    def remove(self, key: Key, recursive: bool) -> int:
        e = self.stat(key)
        if e is None:
            raise StorageError(E.NOT_FOUND, key)
        path = self._path(key)
        if e.kind == Kind.FILE:
            os.unlink(path)
            return e.size
        if not recursive:
            raise StorageError(E.IS_A_DIRECTORY, key)
        freed = self.usage(key)
        shutil.rmtree(path)
        return freed

    def move(self, src: Key, dst: Key) -> Entry:
        if self.stat(src) is None:
            raise StorageError(E.NOT_FOUND, src)
        if self.stat(dst) is not None:
            raise StorageError(E.EXISTS, dst)
        self._require_dir(dst[:-1])
        os.rename(self._path(src), self._path(dst))
        moved = self.stat(dst)
        assert moved is not None
        return moved

    def read(self, key: Key, offset: int, length: int | None, block: int) -> Iterator[bytes]:
        e = self.stat(key)
        if e is None:
            raise StorageError(E.NOT_FOUND, key)
        if e.kind != Kind.FILE:
            raise StorageError(E.IS_A_DIRECTORY, key)
        fd = self._open_file(key)
        end = e.size if length is None else min(e.size, offset + length)

        def gen() -> Iterator[bytes]:
            try:
                pos = offset
                while pos < end:
                    data = os.pread(fd, min(block, end - pos), pos)
                    if not data:
                        return
                    pos += len(data)
                    yield data
            finally:
                os.close(fd)

        return gen()

    def _open_file(self, key: Key) -> int:
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise StorageError(E.NOT_FOUND, key) from None
        except OSError as exc:  # ELOOP: a link planted since the check
            if exc.errno == errno.ELOOP:
                raise _through_link(key) from None
            raise
        if not st.S_ISREG(os.fstat(fd).st_mode):  # swapped for a fifo or a device since the check
            os.close(fd)
            raise StorageError(E.UNSAFE, key, f"{'/'.join(key)} is not a regular file")
        os.set_blocking(fd, True)
        return fd

    def open_read(self, key: Key) -> int:
        e = self.stat(key)
        if e is None:
            raise StorageError(E.NOT_FOUND, key)
        if e.kind != Kind.FILE:
            raise StorageError(E.IS_A_DIRECTORY, key)
        return self._open_file(key)

    def usage(self, key: Key) -> int:
        total = 0
        try:
            for e in self.listdir(key, recursive=True):
                total += e.size
        except StorageError:
            return 0
        return total

    def _place(self, tmp: Path, key: Key, overwrite: bool) -> Entry:
        """Move a finished (already fsynced) staged file into the namespace atomically, then fsync the
        directory so that the new name survives a power loss once the caller is told it is there."""
        self._require_dir(key[:-1])
        dest = self._path(key)
        existing = self.stat(key)
        if existing is not None and existing.kind == Kind.DIR:
            raise StorageError(E.IS_A_DIRECTORY, key)
        if overwrite:
            os.replace(tmp, dest)
        else:
            try:
                os.link(tmp, dest)  # atomic and never clobbers
            except FileExistsError:
                raise StorageError(E.EXISTS, key) from None
            os.unlink(tmp)
        _fsync_dir(dest.parent)
        placed = self.stat(key)
        assert placed is not None
        return placed

    def put_small(self, key: Key, data: Iterable[bytes], overwrite: bool) -> Entry:
        tmp = self.uploads / f"tmp-{uuid.uuid4().hex}"
        try:
            with _no_space(key, "this file"), open(tmp, "wb") as f:
                for piece in data:
                    f.write(piece)
                f.flush()
                os.fsync(f.fileno())
            return self._place(tmp, key, overwrite)
        finally:
            tmp.unlink(missing_ok=True)

    # -- staged uploads -------------------------------------------------------------------------

    def _staging(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise StorageError(E.NOT_FOUND, (), "bad upload id")
        return self.uploads / upload_id

    def upload_begin(self, state: UploadState) -> UploadState:
        existing = self.upload_get(state.id)
        if existing is not None:
            return existing
        d = self._staging(state.id)
        meta = {
            "key": list(state.key),
            "size": state.size,
            "chunk_size": state.chunk_size,
            "owner": state.owner,
        }
        try:
            with _no_space(state.key, f"{state.size} bytes"):
                (d / "marks").mkdir(parents=True, exist_ok=True)
                with open(d / "data", "wb") as f:
                    try:  # reserve the blocks at once: chunk writes then skip the file system's allocator
                        os.posix_fallocate(f.fileno(), 0, state.size)
                    except OSError as exc:
                        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                            raise
                        f.truncate(state.size)  # no fallocate here (some network file systems): sparse
                (d / "meta.json").write_text(json.dumps(meta))
        except BaseException:  # ENOSPC and friends: give every block back (a staging area without
            shutil.rmtree(d, ignore_errors=True)  # its meta.json would never be found again)
            raise
        return state

    def upload_get(self, upload_id: str) -> UploadState | None:
        d = self._staging(upload_id)
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, ValueError):
            return None
        received = {}
        for m in (d / "marks").iterdir():
            if m.name.isdigit():
                received[int(m.name)] = m.read_text().strip()
        updated = max(os.stat(d / "meta.json").st_mtime, os.stat(d / "marks").st_mtime)
        return UploadState(
            id=upload_id,
            key=tuple(meta["key"]),
            size=int(meta["size"]),
            chunk_size=int(meta["chunk_size"]),
            owner=str(meta["owner"]),
            received=received,
            updated_at=updated,
        )

    def upload_write(
        self, upload_id: str, offset: int, data: Iterable[bytes], on_piece: Callable[[bytes], object]
    ) -> int:
        fd = os.open(self._staging(upload_id) / "data", os.O_WRONLY | os.O_NOFOLLOW)
        pieces = list(data)
        for piece in pieces:
            on_piece(piece)
        total = sum(map(len, pieces))
        written = 0
        try:  # a sparse data file (no fallocate on this file system) can still run out of space
            with _no_space((), "this chunk"):
                while written < total:  # one pwritev for all pieces; loop only on a short write
                    skip, rest = written, []
                    for p in pieces:
                        if skip >= len(p):
                            skip -= len(p)
                            continue
                        rest.append(memoryview(p)[skip:])
                        skip = 0
                    written += os.pwritev(fd, rest, offset + written)
        finally:
            os.close(fd)
        return written

    def upload_copy_in(self, upload_id: str, src_fd: int, offset: int, length: int) -> str:
        """Copy ``length`` bytes at ``offset`` of ``src_fd`` into the staged file in the kernel
        (``copy_file_range``: no pass through user space), then hash what the staged file now holds
        (mapped, not copied) and start its writeback so that the commit's fsync is short."""
        fd = os.open(self._staging(upload_id) / "data", os.O_RDWR | os.O_NOFOLLOW)
        try:
            with _no_space((), "this chunk"):
                copy_range(src_fd, fd, offset, length)
            digest = hash_range(fd, offset, length)
            start_writeback(fd, offset, length)
            return digest
        finally:
            os.close(fd)

    def upload_mark(self, upload_id: str, index: int, digest: str) -> None:
        mark = self._staging(upload_id) / "marks" / str(index)
        tmp = mark.with_suffix(".tmp")
        with _no_space((), "the chunk's mark"):
            tmp.write_text(digest)
        os.replace(tmp, mark)

    def upload_unmark(self, upload_id: str, index: int) -> None:
        (self._staging(upload_id) / "marks" / str(index)).unlink(missing_ok=True)

    def upload_commit(self, upload_id: str, overwrite: bool, checksum: str | None = None) -> Entry:
        state = self.upload_get(upload_id)
        if state is None:
            raise StorageError(E.NOT_FOUND, (), "no such upload")
        d = self._staging(upload_id)
        fd = os.open(d / "data", os.O_RDONLY)
        try:
            if checksum is not None:
                self.record_checksum(fd, checksum, os.fstat(fd))
            os.fsync(fd)
        finally:
            os.close(fd)
        entry = self._place(d / "data", state.key, overwrite)
        shutil.rmtree(d, ignore_errors=True)
        return entry

    # -- recorded checksums --------------------------------------------------------------------

    def recorded_checksum(self, fd: int) -> str | None:
        """The checksum recorded with the open file ``fd`` (an extended attribute, written at the
        upload's commit or after a full hash), if it still describes the file: same size and
        modification time (in ns) as when it was recorded; else None."""
        try:
            rec = json.loads(os.getxattr(fd, _XATTR))
            s = os.fstat(fd)
            if rec["size"] == s.st_size and rec["mtime_ns"] == s.st_mtime_ns:
                return str(rec["checksum"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def record_checksum(self, fd: int, checksum: str, before: os.stat_result) -> None:
        """Record ``checksum`` with the open file ``fd`` if it has not changed since ``before`` (its
        ``fstat`` when the hashing began); quietly nothing where extended attributes are missing."""
        s = os.fstat(fd)
        if (s.st_size, s.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            return
        rec = {"checksum": checksum, "size": s.st_size, "mtime_ns": s.st_mtime_ns}
        with contextlib.suppress(OSError):
            os.setxattr(fd, _XATTR, json.dumps(rec).encode())

    def upload_abort(self, upload_id: str) -> None:
        shutil.rmtree(self._staging(upload_id), ignore_errors=True)

    def uploads_of(self, owner: str) -> list[UploadState]:
        out = []
        for d in self.uploads.iterdir():
            if d.is_dir() and d.name.isalnum():
                s = self.upload_get(d.name)
                if s is not None and s.owner == owner:
                    out.append(s)
        return out
