"""A worker run's log on disk, bounded: the first part and the latest part are kept, the middle goes.

    monitor ──write(data)──▶ CappedLog ──▶ logs/<worker>.<run>.log   never more than ``limit`` bytes

While the file is under ``limit`` it is the run's whole output. A write that would take it past
``limit`` first cuts it: the head (the first half of ``limit``: how the program started, its
configuration, the first errors) stays, then a fixed-size marker that says how many bytes were
dropped and why, then the most recent output (a quarter of ``limit`` after each cut, so a cut
happens once per quarter of ``limit`` written, not on every write)::

    [head: limit/2 bytes][marker, 256 bytes][tail: the latest bytes, up to limit/4 .. limit/2]

The cut moves the tail in place (``copy_file_range`` within the file, then ``ftruncate``): no
memory is held for it and readers see a file that only ever has the head, the marker and the
latest output. A reader following the file by offset (``logs -f``) sees it shrink at a cut and goes
on from its new end. Only the run's monitor writes the file through this class; other writers that
append (Slurm's own output of the batch step before the monitor started) are counted when the
file is measured at each cut.

Standard library only.
"""

from __future__ import annotations

import os

__all__ = ["MARKER_SIZE", "MIN_LIMIT", "CappedLog", "marker"]

#: the bytes reserved after the head for the marker (the text is padded to this size)
MARKER_SIZE = 256
#: the smallest limit that leaves room for a head, the marker and a tail
MIN_LIMIT = 16 * 1024


def _size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def marker(dropped: int, limit: int) -> bytes:
    """The text that stands where ``dropped`` bytes were cut, exactly ``MARKER_SIZE`` bytes."""
    text = (
        f"\n[paddlecloud: {dropped:,} bytes ({_size(dropped)}) of this log were dropped here: the run's "
        f"output passed --max-log-size ({_size(limit)}); the first part and the latest part are kept]\n"
    ).encode()
    return text[: MARKER_SIZE - 1].ljust(MARKER_SIZE - 1) + b"\n"


class CappedLog:
    """Writes to the end of ``fd`` (opened ``O_RDWR`` without ``O_APPEND``: Linux ignores the
    offset of ``pwrite`` on an append-only descriptor), keeping the file within ``limit`` bytes
    (None: unbounded)."""

    def __init__(self, fd: int, limit: int | None) -> None:
        if limit is not None and limit < MIN_LIMIT:
            raise ValueError(f"a log limit below {MIN_LIMIT} bytes leaves no room for a head and a tail")
        self.fd = fd
        self.limit = limit
        self.dropped = 0
        self.marked = False
        self.head = (limit or 0) // 2
        self.keep = ((limit or 0) - self.head - MARKER_SIZE) // 2

    def write(self, data: bytes) -> None:
        size = os.fstat(self.fd).st_size
        if self.limit is None or size + len(data) <= self.limit:
            _pwrite_all(self.fd, data, size)
            return
        if size < self.head:  # fill the head first
            room = self.head - size
            _pwrite_all(self.fd, data[:room], size)
            data, size = data[room:], self.head
        start = self.head + MARKER_SIZE
        if not self.marked:  # the first cut: the marker takes its place (the output there goes)
            self.dropped += min(size, start) - self.head
            self.marked = True
            os.pwrite(self.fd, marker(self.dropped, self.limit), self.head)
            size = max(size, start)
        if len(data) > self.keep:  # more than a whole tail in one write: only its end is kept, and
            # what was kept before goes (it would stand before the gap, unmarked)
            self.dropped += size - start + len(data) - self.keep
            os.ftruncate(self.fd, start)
            data, size = data[-self.keep :], start
        if size + len(data) > self.limit:
            size = self._cut(size)
        _pwrite_all(self.fd, data, size)
        os.pwrite(self.fd, marker(self.dropped, self.limit), self.head)

    def _cut(self, size: int) -> int:
        """Drop the middle: the last ``keep`` bytes move right behind the marker. The new size."""
        start = self.head + MARKER_SIZE
        src = max(size - self.keep, start)
        n = size - src
        if src > start:
            _move(self.fd, src, start, n)
            os.ftruncate(self.fd, start + n)
            self.dropped += src - start
        return start + n


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _move(fd: int, src: int, dst: int, n: int) -> None:
    """Move ``n`` bytes of ``fd`` from ``src`` down to ``dst`` (``dst < src``; the ranges may
    overlap: then blocks go front to back, none larger than ``src - dst``)."""
    done = 0
    if dst + n <= src:  # apart: in the kernel, where the file system can
        try:
            while done < n:
                step = os.copy_file_range(fd, fd, n - done, src + done, dst + done)
                if step <= 0:
                    break
                done += step
        except OSError:  # not on this file system (EXDEV, EINVAL, ENOSYS): through memory
            pass
    block = min(src - dst, 1 << 20)
    while done < n:
        chunk = os.pread(fd, min(block, n - done), src + done)
        if not chunk:
            return
        _pwrite_all(fd, chunk, dst + done)
        done += len(chunk)
