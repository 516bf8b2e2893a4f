"""Acceptance: our elastic job on a Slurm cluster shared with other users' plain ``sbatch`` work.

Another user's job takes two of the three nodes; our elastic job (1..3 trainers of 2 CPUs) starts
with what is left, says which job holds the rest (Slurm's name for it: user, id, name, CPUs), and
grows to its maximum once that job ends. Real slurmctld + slurmd (``scripts/ensure-slurm.sh``)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.kube.conftest import wait_for
from tests.kube.test_cli_session import TRAIN, Session

pytestmark = pytest.mark.slurm


def _squeue(*args: str) -> str:
    return subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, check=True).stdout


def test_foreign_load_our_elastic_job_starts_smaller_names_it_and_grows_back(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    big = subprocess.run(
        ["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "-c4", "-J", "big-sim", f"--chdir={tmp_path}",
         "-o", "/dev/null", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    package = tmp_path / "hello"
    package.mkdir()
    (package / "train.py").write_text(TRAIN)
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        wait_for("the other user's job", lambda: _squeue("-j", big, "-o", "%T").strip() == "RUNNING", 30)
        held = set(_squeue("-j", big, "-o", "%N").strip().strip("n[]").replace("-", ",").split(","))
        s.cli(
            "submit", str(package), "--name", "el", "--entry", "python train.py", "--trainers", "3",
            "--min-instance", "1", "--max-instance", "3", "--cpu", "2", "--memory", "256Mi",
        )  # fmt: skip

        def running() -> list[dict[str, Any]]:
            return [w for w in s.json("get", "workers", "el")["items"] if w["state"] == "Running"]

        wait_for("two trainers running", lambda: len(running()) == 2, timeout=60)
        free = {w["node"] for w in running()}
        assert len(free) == 1 and free.isdisjoint({f"n{i}" for i in held}), (free, held)
        job = s.json("describe", "el")
        admitted = next(e["message"] for e in job["events"] if e["reason"] == "Admitted")
        print("admitted:", admitted)
        assert "admitted with 2 trainers" in admitted and "3 wanted" in admitted, admitted
        assert f"job {big} (big-sim, 8 CPUs)" in admitted, admitted  # the foreign job, by Slurm's name

        subprocess.run(["scancel", big], check=True)  # the other user's job ends
        wait_for("three trainers running", lambda: len(running()) == 3, timeout=90)
        job = s.json("describe", "el")
        resized = [e["message"] for e in job["events"] if e["reason"] == "Resized"]
        print("resized:", resized)
        assert resized and resized[-1].startswith("trainers 2 -> 3"), resized
        assert len({w["node"] for w in running()}) >= 2
        s.cli("kill", "el", "--grace", "1")
        wait_for("nothing of ours in squeue", lambda: "paddlecloud:default/el" not in _squeue("-o", "%k"), 30)
    finally:
        subprocess.run(["scancel", big], check=False)
        s.close()
