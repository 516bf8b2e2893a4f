"""Acceptance: the CLI session of ``tests/kube/test_cli_session.py`` (submit, get jobs, get workers,
logs, describe, kill) on ``paddlecloud up --backend slurm`` against the real private Slurm cluster:
the workers are Slurm jobs on the emulated nodes, and ``kill`` leaves none of them in ``squeue``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.kube.conftest import wait_for
from tests.kube.test_cli_session import TRAIN, Session

pytestmark = pytest.mark.slurm


def _ours_in_squeue() -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %T %k"], capture_output=True, text=True, check=True
    ).stdout  # %k: the comment, paddlecloud:<user>/<job>
    return [ln for ln in out.splitlines() if "paddlecloud:default/hello" in ln]


def test_the_cli_session_on_slurm(slurm: dict[str, str], tmp_path: Path) -> None:
    package = tmp_path / "hello"
    package.mkdir()
    (package / "train.py").write_text(TRAIN)
    up = ["--backend", "slurm", "--slurm-partition", "debug", "--slurm-account", "pc-{user}"]
    s = Session(tmp_path / "platform", up)
    try:
        assert s.json("version")["server"]["backend"] == "slurm"
        s.cli(
            "submit", str(package), "--name", "hello", "--entry", "python train.py", "--pservers", "1",
            "--trainers", "2", "--cpu", "250m", "--memory", "256Mi", "--pscpu", "250m", "--psmemory", "256Mi",
        )  # fmt: skip

        def running() -> bool:
            jobs = {j["name"]: j for j in s.json("get", "jobs")["items"]}
            return jobs["hello"]["phase"] == "Running"

        wait_for("the job to run", running, timeout=60)
        table = s.cli("get", "jobs")
        assert "hello" in table and "Running" in table

        def all_running() -> bool:
            ws = s.json("get", "workers", "hello")["items"]
            return len(ws) == 3 and {w["state"] for w in ws} == {"Running"}

        wait_for("every worker running", all_running, timeout=60)
        workers = {w["name"]: w for w in s.json("get", "workers", "hello")["items"]}
        assert set(workers) == {"pserver-0", "trainer-0", "trainer-1"}
        assert {w["node"] for w in workers.values()} <= {"n1", "n2", "n3"}
        assert len(_ours_in_squeue()) == 3
        accounts = subprocess.run(["squeue", "-h", "-o", "%a %k"], capture_output=True, text=True).stdout
        assert {ln.split()[0] for ln in accounts.splitlines() if "default/hello" in ln} == {"pc-default"}
        every = wait_for(
            "every log", lambda: (out := s.cli("logs", "hello")).count("hello from") == 3 and out, timeout=30
        )
        assert "[pserver-0] hello from pserver-0" in every and "[trainer-1] hello from trainer-1" in every
        assert "hello" in s.cli("describe", "hello")
        s.cli("kill", "hello", "--grace", "1")
        (job,) = [j for j in s.json("get", "jobs", "-a")["items"] if j["name"] == "hello"]
        assert job["phase"] == "Killed"
        assert {w["state"] for w in s.json("get", "workers", "hello")["items"]} <= {"Stopped", "Succeeded"}
        wait_for("nothing of ours in squeue", lambda: not _ours_in_squeue(), timeout=30)
    finally:
        s.close()


SHORT = """\
import os, time
print("hello from " + os.environ["PADDLECLOUD_WORKER"], flush=True)
time.sleep(8)
"""


def test_a_server_sigkilled_mid_job_readopts_it_and_the_job_finishes(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    package = tmp_path / "short"
    package.mkdir()
    (package / "train.py").write_text(SHORT)
    base = tmp_path / "platform"
    first = Session(base, ["--backend", "slurm"])
    first.cli(
        "submit", str(package), "--name", "short", "--entry", "python train.py", "--trainers", "2",
        "--cpu", "250m", "--memory", "256Mi",
    )  # fmt: skip

    def phase(s: Session) -> str:
        (job,) = [j for j in s.json("get", "jobs", "-a")["items"] if j["name"] == "short"]
        return str(job["phase"])

    wait_for("the job to run", lambda: phase(first) == "Running", timeout=60)
    first.proc.kill()
    first.proc.wait(30)
    again = Session(base, ["--backend", "slurm"])
    try:
        wait_for("the job to succeed", lambda: phase(again) == "Succeeded", timeout=90)
        assert "Adopted" in again.cli("describe", "short")
        assert "hello from trainer-1" in again.cli("logs", "short", "-w", "trainer-1")
    finally:
        again.close()
