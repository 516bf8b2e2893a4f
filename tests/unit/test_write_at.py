"""core.fileio.write_at: buffers written at an offset in steps of at most WRITE_STEP, short writes
continued where they stopped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from paddlecloud.core import fileio
from paddlecloud.core.fileio import WRITE_STEP, write_at


def test_pieces_land_in_order_at_the_offset_in_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.pwrite

    def short_pwrite(fd: int, data: memoryview, pos: int) -> int:
        calls.append(len(data))
        return real(fd, data[: max(1, len(data) // 2)], pos)  # every write short: half of it

    monkeypatch.setattr(fileio.os, "pwrite", short_pwrite)
    big = os.urandom(WRITE_STEP * 2 + 5)
    pieces = [b"ab", bytearray(b""), memoryview(big), b"z"]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert write_at(fd, pieces, 3) == 2 + len(big) + 1
        assert os.pread(fd, 10 + len(big), 0) == b"\0\0\0ab" + big + b"z"
    finally:
        os.close(fd)
    assert max(calls) == WRITE_STEP  # never more than a step in one call


def test_a_write_that_writes_nothing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fileio.os, "pwrite", lambda fd, data, pos: 0)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="nothing written"):
            write_at(fd, [b"x"], 0)
    finally:
        os.close(fd)
