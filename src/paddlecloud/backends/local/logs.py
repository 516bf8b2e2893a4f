"""Worker logs on disk: ``logs/<worker>.<run>.log``, one file per run, kept after the worker ends.

``read_logs`` serves tail-N, ``--previous`` (the run before the last) and follow. Follow polls the
files, moves on to a worker's next run's file once it appears and the current one is drained (a
restarted worker), and ends once every requested worker has ended and its file is drained, so the
loop is bounded by the workers' lifetime.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.backends.base import LogRequest

__all__ = ["log_runs", "read_logs"]

_POLL = 0.2
_CHUNK = 64 * 1024


def log_runs(logs_dir: Path, worker: str) -> list[int]:
    runs = []
    for p in logs_dir.glob(f"{worker}.*.log"):
        tail = p.name[len(worker) + 1 : -4]
        if tail.isdigit():
            runs.append(int(tail))
    return sorted(runs)


def _pick(logs_dir: Path, worker: str, previous: bool) -> Path | None:
    runs = log_runs(logs_dir, worker)
    if previous:
        return logs_dir / f"{worker}.{runs[-2]}.log" if len(runs) >= 2 else None
    return logs_dir / f"{worker}.{runs[-1]}.log" if runs else None


def _tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last ``lines`` lines of ``path`` start."""
    size = path.stat().st_size
    if lines <= 0:
        return size
    with open(path, "rb") as f:
        pos, found = size, 0
        while pos > 0:
            step = min(_CHUNK, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            if pos + step == size and block.endswith(b"\n"):
                found -= 1  # the final newline does not start a line
            end = len(block)
            while (i := block.rfind(b"\n", 0, end)) >= 0:  # newlines from the end, found in C
                found += 1
                if found == lines:
                    return pos + i + 1
                end = i
    return 0


@dataclass
class _Cursor:
    worker: str
    path: Path | None
    offset: int = 0
    partial: bytes = b""


def _prefix(line: bytes, worker: str, many: bool) -> bytes:
    return f"[{worker}] ".encode() + line if many else line


def _newer_run(logs_dir: Path, c: _Cursor) -> Path | None:
    """The log file of a run newer than the one ``c`` reads (the worker was restarted), if any."""
    newer = _pick(logs_dir, c.worker, False)
    return newer if newer is not None and newer != c.path else None


def _flush(c: _Cursor, many: bool) -> Iterator[bytes]:
    if c.partial:
        yield _prefix(c.partial + b"\n", c.worker, many)
        c.partial = b""


def read_logs(logs_dir: Path, req: LogRequest, ended: Callable[[str], bool]) -> Iterator[bytes]:
    many = len(req.workers) > 1
    cursors = []
    for w in req.workers:
        path = _pick(logs_dir, w, req.previous)
        offset = 0
        if path is not None and path.exists() and req.tail is not None:
            offset = _tail_offset(path, req.tail)
        cursors.append(_Cursor(w, path, offset))
    draining = False
    while True:
        progressed = False
        for c in cursors:
            if c.path is None and req.follow and not req.previous:
                c.path = _pick(logs_dir, c.worker, False)
            if c.path is None or not c.path.exists():
                continue
            with open(c.path, "rb") as f:
                f.seek(c.offset)
                data = f.read(_CHUNK * 16)
            if not data:
                newer = _newer_run(logs_dir, c) if req.follow and not req.previous else None
                if newer is not None:  # a restarted worker: on to its next run's file
                    yield from _flush(c, many)
                    c.path, c.offset, progressed = newer, 0, True
                continue
            progressed = True
            c.offset += len(data)
            lines = (c.partial + data).split(b"\n")
            c.partial = lines.pop()
            for line in lines:
                yield _prefix(line + b"\n", c.worker, many)
        if progressed:
            continue
        if req.follow and not draining and all(ended(c.worker) for c in cursors):
            draining = True  # one more pass: lines written just before the worker ended
            continue
        if not req.follow or draining:
            # drained: flush what has no final newline and stop
            for c in cursors:
                yield from _flush(c, many)
            return
        time.sleep(_POLL)
