"""The private Slurm cluster of ``scripts/ensure-slurm.sh``: it runs multi-node jobs on distinct
emulated nodes, ``scancel`` leaves nothing behind, and a killed node goes DOWN and comes back."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

NODES = {"n1", "n2", "n3"}


def _run(*argv: str, timeout: float = 60) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)}: {proc.stderr}"
    return proc.stdout


def _wait(what: str, cond: Callable[[], bool], timeout: float) -> float:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.2)
    return time.monotonic() - t0


def _queued(name: str) -> list[str]:
    return _run("squeue", "-h", "-n", name, "-o", "%i %T").split()


def _node_state(node: str) -> str:
    return _run("sinfo", "-h", "-n", node, "-o", "%t").strip()


def _processes_with(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if marker in ln and not ln.lstrip().startswith("Z")]


def test_two_node_job_runs_one_task_per_distinct_node(slurm: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    _run(
        "sbatch", "--wait", "-N2", "-n2", f"--chdir={tmp_path}", f"--output={out}",
        "--wrap", "srun printenv SLURMD_NODENAME",
    )  # fmt: skip
    names = out.read_text().split()
    assert len(names) == 2 and len(set(names)) == 2 and set(names) <= NODES, names


def test_scancel_leaves_nothing(slurm: dict[str, str], tmp_path: Path) -> None:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    marker = f"sleep 3{uuid.uuid4().int % 1000:03d}"
    _run("sbatch", "-n1", "-J", name, f"--chdir={tmp_path}", "-o", "/dev/null", "--wrap", marker)
    _wait("running", lambda: "RUNNING" in _queued(name), 30)
    _wait("its process", lambda: bool(_processes_with(marker)), 10)
    _run("scancel", "-n", name)
    _wait("gone from squeue", lambda: not _queued(name), 30)
    _wait("no process left", lambda: not _processes_with(marker), 10)


def test_killed_node_goes_down_and_comes_back(
    slurm: dict[str, str], slurm_sh: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    marker = f"sleep 4{uuid.uuid4().int % 1000:03d}"
    jid = _run(
        "sbatch", "--parsable", "--no-requeue", "-n1", "-w", "n3", "-J", name, f"--chdir={tmp_path}",
        "-o", "/dev/null", "--wrap", marker,
    ).strip()  # fmt: skip
    _wait("its process", lambda: bool(_processes_with(marker)), 30)
    try:
        slurm_sh("kill-node", "n3")
        assert not _processes_with(marker), "the node's tasks outlived kill-node"
        took = _wait("n3 down", lambda: _node_state("n3").startswith("down"), 45)
        print(f"n3 DOWN {took:.1f} s after kill-node")
        state = _run("scontrol", "show", "job", jid)
        assert "JobState=NODE_FAIL" in state, state
    finally:
        slurm_sh("revive-node", "n3")
    assert _node_state("n3") == "idle"
