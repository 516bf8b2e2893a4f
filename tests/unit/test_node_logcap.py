"""A run's log stays within its limit: the head and the latest output kept, the drop counted."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from paddlecloud.node.logcap import MARKER_SIZE, MIN_LIMIT, CappedLog, marker


def _log(path: Path, limit: int | None) -> CappedLog:
    return CappedLog(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), limit)


def test_under_the_limit_the_log_is_the_whole_output(tmp_path: Path) -> None:
    log = _log(tmp_path / "a.log", 64 * 1024)
    lines = [f"line {i}\n".encode() for i in range(1000)]
    for line in lines:
        log.write(line)
    assert (tmp_path / "a.log").read_bytes() == b"".join(lines) and log.dropped == 0


def test_past_the_limit_head_marker_and_latest_output_are_kept_and_the_drop_is_exact(tmp_path: Path) -> None:
    limit, rng = 64 * 1024, random.Random(7)
    log = _log(tmp_path / "a.log", limit)
    written = []
    for i in range(20_000):
        line = f"line {i:05d} ".encode() * rng.randint(1, 30) + b"\n"
        log.write(line)
        written.append(line)
        assert os.fstat(log.fd).st_size <= limit  # never over, not even for a moment
    out = (tmp_path / "a.log").read_bytes()
    everything = b"".join(written)
    head = out[: limit // 2]
    assert head == everything[: limit // 2]  # the beginning, byte for byte
    mark = out[limit // 2 : limit // 2 + MARKER_SIZE]
    assert mark == marker(log.dropped, limit) and f"{log.dropped:,} bytes".encode() in mark
    tail = out[limit // 2 + MARKER_SIZE :]
    assert everything.endswith(tail) and len(tail) >= (limit - limit // 2 - MARKER_SIZE) // 2
    assert len(head) + len(tail) + log.dropped == len(everything)  # nothing lost uncounted


def test_one_write_larger_than_the_limit_keeps_its_end(tmp_path: Path) -> None:
    limit = MIN_LIMIT
    log = _log(tmp_path / "a.log", limit)
    blob = bytes(range(256)) * 1000  # 256,000 bytes at once
    log.write(blob)
    out = (tmp_path / "a.log").read_bytes()
    assert len(out) <= limit and out[: limit // 2] == blob[: limit // 2]
    assert blob.endswith(out[limit // 2 + MARKER_SIZE :])
    assert len(out) - MARKER_SIZE + log.dropped == len(blob)


def test_an_unbounded_log_keeps_everything_and_a_tiny_limit_is_refused(tmp_path: Path) -> None:
    log = _log(tmp_path / "a.log", None)
    for _ in range(100):
        log.write(b"x" * 10_000)
    assert (tmp_path / "a.log").stat().st_size == 1_000_000
    with pytest.raises(ValueError, match="no room"):
        _log(tmp_path / "b.log", MIN_LIMIT - 1)


def test_writes_larger_than_the_tail_never_leave_an_unmarked_gap(tmp_path: Path) -> None:
    """Found in review: after the first cut a write longer than the tail was trimmed, but the old
    tail stayed in front of it, the bytes between them gone without a marker."""
    limit = MIN_LIMIT
    log = _log(tmp_path / "a.log", limit)
    written = b""
    for i, size in enumerate((5000, 20_000, 20_000, 300, 20_000, 7000)):
        chunk = bytes([65 + i]) * size
        log.write(chunk)
        written += chunk
        out = (tmp_path / "a.log").read_bytes()
        tail = out[limit // 2 + MARKER_SIZE :] if log.marked else b""
        assert len(out) <= limit and written.endswith(tail)  # what is kept is the latest, whole
        assert len(out) - (MARKER_SIZE if log.marked else 0) + log.dropped == len(written)
