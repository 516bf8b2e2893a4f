"""A job's own folders on a backend's disk (``backends/jobdirs.py``): the walk that measures them
(what counts, links never followed, paused and resumed, too deep or unreadable is an error, never
zero) and the removal of a finished job's scratch."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path

import pytest

from paddlecloud.backends.jobdirs import SCRATCH, TRASH, DiskWalkError, drop_scratch, sweep_trash, walk_bytes

MI = 2**20


def total(top: Path, **kw: int) -> int:
    return collections.deque(walk_bytes(top, **kw), maxlen=1)[0]


def test_a_missing_folder_holds_nothing(tmp_path: Path) -> None:
    assert list(walk_bytes(tmp_path / "gone")) == [0]


def test_files_count_at_least_their_size_and_their_blocks(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a" * MI)
    with open(tmp_path / "sparse", "wb") as f:  # 64 MiB that take no blocks: its size counts
        f.truncate(64 * MI)
    sub = tmp_path / "sub"
    sub.mkdir()
    for i in range(200):
        (sub / f"tiny{i}").write_bytes(b"t")
    got = total(tmp_path)
    assert got >= MI + 64 * MI + 200
    blocks = sum(os.stat(sub / f"tiny{i}").st_blocks * 512 for i in range(200))
    assert got >= MI + 64 * MI + max(blocks, 200)  # a million one-byte files do not hide


def test_links_are_counted_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"b" * 4 * MI)
    job = tmp_path / "job"
    job.mkdir()
    (job / "to-outside").symlink_to(outside)
    (job / "to-big").symlink_to(outside / "big")
    assert total(job) < MI


def test_running_totals_let_a_caller_pause_the_walk(tmp_path: Path) -> None:
    for i in range(100):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000)
    totals = list(walk_bytes(tmp_path, every=10))
    assert len(totals) >= 10 and totals == sorted(totals)
    assert totals[-1] == total(tmp_path) >= 100 * 1000
    walk = walk_bytes(tmp_path, every=10)
    first = next(walk)  # paused here: the rest is still counted later
    assert first < totals[-1] and collections.deque(walk, maxlen=1)[0] == totals[-1]


def test_folders_nested_too_deep_are_an_error_not_zero(tmp_path: Path) -> None:
    deep = tmp_path
    for i in range(6):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "hidden").write_bytes(b"h" * MI)
    with pytest.raises(DiskWalkError, match="nested more than 4 deep"):
        total(tmp_path, max_depth=4)
    assert total(tmp_path, max_depth=8) >= MI


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_a_folder_the_server_may_not_read_is_an_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "hidden").write_bytes(b"h" * MI)
    locked.chmod(0)
    try:
        with pytest.raises(DiskWalkError, match="ermission denied"):
            total(tmp_path)
    finally:
        locked.chmod(0o700)


def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_drop_scratch_leaves_logs_and_statuses(tmp_path: Path) -> None:
    job = tmp_path / "jobs" / "alice" / "fit"
    for sub in (*SCRATCH, "logs", "run"):
        (job / sub / "w").mkdir(parents=True)
        (job / sub / "w" / "data").write_bytes(b"d" * MI)
    (job / "launch.json").write_text("{}")
    before = total(job)
    drop_scratch(job)
    assert not any((job / sub).exists() for sub in SCRATCH)  # gone at once for any reader
    assert (job / "logs" / "w" / "data").exists() and (job / "run" / "w" / "data").exists()
    _until(lambda: not (job / TRASH).exists())  # and removed from the disk soon after
    assert total(job) <= before - 3 * MI
    drop_scratch(job)  # idempotent


def test_sweep_trash_removes_what_an_earlier_server_left(tmp_path: Path) -> None:
    trash = tmp_path / "jobs" / "alice" / "fit" / TRASH / "workers.1.0"
    trash.mkdir(parents=True)
    (trash / "data").write_bytes(b"d" * MI)
    sweep_trash(tmp_path / "jobs")
    _until(lambda: not trash.parent.exists())
