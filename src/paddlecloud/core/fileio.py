"""Bulk file I/O without passing the bytes through Python: the PFS same-host fast path's copy, hash
and writeback steps (used by the local file store on the server and by the SDK on the client).

    copy_range(src, dst, off, n)   copy_file_range in the kernel (pread/pwrite where it cannot)
    hash_range(fd, off, n)         BLAKE3 of the bytes where they lie (a shared read-only mapping)
    hash_read(fd, off, n)          the same through pread, for files others may shrink meanwhile
    start_writeback(fd, off, n)    sync_file_range(WRITE): the disk starts now, the final fsync is short
    write_at(fd, pieces, off)      buffers written at an offset, ``WRITE_STEP`` bytes a call at most
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Iterable
from typing import Any

import blake3

__all__ = ["WRITE_STEP", "copy_range", "hash_range", "hash_read", "start_writeback", "write_at"]

_PAGE = mmap.ALLOCATIONGRANULARITY
_NO_COPY_FILE_RANGE = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)
_SYNC_FILE_RANGE_WRITE = 2
#: the most bytes one write into the page cache is given. Measured here (ext4, a VM that takes
#: freed guest memory back): 256 MiB written 1 or 4 MiB a call cost 0.5-0.9 s of system time (a
#: large write gets large folios, made of the free blocks the host took back, and pays its fault on
#: each page again), 256 KiB or 64 KiB a call 0.06-0.08 s, as rsync's writes do
WRITE_STEP = 256 << 10


def hash_range(fd: int, offset: int, length: int) -> str:
    """BLAKE3 (hex) of bytes ``offset..offset+length`` of the open file ``fd``, read through a shared
    read-only mapping (pages in the page cache are hashed where they are, never copied); ValueError
    when the file is shorter."""
    if length == 0:
        return blake3.blake3(b"").hexdigest()
    if os.fstat(fd).st_size < offset + length:
        raise ValueError(f"file ends before byte {offset + length}")
    start = offset - offset % _PAGE
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with mmap.mmap(fd, length + offset - start, flags=flags, prot=mmap.PROT_READ, offset=start) as m:
        view = memoryview(m)
        try:
            return blake3.blake3(view[offset - start :]).hexdigest()
        finally:
            view.release()


def hash_read(fd: int, offset: int, length: int, piece: int = 1 << 22) -> str:
    """:func:`hash_range` through ``pread``, for a file another process may truncate meanwhile (a
    mapping of it would raise SIGBUS and kill the process); ValueError when the file is shorter."""
    h = blake3.blake3()
    done = 0
    while done < length:
        data = os.pread(fd, min(piece, length - done), offset + done)
        if not data:
            raise ValueError(f"file ends before byte {offset + length}")
        h.update(data)
        done += len(data)
    return h.hexdigest()


def copy_range(src: int, dst: int, offset: int, length: int) -> None:
    """Copy bytes ``offset..offset+length`` of ``src`` to the same offset of ``dst`` inside the kernel
    (``copy_file_range``; a reflink where the file system shares extents), or with ``pread`` /
    ``pwrite`` where it cannot (another file system type); ValueError when ``src`` is shorter."""
    done = 0
    while done < length:
        try:
            n = os.copy_file_range(src, dst, min(length - done, 1 << 30), offset + done, offset + done)
        except OSError as exc:
            if exc.errno not in _NO_COPY_FILE_RANGE:
                raise
            _copy_plain(src, dst, offset + done, length - done)
            return
        if n == 0:
            raise ValueError(f"source ended at byte {offset + done}, {length - done} bytes short")
        done += n


def _copy_plain(src: int, dst: int, offset: int, length: int) -> None:
    end = offset + length
    while offset < end:
        data = os.pread(src, min(WRITE_STEP, end - offset), offset)
        if not data:
            raise ValueError(f"source ended at byte {offset}, {end - offset} bytes short")
        offset += write_at(dst, [data], offset)


def write_at(fd: int, pieces: Iterable[bytes | bytearray | memoryview], offset: int) -> int:
    """Write ``pieces`` one after the other at ``offset`` of ``fd``, at most ``WRITE_STEP`` bytes a
    call (a short write goes on where it stopped); the bytes written."""
    pos = offset
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while view:
            n = os.pwrite(fd, view[:WRITE_STEP], pos)
            if n == 0:
                raise OSError(errno.EIO, f"nothing written at byte {pos}")
            view, pos = view[n:], pos + n
    return pos - offset


_sync_file_range: list[Any] = []  # looked up on first use: [the libc function or None]


def _libc_sync_file_range() -> Any:
    if not _sync_file_range:
        try:  # the running program's own symbols (libc's among them): no ldconfig, no subprocess
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):  # not Linux / not glibc
            fn = None
        _sync_file_range.append(fn)
    return _sync_file_range[0]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``offset..offset+length`` of ``fd`` to disk now, without
    waiting and without dropping the pages from the cache (``sync_file_range(SYNC_FILE_RANGE_WRITE)``;
    nothing where it is missing). The fsync before the file is committed then has little left."""
    fn = _libc_sync_file_range()
    if fn is not None and length > 0:
        fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
