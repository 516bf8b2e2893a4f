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
from tests.kube.test_cli_session import Session

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FIT_A_LINE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line"
TORCH_DDP = FIT_A_LINE.parent / "torch_ddp"
#: rank 0's progress line (``PROGRESS_EVERY``) in a group of all 3 trainers
#: fit_a_line's passes: enough that the node is killed while trainer-1 still trains (on a loaded
#: machine 5 passes could end between seeing its first pass and the kill)
PASSES = 12
STEP_3 = re.compile(r"^step \d+ epoch \d+ world 3 ", re.M)


def _squeue_comments() -> str:
    return subprocess.run(["squeue", "-h", "-o", "%k"], capture_output=True, text=True, check=True).stdout


def _processes_of(base: Path) -> list[str]:
    """Processes whose command line names the platform's data dir (the jobs' launchers, programs)."""
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True).stdout
    rows = (ln.strip().split(None, 1) for ln in out.splitlines() if str(base) in ln)
    return [args for stat, args in rows if not stat.startswith("Z") and "paddlecloud up" not in args]


def _log(s: Session, job: str, worker: dict[str, Any]) -> Path:
    """The worker's current log on the shared disk (the API names it, never a path)."""
    return s.base / "data" / "slurm" / "jobs" / "default" / job / "logs" / str(worker["log"])


def fit_a_line(s: Session, tmp_path: Path, name: str, *extra: str) -> list[str]:
    """Its data set in PFS, and the submit arguments: 2 pservers of 1 CPU, 2 trainers of 3 CPUs (so
    one per node), 8 shards leased for PASSES passes."""
    subprocess.run([sys.executable, str(FIT_A_LINE / "data.py"), str(tmp_path / "dataset")], check=True)
    s.cli("pfs", "cp", "-r", "-q", str(tmp_path / "dataset"), "pfs:data/fit-a-line")
    return [
        "submit", str(FIT_A_LINE), "--name", name, "--framework", "paddle-ps", "--entry", "python train.py",
        "--pservers", "2", "--trainers", "2", "--cpu", "3", "--pscpu", "1", "--input", "pfs:data/fit-a-line",
        "--tasks-from-input", "--passes", str(PASSES), *extra,
    ]  # fmt: skip


def test_elastic_torch_across_slurm_nodes_survives_a_node_failure(
    slurm: dict[str, str], slurm_sh: Callable[..., Any], tmp_path: Path
) -> None:
    """The elastic torch example: 3 trainers of ``--cpu 2`` (so on at least 2 nodes) as torchrun
    agents around the platform's rendezvous store, itself a Slurm job. Mid-training the node of a
    trainer fails (its slurmd and every process there SIGKILLed): Slurm reports NODE_FAIL, the
    trainer restarts on another node, the job resumes from its checkpoint, reaches its accuracy and
    succeeds; nothing of it is left in squeue and no process of it on the machine."""
    s = Session(tmp_path / "platform", ["--backend", "slurm"])
    try:
        s.cli(
            "submit", str(TORCH_DDP), "--name", "elastic", "--framework", "torch",
            "--entry", "torchrun train.py", "--trainers", "3", "--min-instance", "1", "--max-instance", "3",
            "--cpu", "2", "--restart-policy", "OnFailure", "--env", "EPOCHS=30", "--env", "PROGRESS_EVERY=10",
        )  # fmt: skip

        def workers() -> dict[str, dict[str, Any]]:
            return {w["name"]: w for w in s.json("get", "workers", "elastic")["items"]}

        def steps() -> bool:  # rank 0 prints step lines once a group of every trainer trains
            logs = [_log(s, "elastic", w) for w in workers().values() if w["role"] == "trainer"]
            return any(log.is_file() and STEP_3.search(log.read_text()) for log in logs)

        wait_for("training with 3 trainers", steps, timeout=420)
        seen = workers()
        nodes = {seen[f"trainer-{i}"]["node"] for i in range(3)}
        print("nodes:", {n: w["node"] for n, w in seen.items()}, "endpoints:", {
            n: w["endpoint"] for n, w in seen.items()})  # fmt: skip
        assert len(nodes) >= 2 and nodes <= {"n1", "n2", "n3"}, seen
        store = seen["rendezvous-0"]["node"]
        victim_worker = next(
            n for n, w in sorted(seen.items()) if w["role"] == "trainer" and w["node"] != store
        )
        victim = seen[victim_worker]["node"]
        try:
            slurm_sh("kill-node", victim)

            def phase() -> str:
                return str(s.json("describe", "elastic")["phase"])

            wait_for("the job to end", lambda: phase() in ("Succeeded", "Failed"), timeout=420)
        finally:
            slurm_sh("revive-node", victim)
        job = s.json("describe", "elastic")
        assert job["phase"] == "Succeeded", job["message"]
        assert any("NODE_FAIL" in e["message"] for e in job["events"]), job["events"]
        after = workers()[victim_worker]
        assert after["node"] != victim and after["restarts"] >= 1, after
        out = s.cli("logs", "elastic")
        acc = re.findall(r"final accuracy ([0-9.]+)$", out, re.M)
        assert acc and float(acc[-1]) >= 0.97, out[-3000:]
        print("final accuracy", acc[-1], "victim", victim_worker, "on", victim)
        assert "paddlecloud:default/elastic" not in _squeue_comments()
        wait_for("no process of the job left", lambda: not _processes_of(s.base), timeout=30)
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
        victim, log = trainer1()["node"], _log(s, "fit", trainer1())

        def training() -> bool:  # polled fast: each pass takes a second or so
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
        assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", PASSES)] * 8
        m = re.search(r"final loss ([0-9.]+)$", s.cli("logs", "fit", "-w", "trainer-0"), re.M)
        assert m and float(m.group(1)) < 0.05, m  # noise floor 0.01; initial ~20
        where = {w["name"]: (w["node"], w["endpoint"]) for w in job["workers"]}
        print("final loss", m.group(1), "workers:", where)
        assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
        assert "paddlecloud:default/fit" not in _squeue_comments()
        wait_for("no process of the job left", lambda: not _processes_of(s.base), timeout=30)
    finally:
        s.close()
