"""``backends.local.logs._tail_offset`` (where the last N lines of a log start), found with
``bytes.rfind``, against the byte-by-byte scan it replaced, on random logs and small read chunks
(so that newlines fall on chunk boundaries)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from paddlecloud.backends.local import logs


def scan(data: bytes, lines: int, chunk: int) -> int:
    """The earlier implementation, one byte at a time (the oracle)."""
    size = len(data)
    if lines <= 0:
        return size
    pos, found = size, 0
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        block = data[pos : pos + step]
        if pos + step == size and block.endswith(b"\n"):
            found -= 1
        for i in range(len(block) - 1, -1, -1):
            if block[i] == 0x0A:
                found += 1
                if found == lines:
                    return pos + i + 1
    return 0


@pytest.mark.parametrize("chunk", [1, 3, 7, 64 * 1024])
def test_tail_offset_matches_the_byte_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(logs, "_CHUNK", chunk)
    rng = random.Random(chunk)
    path = tmp_path / "w.0.log"
    for _ in range(150):
        data = bytes(rng.choice(b"ab\n\n") for _ in range(rng.randrange(0, 60)))
        path.write_bytes(data)
        for lines in range(0, 12):
            assert logs._tail_offset(path, lines) == scan(data, lines, chunk), (data, lines)
