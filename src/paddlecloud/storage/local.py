"""The local-directory file store (the embedded default).

Layout under ``root``::

    files/home/<user>/...      the namespace (what users see)
    files/public/...
    uploads/<id>/meta.json     staged uploads: metadata, the data file (sparse, full size), and
    uploads/<id>/data          one ``marks/<index>`` file per verified chunk
    uploads/tmp-*              whole small files being written

A job can write in its owner's home (it is bound into its sandbox), so anything below a home may
change between two system calls of the server: a directory may be swapped for a symbolic link to
another user's home at any moment. Keys are therefore never resolved as paths. Every operation walks
its key from a descriptor of ``files/`` held for the store's life, one component at a time
(``openat`` with ``O_DIRECTORY | O_NOFOLLOW``: a link anywhere on the way is refused as UNSAFE, never
followed), then acts on the last name relative to the descriptor of its directory (``fstatat``,
``openat`` with ``O_NOFOLLOW``, ``mkdirat``, ``renameat``, ``linkat``, ``unlinkat``, the descriptor
based ``shutil.rmtree``, ``scandir`` of a descriptor)::

    key ──_parent()──▶ (descriptor of the directory that holds it, last name) ──*at call──▶ result

A link swapped in after the walk passed a component changes nothing: the walk holds that directory,
not its name. Listings skip links and anything but regular files and directories; only regular
files are opened. Staged uploads live outside the namespace (no job reaches ``uploads/``) and are
used by path.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import json
import os
import shutil
import stat as st
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from paddlecloud.core.fileio import copy_range, hash_range, start_writeback, write_at
from paddlecloud.storage.base import Entry, Key, Kind, Piece, StorageError, StorageErrorKind, UploadState

__all__ = ["LocalDirStore"]

E = StorageErrorKind
#: the extended attribute that holds a file's recorded checksum (``recorded_checksum``)
_XATTR = "user.paddlecloud.checksum"
#: a directory on a key's way: an ``O_PATH`` descriptor (no permission check or file set-up: the
#: cheapest open) is all the ``*at`` calls need; never through a link (a link gives ENOTDIR)
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: a directory that is listed (``O_PATH`` descriptors cannot be read or fsynced)
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: a file that is read: never through a link; non-blocking so that a FIFO planted there cannot stall
#: the open (it is then refused as not regular)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


#: what a job can make the file system answer the server below its owner's home, by changing the
#: tree between two calls (a file swapped for a folder, a folder made unsearchable, one removed):
#: the caller's error (a 4xx), never the server's; any other errno is a fault of the server (500)
_TREE_ERRORS = {
    errno.ENOENT: E.NOT_FOUND,
    errno.EEXIST: E.EXISTS,
    errno.ENOTDIR: E.NOT_A_DIRECTORY,
    errno.EISDIR: E.IS_A_DIRECTORY,
    errno.ENOTEMPTY: E.NOT_EMPTY,
    errno.ELOOP: E.UNSAFE,
    errno.EACCES: E.DENIED,
    errno.EPERM: E.DENIED,
    errno.ENOSPC: E.NO_SPACE,
    errno.EDQUOT: E.NO_SPACE,
}


def _tree_error(exc: OSError, key: Key) -> StorageError | None:
    """``exc`` (raised acting on ``key``) as the StorageError a changed tree explains; else None."""
    kind = _TREE_ERRORS.get(exc.errno or 0)
    if kind is None:
        return None
    if kind == E.NO_SPACE:
        return StorageError(kind, key, "the file store has no room for it")
    return StorageError(kind, key, f"{'/'.join(key)}: {exc.strerror or kind}")


@contextlib.contextmanager
def _no_space(key: Key, what: str) -> Iterator[None]:
    """The file system's "disk full" (ENOSPC, EDQUOT) as NO_SPACE, whichever call ran into it."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise StorageError(E.NO_SPACE, key, f"the file store has no room for {what}") from None


_RENAME_NOREPLACE = 1
_renameat2: list[Any] = []  # looked up on first use: [the libc function or None]


def _rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename ``src`` (in ``src_dir``) to ``dst`` (in ``dst_dir``) unless ``dst`` exists then
    (``renameat2(RENAME_NOREPLACE)``: FileExistsError, never a silent overwrite of a name a job made
    after the caller's check); a plain rename where the call or the file system lacks it."""
    if not _renameat2:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):  # not glibc 2.28+
            fn = None
        _renameat2.append(fn)
    fn = _renameat2[0]
    if fn is not None:
        if fn(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


def _fsync_dir(d: int) -> None:
    """fsync the directory ``d`` (an ``O_PATH`` descriptor: reopened read-only to be synced)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=d)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _through_link(key: Key) -> StorageError:
    return StorageError(E.UNSAFE, key, f"{'/'.join(key)} goes through a symbolic link")


def _is_link(parent: int, name: str) -> bool:
    try:
        return st.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_dir(parent: int, name: str, key: Key, flags: int = _WALK, not_dir: E = E.NOT_A_DIRECTORY) -> int:
    """The directory ``name`` in ``parent``, opened without following a link; raises NOT_FOUND (it is
    missing), UNSAFE (a link) or ``not_dir`` (anything else) about ``key``."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        raise StorageError(E.NOT_FOUND, key) from None
    except NotADirectoryError:  # O_DIRECTORY | O_NOFOLLOW answers ENOTDIR for a link too
        if _is_link(parent, name):
            raise _through_link(key) from None
        raise StorageError(not_dir, key) from None


class _Blocks:
    """The blocks of bytes ``pos..end`` of the open file ``fd``. The descriptor is closed at the end,
    by ``close()``, or when the iterator is dropped unread (a generator never started would keep
    it: its ``finally`` runs only once it has begun)."""

    def __init__(self, fd: int, pos: int, end: int, block: int) -> None:
        self._fd, self._pos, self._end, self._block = fd, pos, end, block
        self._done = weakref.finalize(self, os.close, fd)

    def __iter__(self) -> _Blocks:
        return self

    def __next__(self) -> bytes:
        if self._done.alive and self._pos < self._end:
            data = os.pread(self._fd, min(self._block, self._end - self._pos), self._pos)
            if data:
                self._pos += len(data)
                return data
        self._done()
        raise StopIteration

    def close(self) -> None:
        self._done()


class LocalDirStore:
    local_paths = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.uploads = root / "uploads"
        for d in (self.files / "home", self.files / "public", self.uploads):
            d.mkdir(parents=True, exist_ok=True)
        #: where every key's walk starts (the operator's data dir: its own path is trusted)
        self._root = os.open(self.files, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._root)

    # -- keys -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _parent(
        self, key: Key, *, make: bool = False, below_file: E = E.NOT_A_DIRECTORY
    ) -> Iterator[tuple[int, str]]:
        """The directory that holds ``key``, as a descriptor, and ``key``'s last name. The directory is
        reached from the store's root one component at a time and never through a symbolic link
        (UNSAFE), so whatever the caller does relative to it stays where the key says, even if a job
        swaps a directory on the way for a link meanwhile. A missing component is NOT_FOUND (with
        ``make``: created, as ``mkdir -p``), a file on the way ``below_file`` (NOT_FOUND for a
        look-up). The descriptor is closed on exit. An OSError of the caller's calls in the block
        that a job can cause by changing the tree (``_TREE_ERRORS``) becomes a StorageError."""
        try:
            yield from self._walk(key, make, below_file)
        except OSError as exc:  # the tree changed under a call (``_TREE_ERRORS``)
            err = _tree_error(exc, key)
            if err is None:
                raise
            raise err from None

    def _walk(self, key: Key, make: bool, below_file: E) -> Iterator[tuple[int, str]]:
        fd = self._root
        try:
            for i, part in enumerate(key[:-1]):
                try:
                    nxt = _open_dir(fd, part, key[: i + 1], not_dir=below_file)
                except StorageError as exc:
                    if not (make and exc.kind == E.NOT_FOUND):
                        raise
                    with contextlib.suppress(FileExistsError):  # made meanwhile: fine
                        os.mkdir(part, dir_fd=fd)
                    nxt = _open_dir(fd, part, key[: i + 1], not_dir=below_file)
                if fd != self._root:
                    os.close(fd)
                fd = nxt
            yield fd, key[-1]
        finally:
            if fd != self._root:
                os.close(fd)

    def _entry(self, key: Key, s: os.stat_result) -> Entry:
        kind = Kind.DIR if st.S_ISDIR(s.st_mode) else Kind.FILE
        return Entry(key=key, kind=kind, size=s.st_size if kind == Kind.FILE else 0, mtime=s.st_mtime)

    def _stat_at(self, parent: int, name: str, key: Key) -> Entry | None:
        """``name`` in ``parent`` (not followed): None if missing, UNSAFE unless a file or directory."""
        try:
            s = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if st.S_ISLNK(s.st_mode):
            raise _through_link(key)
        if not (st.S_ISREG(s.st_mode) or st.S_ISDIR(s.st_mode)):
            raise StorageError(E.UNSAFE, key, f"{'/'.join(key)} is not a regular file or directory")
        return self._entry(key, s)

    def _placed(self, parent: int, name: str, key: Key) -> Entry:
        """What the caller just put at ``name`` in ``parent`` (NOT_FOUND if a job removed it already)."""
        e = self._stat_at(parent, name, key)
        if e is None:
            raise StorageError(E.NOT_FOUND, key, f"{'/'.join(key)} was removed as soon as it was made")
        return e

    def local_path(self, key: Key) -> Path | None:
        """The path of ``key`` for a job's workers (the sandbox binds it by descriptor, never through a
        link); UNSAFE if a component of it that exists now is a symbolic link."""
        try:
            with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
                if _is_link(parent, name):
                    raise _through_link(key)
        except StorageError as exc:
            if exc.kind != E.NOT_FOUND:
                raise
        return self.files.joinpath(*key)

    # -- namespace ------------------------------------------------------------------------------

    def stat(self, key: Key) -> Entry | None:
        try:
            with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
                return self._stat_at(parent, name, key)
        except StorageError as exc:
            if exc.kind == E.NOT_FOUND:  # nothing below a missing component or a file
                return None
            raise

    def _entries(self, fd: int, prefix: Key, recursive: bool) -> Iterator[Entry]:
        """The entries of the open directory ``fd`` (a ``_LIST`` descriptor), sorted, depth first."""
        with os.scandir(fd) as it:
            found = sorted(it, key=lambda d: d.name)
        for d in found:
            if d.is_symlink():
                continue  # never ours: planted links are not shown and not followed
            try:
                s = d.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
            if not (st.S_ISREG(s.st_mode) or st.S_ISDIR(s.st_mode)):
                continue
            entry = self._entry((*prefix, d.name), s)
            yield entry
            if recursive and entry.kind == Kind.DIR:
                try:
                    sub = os.open(d.name, _LIST, dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # removed, or swapped for a link, since it was listed: not followed
                try:
                    yield from self._entries(sub, entry.key, recursive)
                finally:
                    os.close(sub)

    def _tree(self, parent: int, name: str, key: Key, recursive: bool) -> list[Entry]:
        fd = _open_dir(parent, name, key, _LIST)
        try:
            return list(self._entries(fd, key, recursive))
        finally:
            os.close(fd)

    def listdir(self, key: Key, recursive: bool) -> Iterator[Entry]:
        with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
            return iter(self._tree(parent, name, key, recursive))

    def mkdir(self, key: Key, parents: bool) -> Entry:
        with self._parent(key, make=parents) as (parent, name):
            try:
                os.mkdir(name, dir_fd=parent)
            except FileExistsError:
                existing = self._stat_at(parent, name, key)  # UNSAFE for a link
                if existing is not None and existing.kind == Kind.DIR and parents:
                    return existing
                raise StorageError(E.EXISTS, key) from None
            return self._placed(parent, name, key)

    def remove(self, key: Key, recursive: bool) -> int:
        with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
            e = self._stat_at(parent, name, key)
            if e is None:
                raise StorageError(E.NOT_FOUND, key)
            if e.kind == Kind.FILE:
                os.unlink(name, dir_fd=parent)
                return e.size
            if not recursive:
                raise StorageError(E.IS_A_DIRECTORY, key)
            freed = sum(x.size for x in self._tree(parent, name, key, recursive=True))
            try:
                shutil.rmtree(name, dir_fd=parent)  # by descriptor: refuses a link, follows none
            except OSError:
                if _is_link(parent, name):  # swapped for a link since the check
                    raise _through_link(key) from None
                raise
            return freed

    def move(self, src: Key, dst: Key) -> Entry:
        with self._parent(src, below_file=E.NOT_FOUND) as (src_dir, src_name):
            if self._stat_at(src_dir, src_name, src) is None:
                raise StorageError(E.NOT_FOUND, src)
            with self._parent(dst) as (dst_dir, dst_name):
                if self._stat_at(dst_dir, dst_name, dst) is not None:
                    raise StorageError(E.EXISTS, dst)
                _rename_noreplace(src_dir, src_name, dst_dir, dst_name)  # EEXIST: made meanwhile
                return self._placed(dst_dir, dst_name, dst)

    def read(self, key: Key, offset: int, length: int | None, block: int) -> Iterator[bytes]:
        fd, s = self._open_file(key)  # now: a missing file is an error before any byte is sent
        end = s.st_size if length is None else min(s.st_size, offset + length)
        return _Blocks(fd, offset, end, block)

    def _open_file(self, key: Key) -> tuple[int, os.stat_result]:
        """``key`` opened read-only, and its ``fstat``: a regular file, reached without any link."""
        with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
            try:
                fd = os.open(name, _READ, dir_fd=parent)
            except FileNotFoundError:
                raise StorageError(E.NOT_FOUND, key) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # the last component is a link
                    raise _through_link(key) from None
                if exc.errno == errno.ENXIO:  # a Unix socket
                    raise StorageError(E.UNSAFE, key, f"{'/'.join(key)} is not a regular file") from None
                raise
        s = os.fstat(fd)
        if not st.S_ISREG(s.st_mode):
            os.close(fd)
            if st.S_ISDIR(s.st_mode):
                raise StorageError(E.IS_A_DIRECTORY, key)
            raise StorageError(E.UNSAFE, key, f"{'/'.join(key)} is not a regular file")  # a FIFO
        os.set_blocking(fd, True)
        return fd, s

    def open_read(self, key: Key) -> int:
        return self._open_file(key)[0]

    def usage(self, key: Key) -> int:
        """Bytes of the files below ``key`` (0 if it is missing). A folder the walk may not enter is
        DENIED, not skipped: a job must not hide bytes from the quota by making a folder unreadable."""
        return collections.deque(self.usage_walk(key), maxlen=1)[0]

    def usage_walk(self, key: Key, every: int = 512) -> Iterator[int]:
        """:meth:`usage` as running totals, one every ``every`` entries (the last one the total)."""
        total = 0
        try:
            with self._parent(key, below_file=E.NOT_FOUND) as (parent, name):
                fd = _open_dir(parent, name, key, _LIST)
                try:
                    for i, e in enumerate(self._entries(fd, key, recursive=True), 1):
                        total += e.size
                        if i % every == 0:
                            yield total
                finally:
                    os.close(fd)
        except StorageError as exc:
            if exc.kind not in (E.NOT_FOUND, E.NOT_A_DIRECTORY):
                raise
        yield total

    def _place(self, tmp: Path, key: Key, overwrite: bool) -> Entry:
        """Move a finished (already fsynced) staged file into the namespace atomically, then fsync the
        directory so that the new name survives a power loss once the caller is told it is there."""
        with self._parent(key) as (parent, name):
            existing = self._stat_at(parent, name, key)  # UNSAFE for a link
            if existing is not None and existing.kind == Kind.DIR:
                raise StorageError(E.IS_A_DIRECTORY, key)
            if overwrite:
                os.replace(tmp, name, dst_dir_fd=parent)
            else:
                try:
                    os.link(tmp, name, dst_dir_fd=parent)  # atomic and never clobbers
                except FileExistsError:
                    raise StorageError(E.EXISTS, key) from None
                os.unlink(tmp)
            _fsync_dir(parent)
            return self._placed(parent, name, key)

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
        self, upload_id: str, offset: int, data: Iterable[Piece], on_piece: Callable[[Piece], object]
    ) -> int:
        fd = os.open(self._staging(upload_id) / "data", os.O_WRONLY | os.O_NOFOLLOW)
        pieces = list(data)
        for piece in pieces:
            on_piece(piece)
        written = 0
        try:  # a sparse data file (no fallocate on this file system) can still run out of space
            with _no_space((), "this chunk"):
                written = write_at(fd, pieces, offset)  # WRITE_STEP a call: see core.fileio
            start_writeback(fd, offset, written)  # the commit's fsync then has little left
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
