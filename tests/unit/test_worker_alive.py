"""An adopted worker's process is told from a re-used pid by its start in clock ticks since boot
(``local/process.py``), not by its wall-clock start time, which moves when the clock is stepped."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from paddlecloud.backends.local.process import WorkerProc, start_ticks

__all__: list[str] = []


@pytest.fixture
def sleeper() -> Iterator[int]:
    p = subprocess.Popen(["sleep", "60"])
    yield p.pid
    p.kill()
    p.wait()


def _adopted(tmp_path: Path, pid: int, **recorded: object) -> WorkerProc:
    w = WorkerProc("trainer-0", "trainer", 0, "node-0", "127.0.0.1:1", (), tmp_path, tmp_path, tmp_path / "l")
    w.pid = pid
    for key, value in recorded.items():
        setattr(w, key, value)
    return w  # no popen: what a server that adopted the run has


def test_a_live_run_stays_alive_though_the_clock_moved(tmp_path: Path, sleeper: int) -> None:
    stepped = psutil.Process(sleeper).create_time() + 5.0  # as after a 5 s clock step
    assert _adopted(tmp_path, sleeper, create_time=stepped, start_ticks=start_ticks(sleeper)).alive()
    assert not _adopted(tmp_path, sleeper, create_time=stepped).alive()  # the old check: "re-used"


def test_a_reused_pid_is_not_the_run(tmp_path: Path, sleeper: int) -> None:
    ticks = start_ticks(sleeper)
    assert ticks is not None
    assert not _adopted(tmp_path, sleeper, start_ticks=ticks - 100).alive()
    assert start_ticks(2**22 + 12345) is None  # no such process
