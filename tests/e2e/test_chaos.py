"""Chaos: trainers SIGKILLed at random every few seconds while the shipped examples train.

A ``random.Random(SEED)`` decides when (every ``GAP`` seconds, drawn) and which running trainer dies
(``rng.choice`` over the trainers ``get workers`` shows Running, by name): SIGKILL to its process
group, whose leader is the pid ``get workers`` shows; the platform then also kills what left that
group (torchrun's worker runs in a session of its own). ``KILLS`` kills per job, and the jobs allow
more restarts than that. Both jobs must finish Succeeded, as close to an undisturbed run as stated:

- the elastic PyTorch example (torchrun agents on the platform's rendezvous store, min 1, max 4,
  checkpoints every epoch): the killed agent is restarted by its OnFailure policy, the survivors'
  torchrun restarts the group, training resumes from the last checkpoint; every epoch is trained,
  the final accuracy is that of an undisturbed run within ``TORCH_TOLERANCE``, and no process of the
  job is left behind. The job may restart only its killed trainers (``--max-restarts KILLS``): a
  surviving agent that fails (once: ``DistStoreError`` waiting for the master address of a rank 0
  killed right after its round completed, ``runtime.torchelastic`` now joins the next round) spends
  a restart the job does not have;
- the PaddlePaddle PS example fit_a_line reading its 8 shards through the task master: the killed
  trainer's shard goes to another trainer, the trainer restarts and leases again; the task master
  shows every shard acknowledged done exactly once per pass and the final loss is within
  ``PS_TOLERANCE`` of an undisturbed run's.

Runs on the session's server (16 CPUs; the environments are shared with test_examples).
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import ROOT, Server
from .test_examples import FIT_A_LINE, fit_a_line_data

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

#: the kills' schedule (``PADDLECLOUD_CHAOS_SEED`` draws another: bench/chaos_repeat.py)
SEED = int(os.environ.get("PADDLECLOUD_CHAOS_SEED", "1"))
KILLS = 4
GAP = (2.0, 8.0)  # seconds between two kills, drawn uniformly: during training and mid-recovery

# Undisturbed runs, measured once (2026-11-23, this machine). Torch is deterministic and resumes at
# epoch boundaries: the chaos runs so far ended at exactly 0.9910 too. The async PS updates vary in
# the last digits (0.009950-0.009951 undisturbed and under chaos).
TORCH_EPOCHS = 120
TORCH_UNDISTURBED_ACCURACY = 0.9910  # elastic, 2 trainers, 120 epochs
TORCH_TOLERANCE = 0.021  # so >= 0.97, the example's own target
PS_PASSES = 30
PS_UNDISTURBED_LOSS = 0.0100  # 30 passes; the data's noise floor is 0.01
PS_TOLERANCE = 0.0100  # so < 0.02


def chaos(server: Server, name: str, rng: random.Random) -> list[str]:
    """Kill ``KILLS`` running trainers of job ``name``, one every ``GAP`` seconds; their names."""
    killed: list[str] = []
    deadline = time.monotonic() + 180
    while len(killed) < KILLS:
        assert time.monotonic() < deadline, f"only {killed} killed in 180 s"
        time.sleep(rng.uniform(*GAP))
        job = server.job(name)
        assert job["phase"] == "Running", (
            f"{name} is {job['phase']} after {len(killed)} kills: {job['message']}"
        )
        running = sorted(
            (w["name"], w["pid"])
            for w in job["workers"]
            if w["role"] == "trainer" and w["state"] == "Running" and w["pid"]
        )
        if not running:
            continue  # every trainer is restarting: draw the next gap
        victim, pid = rng.choice(running)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended between the look and the kill
            continue
        killed.append(victim)
    print(f"{name}: killed {', '.join(killed)}")
    return killed


def until_log(server: Server, name: str, pattern: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, server.cli("logs", name).stdout, re.M):
        assert time.monotonic() < deadline, f"{name} never logged {pattern!r}: {server.job(name)['message']}"
        time.sleep(0.5)


def all_runs(server: Server, name: str) -> str:
    """Every run of every trainer (a restarted trainer has one log per run), each line tagged."""
    logs = server.data_dir / "cluster" / "jobs" / "default" / name / "logs"
    return "".join(
        f"[{p.stem}] {line}\n"
        for p in sorted(logs.glob("trainer-*.log"))
        for line in p.read_text().splitlines()
    )


def restarts(job: dict[str, Any]) -> int:
    return sum(1 for e in job["events"] if e["reason"] == "WorkerRestarted")


def test_elastic_torch_survives_random_trainer_kills(server: Server) -> None:
    name = "chaos-torch"
    # 6 CPUs per trainer: the 16-CPU node keeps the job at 2 trainers
    server.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", name, "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "2", "--min-instance", "1", "--max-instance", "4",
        "--cpu", "6", "--max-restarts", str(KILLS), "--env", f"EPOCHS={TORCH_EPOCHS}",
    )  # fmt: skip
    server.wait_phase(name, {"Running"}, timeout=600)
    until_log(server, name, r"\] epoch \d+ loss")  # training has begun
    started = time.monotonic()
    killed = chaos(server, name, random.Random(SEED))
    job = server.wait_phase(name, {"Succeeded", "Failed"}, timeout=300)
    print(
        f"{name}: {job['phase']} {time.monotonic() - started:.0f} s after training began; "
        f"{restarts(job)} restarts"
    )
    restarted = [e["message"] for e in job["events"] if e["reason"] == "WorkerRestarted"]
    assert job["phase"] == "Succeeded", (job["message"], restarted)
    # every killed agent came back (OnFailure), and no surviving one failed
    assert restarts(job) == len(killed), restarted

    logs = all_runs(server, name)
    acc = re.findall(r"final accuracy ([0-9.]+)$", logs, re.M)
    assert acc and abs(float(acc[-1]) - TORCH_UNDISTURBED_ACCURACY) <= TORCH_TOLERANCE, logs[-3000:]
    assert re.search(r"resumed from checkpoint after epoch \d+", logs), logs[-3000:]
    epochs = Counter(int(e) for e in re.findall(r"\] epoch (\d+) loss", logs))
    assert set(epochs) == set(range(TORCH_EPOCHS)), sorted(set(range(TORCH_EPOCHS)) - set(epochs))
    assert (Path(job["output_dir"]) / "model.pt").is_file()
    assert not _processes_in(server.data_dir / "cluster" / "jobs" / "default" / name)


def test_ps_job_survives_random_trainer_kills_and_loses_no_task(server: Server, tmp_path: Path) -> None:
    name = "chaos-ps"
    data = fit_a_line_data(server, tmp_path)
    server.cli(
        "submit", str(FIT_A_LINE), "--name", name, "--framework", "paddle-ps", "--entry", "python train.py",
        "--pservers", "2", "--trainers", "2", "--input", data, "--tasks-from-input",
        "--passes", str(PS_PASSES), "--task-timeout", "30", "--restart-policy", "OnFailure",
        "--max-restarts", "20",
    )  # fmt: skip
    server.wait_phase(name, {"Running"}, timeout=600)
    until_log(server, name, r"\] pass 0:")  # the trainers are leasing shards
    killed = chaos(server, name, random.Random(SEED))
    job = server.wait_phase(name, {"Succeeded", "Failed"}, timeout=300)
    assert job["phase"] == "Succeeded", job["message"]
    assert restarts(job) >= len(killed)

    tasks = server.json("get", "tasks", name)
    assert tasks["summary"]["finished"], tasks["summary"]
    assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", PS_PASSES)] * 8
    leases = sum(t["leases"] for t in tasks["items"])
    m = re.search(r"^final loss ([0-9.]+)$", server.cli("logs", name, "-w", "trainer-0").stdout, re.M)
    assert m, server.cli("logs", name, "-w", "trainer-0").stdout[-3000:]
    print(f"{name}: {leases} leases for {8 * PS_PASSES} shard-passes; final loss {m.group(1)}")
    assert abs(float(m.group(1)) - PS_UNDISTURBED_LOSS) < PS_TOLERANCE


def _processes_in(job_dir: Path) -> list[str]:
    """Live processes whose working directory is inside ``job_dir`` (none once the job ended)."""
    found = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline", "status"]):
        cwd = p.info.get("cwd") or ""
        if cwd.startswith(str(job_dir)) and p.info.get("status") != psutil.STATUS_ZOMBIE:
            found.append(f"{p.info['pid']} {' '.join(p.info.get('cmdline') or [])} in {cwd}")
    return found
