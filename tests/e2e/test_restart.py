"""A server restart does not disturb running jobs; jobs whose processes vanished fail with a reason."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e

COUNTDOWN = """
import time
for i in range(int(__import__('sys').argv[1])):
    print('step', i, flush=True)
    time.sleep(0.5)
print('done', flush=True)
"""


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "crash"])
def test_running_job_is_readopted(server: Server, tmp_path: Path, how: int) -> None:
    name = f"survivor-{how}"
    pkg = write_package(tmp_path / "countdown", {"count.py": COUNTDOWN})
    server.cli("submit", str(pkg), "--name", name, "--entry", "python count.py 14", "--trainers", "2",
               "--cpu", "100m")  # fmt: skip
    server.wait_phase(name, {"Running"}, timeout=30)
    pids = [w["pid"] for w in server.json("get", "workers", name)["items"]]

    server.stop(how)
    time.sleep(1.0)
    assert all(psutil.pid_exists(p) for p in pids), "workers must outlive the server"
    server.start()

    job = server.wait_phase(name, {"Succeeded", "Failed"}, timeout=60)
    assert job["phase"] == "Succeeded", job["message"]
    assert any(e["reason"] == "Adopted" for e in job["events"])
    assert [w["pid"] for w in job["workers"]] == pids  # the same processes, not restarted ones
    log = server.cli("logs", name, "-w", "trainer-0").stdout
    assert "step 13" in log and log.rstrip().endswith("done")


def test_vanished_workers_fail_the_job(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "victim", {"count.py": COUNTDOWN})
    server.cli("submit", str(pkg), "--name", "victim", "--entry", "python count.py 100", "--cpu", "100m")
    server.wait_phase("victim", {"Running"}, timeout=30)
    (worker,) = server.json("get", "workers", "victim")["items"]

    server.stop()
    os.killpg(worker["pid"], signal.SIGKILL)  # the launcher dies too: no exit status is written
    deadline = time.monotonic() + 10
    while psutil.pid_exists(worker["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    server.start()

    job = server.wait_phase("victim", {"Failed", "Succeeded"}, timeout=30)
    assert job["phase"] == "Failed"
    assert "vanished" in job["message"] and "trainer-0" in job["message"]
    assert job["workers"][0]["state"] == "Lost"
