"""examples/fit_a_line (2 pservers + 2 trainers, PaddlePaddle parameter-server mode, leasing its 8
shards from the task master) on ``paddlecloud up --backend slurm`` across emulated nodes: it builds
its environment on the shared directory, its trainers run on two nodes, and it converges."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube.test_cli_session import PADDLECLOUD, Session

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FIT_A_LINE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line"


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
