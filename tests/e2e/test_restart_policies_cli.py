"""Restart policies through the real CLI: ``submit --restart-policy``, ``logs --previous``, ``describe``."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import Server, write_package

FLAKY = """
import os, sys
from pathlib import Path

counter = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"]) / "runs"
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
print(f"run {n} restart={os.environ['PADDLECLOUD_RESTART']}")
sys.exit(3 if n < 2 else 0)
"""


def test_submit_with_a_restart_policy_restarts_the_trainer_until_it_succeeds(
    server: Server, tmp_path: Path
) -> None:
    pkg = write_package(tmp_path / "flaky", {"main.py": FLAKY})
    r = server.cli(
        "submit", str(pkg), "--name", "flaky-cli", "--entry", "python main.py", "--cpu", "100m",
        "--restart-policy", "OnFailure", "--max-restarts", "2", "--restart-backoff", "0.2", "--wait",
    )  # fmt: skip
    assert "Succeeded" in r.stderr
    job = server.job("flaky-cli")
    assert job["workers"][0]["restarts"] == 2
    restarts = [e["message"] for e in job["events"] if e["reason"] == "WorkerRestarted"]
    assert [m.split(";")[0] for m in restarts] == ["trainer-0 failed with exit code 3"] * 2
    assert server.cli("logs", "flaky-cli", "-w", "trainer-0").stdout == "run 2 restart=2\n"
    assert server.cli("logs", "flaky-cli", "-w", "trainer-0", "--previous").stdout == "run 1 restart=1\n"
    described = server.cli("describe", "flaky-cli").stdout
    assert "trainers OnFailure, pservers OnFailure; at most 2 per job" in described
    assert "RESTARTS" in described


def test_the_restart_limit_fails_the_job_with_its_message(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "doomed", {"main.py": "import sys\nsys.exit(3)\n"})
    r = server.cli(
        "submit", str(pkg), "--name", "doomed-cli", "--entry", "python main.py", "--cpu", "100m",
        "--restart-policy", "OnFailure", "--max-restarts", "1", "--restart-backoff", "0", "--wait",
        check=False,
    )  # fmt: skip
    assert r.returncode == 1
    job = server.job("doomed-cli")
    assert job["phase"] == "Failed"
    assert "trainer-0 failed with exit code 3; restart limit 1 reached" in job["message"]
