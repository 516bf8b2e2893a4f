"""The examples on ``paddlecloud up --backend slurm`` across emulated nodes: examples/fit_a_line
(2 pservers + 2 trainers, PaddlePaddle parameter-server mode, leasing its 8 shards from the task
master) and the elastic torch example (torchrun agents around the platform's rendezvous store). Each
builds its environment on the shared directory, runs its trainers on at least two nodes, and
reaches its stated loss / accuracy."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kube.conftest import wait_for
from tests.kube.test_cli_session import PADDLECLOUD, Session

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FIT_A_LINE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line"
TORCH_DDP = FIT_A_LINE.parent / "torch_ddp"


def fit_a_line(s: Session, tmp_path: Path, name: str, *extra: str) -> list[str]:
    """Its data set in PFS, and the submit arguments: 2 pservers of 1 CPU, 2 trainers of 3 CPUs (so
    one per node), 8 shards leased for 5 passes."""
    subprocess.run([sys.executable, str(FIT_A_LINE / "data.py"), str(tmp_path / "dataset")], check=True)
    s.cli("pfs", "cp", "-r", "-q", str(tmp_path / "dataset"), "pfs:data/fit-a-line")
    return [
        "submit", str(FIT_A_LINE), "--name", name, "--framework", "paddle-ps", "--entry", "python train.py",
        "--pservers", "2", "--trainers", "2", "--cpu", "3", "--pscpu", "1", "--input", "pfs:data/fit-a-line",
        "--tasks-from-input", "--passes", "5", *extra,
    ]  # fmt: skip


def test_fit_a_line_across_slurm_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        r = subprocess.run(
            [PADDLECLOUD, *fit_a_line(s, tmp_path, "fit-a-line", "--wait")],
            env=s.env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        job = s.json("describe", "fit-a-line")
        assert job["phase"] == "Succeeded"
        m = re.search(r"^\[trainer-0\] final loss ([0-9.]+)$", r.stdout, re.M)
        assert m and float(m.group(1)) < 0.05, r.stdout[-3000:]  # noise floor 0.01; initial ~20
        print("final loss", m.group(1))
        workers = {w["name"]: w for w in job["workers"]}
        trainer_nodes = {workers[f"trainer-{i}"]["node"] for i in range(2)}
        assert len(trainer_nodes) == 2 and trainer_nodes <= {"n1", "n2", "n3"}, workers  # 3 CPUs each
        print("nodes:", {n: w["node"] for n, w in workers.items()}, "endpoints:", {
            n: w["endpoint"] for n, w in workers.items()})  # fmt: skip
        tasks = s.json("get", "tasks", "fit-a-line")
        assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", 5)] * 8
        assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
    finally:
        s.close()


def test_elastic_torch_across_slurm_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    """The elastic torch example: 3 trainers of ``--cpu 2`` (so on at least 2 nodes) as torchrun
    agents around the platform's rendezvous store, itself a Slurm job; it reaches its accuracy."""
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        r = subprocess.run(
            [PADDLECLOUD, "submit", str(TORCH_DDP), "--name", "elastic", "--framework", "torch",
             "--entry", "torchrun train.py", "--trainers", "3", "--min-instance", "1", "--max-instance", "3",
             "--cpu", "2", "--wait"],
            env=s.env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        job = s.json("describe", "elastic")
        workers = {w["name"]: w for w in job["workers"]}
        nodes = {workers[f"trainer-{i}"]["node"] for i in range(3)}
        print("nodes:", {n: w["node"] for n, w in workers.items()}, "endpoints:", {
            n: w["endpoint"] for n, w in workers.items()})  # fmt: skip
        assert len(nodes) >= 2 and nodes <= {"n1", "n2", "n3"}, workers
        acc = re.findall(r"final accuracy ([0-9.]+)$", r.stdout, re.M)
        assert acc and float(acc[-1]) >= 0.97, r.stdout[-3000:]
        print("final accuracy", acc[-1])
    finally:
        s.close()


def test_fit_a_line_survives_the_failure_of_a_trainers_node(
    slurm: dict[str, str], slurm_sh: Callable[..., Any], tmp_path: Path
) -> None:
    """The node of trainer-1 fails mid-run (its slurmd and every process there SIGKILLed): Slurm
    reports NODE_FAIL, trainer-1 is restarted on another node, every shard is trained exactly once
    per pass and the job succeeds; nothing of it is left in squeue."""
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        s.cli(*fit_a_line(s, tmp_path, "fit", "--restart-policy", "OnFailure"))

        def trainer1() -> dict[str, Any]:
            return next(w for w in s.json("get", "workers", "fit")["items"] if w["name"] == "trainer-1")

        wait_for("trainer-1 running", lambda: trainer1()["state"] == "Running", timeout=300)
        victim, log = trainer1()["node"], Path(trainer1()["log"])

        def training() -> bool:  # polled fast: the 5 passes take seconds
            return log.is_file() and re.search(r"^pass [1-3]:", log.read_text(), re.M) is not None

        deadline = time.monotonic() + 120
        while not training():
            assert time.monotonic() < deadline, "trainer-1 did not start training"
            time.sleep(0.02)
        try:
            slurm_sh("kill-node", victim)

            def phase() -> str:
                return str(s.json("describe", "fit")["phase"])

            wait_for("the job to end", lambda: phase() in ("Succeeded", "Failed"), timeout=300)
        finally:
            slurm_sh("revive-node", victim)
        job = s.json("describe", "fit")
        assert job["phase"] == "Succeeded", job["message"]
        assert any("NODE_FAIL" in e["message"] for e in job["events"]), job["events"]
        t1 = trainer1()
        assert t1["node"] != victim and t1["restarts"] == 1, t1
        tasks = s.json("get", "tasks", "fit")
        assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", 5)] * 8
        out = subprocess.run(["squeue", "-h", "-o", "%k"], capture_output=True, text=True, check=True).stdout
        assert "paddlecloud:default/fit" not in out
    finally:
        s.close()
