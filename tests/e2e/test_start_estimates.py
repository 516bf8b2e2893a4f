"""Start-time estimates on a real server: `submit --expected-duration`, the ETA column of `get jobs`,
`describe`'s Estimate line and the API's ``estimate`` (docs/cli.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """One node of 2 CPUs, a forecast every second."""
    srv = Server(
        data_dir=tmp_path / "data", home=tmp_path / "home",
        up_args=["--node-cpu", "2", "--node-memory", "4Gi", "--forecast-interval", "1"],
    )  # fmt: skip
    srv.home.mkdir()
    srv.start()
    yield srv
    for job in srv.json("get", "jobs")["items"]:
        srv.cli("kill", job["name"], "--grace", "1", check=False)
    srv.stop()


def _estimated(server: Server, name: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = server.job(name)
        if job["estimate"] is not None and job["estimate"]["start"] is not None:
            return job
        assert time.monotonic() < deadline, f"no estimate for {name} in {timeout} s: {job}"
        time.sleep(0.3)


def test_a_waiting_job_is_told_when_it_starts(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "sleep", {"main.py": "import time\ntime.sleep(120)\n"})
    server.cli("submit", str(pkg), "--name", "first", "--entry", "python main.py", "--trainers", "2",
               "--cpu", "1", "--expected-duration", "10m")  # fmt: skip
    server.wait_phase("first", {"Running"})
    server.cli("submit", str(pkg), "--name", "second", "--entry", "python main.py", "--cpu", "1")
    second = _estimated(server, "second")
    first = server.job("first")
    assert second["phase"] == "Queued"
    assert first["spec"]["expected_duration_s"] == 600
    est, ahead = second["estimate"], first["estimate"]
    # first declared 10 minutes: it ends 10 minutes after its start at most, and second starts then
    started = datetime.fromisoformat(first["started_at"])
    end = datetime.fromisoformat(ahead["end"])
    assert started < end <= started + timedelta(seconds=600 + 60)
    assert est["start"] == ahead["end"] or datetime.fromisoformat(est["start"]) >= end
    assert (ahead["end_basis"], est["start_basis"], est["end_basis"]) == ("declared", "declared", "unknown")
    table = server.cli("get", "jobs").stdout
    row = next(line for line in table.splitlines() if line.startswith("second"))
    assert "ETA" in table.splitlines()[0] and "starts in " in row
    assert "ends in " in next(line for line in table.splitlines() if line.startswith("first"))
    describe = server.cli("describe", "second").stdout
    assert "Estimate:" in describe and "(declared)" in describe and "(unknown)" in describe


def test_a_bad_expected_duration_is_refused_with_what_to_write(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "noop", {"main.py": "print(1)\n"})
    r = server.cli(
        "submit", str(pkg), "--entry", "python main.py", "--expected-duration", "soon", check=False
    )
    assert r.returncode != 0 and "90s, 45m, 2h" in r.stderr and "Traceback" not in r.stderr
    r = server.cli("submit", str(pkg), "--entry", "python main.py", "--expected-duration", "5s", check=False)
    assert r.returncode != 0 and "expected_duration_s" in r.stderr and "Traceback" not in r.stderr
