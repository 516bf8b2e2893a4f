"""The server SIGKILLed during 200 concurrent submits: every acknowledged job is there after the
restart, and running jobs are re-adopted (``crashload.py``; 500 submits in bench/crash_submits.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Server
from .crashload import crash_during_submits

pytestmark = pytest.mark.e2e


def test_every_acknowledged_submit_survives_a_crash_under_load(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home")
    srv.up_args = ["--node-cpu", "16", "--node-memory", "32Gi"]
    srv.start()
    try:
        r = crash_during_submits(srv, tmp_path, submits=200, kill_after=100)
    finally:
        srv.stop()
    assert len(r.acknowledged) >= 100
    assert r.acknowledged <= r.found, f"lost after the crash: {sorted(r.acknowledged - r.found)[:10]}"
    assert not r.unexpected
    assert not r.missing_events, sorted(r.missing_events)[:10]
    assert r.integrity == "ok"
    assert r.readopted, "the running jobs were not re-adopted with the same processes"
