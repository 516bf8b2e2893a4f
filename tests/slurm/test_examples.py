"""The examples on ``paddlecloud up --backend slurm`` across emulated nodes: examples/fit_a_line
(2 pservers + 2 trainers, PaddlePaddle parameter-server mode, leasing its 8 shards from the task
master) and the elastic torch example (torchrun agents around the platform's rendezvous store). Each
builds its environment on the shared directory, runs its trainers on at least two nodes, and
reaches its stated loss / accuracy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube.test_cli_session import PADDLECLOUD, Session

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FIT_A_LINE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line"
TORCH_DDP = FIT_A_LINE.parent / "torch_ddp"


def test_fit_a_line_across_slurm_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        subprocess.run([sys.executable, str(FIT_A_LINE / "data.py"), str(tmp_path / "dataset")], check=True)
        s.cli("pfs", "cp", "-r", "-q", str(tmp_path / "dataset"), "pfs:data/fit-a-line")
        r = subprocess.run(
            [PADDLECLOUD, "submit", str(FIT_A_LINE), "--name", "fit-a-line", "--framework", "paddle-ps",
             "--entry", "python train.py", "--pservers", "2", "--trainers", "2", "--cpu", "3", "--pscpu", "1",
             "--input", "pfs:data/fit-a-line", "--tasks-from-input", "--passes", "5", "--wait"],
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
