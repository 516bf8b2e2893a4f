"""Adaptive batch size through the whole platform: the torch example in adaptive mode starts on 1 of 4
CPUs, reports its gradient noise scale and step time, and when the job holding the other 3 ends the
scheduler grows it to 4 trainers with a larger global batch; the job resumes from its checkpoint at
the new batch with the AdaScale gain and still reaches its accuracy target. ``describe`` shows the
noise scale, the assigned batch and the LR gain.

A server of its own with one 4-CPU virtual node and the default (elastic) policy.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Server, write_package

pytestmark = pytest.mark.timeout(900)  # a loaded machine builds the torch environment slowly

INIT = 32
#: epochs at the initial batch: long enough to report on one trainer and to be grown
EPOCHS = 30
#: epochs of the job that is grown: 0.2-0.5 s each on one trainer here, so 20-50 s for the 3 new trainers
#: to start (torch's import, under load) and join before the one trainer would finish alone (with 30,
#: two CPU hogs beside the tests made it finish first)
GROW_EPOCHS = 100


def _adaptive(srv: Server, name: str) -> dict[str, Any]:
    state: dict[str, Any] = srv.job(name)["adaptive"]
    return state


def _batch_events(job: dict[str, Any]) -> list[str]:
    return [e["message"] for e in job["events"] if e["reason"] == "BatchSize"]


def _until(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def test_the_adaptive_example_trains_at_the_batch_the_scheduler_grows(small: Server, tmp_path: Path) -> None:
    blocker = write_package(tmp_path / "blocker", {"main.py": "import time\ntime.sleep(600)\n"})
    small.cli("submit", str(blocker), "--name", "hold3", "--entry", "python main.py", "--trainers", "3",
              "--cpu", "1")  # fmt: skip
    small.wait_phase("hold3", {"Running"})
    small.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "ada", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "1", "--min-instance", "1", "--max-instance", "4",
        "--cpu", "1", "--batch-size", str(INIT), "--adaptive-batch-size", f"{INIT}:1024",
        "--env", "ADAPTIVE=1", "--env", f"EPOCHS={GROW_EPOCHS}",
    )  # fmt: skip
    small.wait_phase("ada", {"Running"}, timeout=600)  # builds the torch environment first
    # one trainer reports what it measures (the first report ~2 s after it starts training)
    _until("a report", lambda: _adaptive(small, "ada")["reports"] >= 1, timeout=120)
    one = _adaptive(small, "ada")
    # the scheduler may already have re-batched it on its one trainer (a batch-only resize, applied
    # by the workers at a step boundary, without a restart)
    assert one["batch_size"] >= INIT and one["noise_scale"] is not None and one["noise_scale"] > 0, one
    small.cli("kill", "hold3", "--grace", "1")
    _until("4 trainers", lambda: small.job("ada")["trainers"]["desired"] == 4, timeout=120)
    job = small.wait_phase("ada", {"Succeeded", "Failed"}, timeout=400)
    assert job["phase"] == "Succeeded", job["message"]

    state = job["adaptive"]
    events = _batch_events(job)
    # the batch grew: with the trainers, or already on the one trainer (then, at its bound, a grow to 4
    # keeps it and says so in its Resized event only: a BatchSize event is written when the batch changes)
    grown = [
        int(m[1]) for m in (re.match(r"global batch \d+ -> (\d+) on \d trainers", e) for e in events) if m
    ]
    assert grown and grown[-1] > INIT, events
    assert (state["batch_size"], state["trainers"]) == (grown[-1], 4), (state, events)
    resized = [e["message"] for e in job["events"] if e["reason"] == "Resized"]
    assert any(re.match(r"trainers \d -> 4", m) for m in resized), resized

    logs = "".join(
        p.read_text()
        for p in (small.data_dir / "cluster" / "jobs" / "default" / "ada" / "logs").glob("trainer-*.log")
    )
    acc = re.findall(r"final accuracy ([0-9.]+)$", logs, re.M)
    assert acc and float(acc[-1]) >= 0.97, logs[-3000:]
    # the worker group restarted at the new batch, split over 4 ranks, with the AdaScale gain
    at = re.findall(r"global batch (\d+) \(assigned (\d+) from the api.*on 4 replicas.*gain ([0-9.]+)", logs)
    assert at and int(at[-1][1]) == state["batch_size"] and float(at[-1][2]) > 1.0, logs[-3000:]
    assert state["lr_gain"] is not None and state["lr_gain"] > 1.0, state
    assert "resumed from checkpoint" in logs

    text = small.cli("describe", "ada").stdout
    line = next(x for x in text.splitlines() if x.lstrip().startswith("Adaptive"))
    assert f"global batch {state['batch_size']} on 4 trainers" in line, text
    assert re.search(r"noise scale [0-9,]+, lr gain [0-9.]+", line), line


def test_a_batch_only_resize_is_applied_during_the_training_without_a_restart(small: Server) -> None:
    """Two fixed trainers (no torchrun, no membership change possible): once the job reports, the
    scheduler re-batches it on its 2 trainers; the workers read the new batch, agree on it and train
    at it from a step boundary on, with no new worker run (same processes, no restart)."""
    small.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "live", "--framework", "torch",
        "--entry", "python train.py", "--trainers", "2", "--cpu", "1", "--batch-size", str(INIT),
        "--adaptive-batch-size", f"{INIT}:1024", "--env", "ADAPTIVE=1", "--env", f"EPOCHS={EPOCHS}",
    )  # fmt: skip
    small.wait_phase("live", {"Running"}, timeout=600)  # builds the torch environment first

    def rebatched() -> bool:
        job = small.job("live")
        assert job["phase"] == "Running", job["message"]  # it must not end before the re-batch
        return bool(_batch_events(job))

    _until("a batch-only resize", rebatched, timeout=180)
    running = {w["name"]: (w["pid"], w["started_at"]) for w in small.job("live")["workers"]}
    job = small.wait_phase("live", {"Succeeded", "Failed"}, timeout=400)
    assert job["phase"] == "Succeeded", job["message"]

    batches = [re.match(r"global batch (\d+) -> (\d+) on 2 trainers", m) for m in _batch_events(job)]
    assert batches and all(batches), _batch_events(job)
    assigned = int(batches[0][2])  # type: ignore[index]
    assert assigned != INIT
    # no new worker run: the same two processes from start to end, never restarted
    assert {w["name"]: (w["pid"], w["started_at"]) for w in job["workers"]} == running
    assert all(w["restarts"] == 0 for w in job["workers"]), job["workers"]
    assert [e["reason"] for e in job["events"]].count("Admitted") == 1

    logs = small.data_dir / "cluster" / "jobs" / "default" / "live" / "logs"
    log = "".join(p.read_text() for p in sorted(logs.glob("trainer-0.*log")))  # rank 0's, every run
    assert log.count("rank 0/2 started") == 1, log[-3000:]
    # the batch trained at is the assigned one split evenly over the 2 ranks (49: 2 x 24)
    switched = re.findall(
        r"global batch (\d+) -> (\d+) after step \d+, without a restart: .*\(assigned (\d+) from the api", log
    )
    assert switched and switched[0] == (str(INIT), str(2 * round(assigned / 2)), str(assigned)), log[-3000:]
    # the last epoch trained at a batch the scheduler assigned (it may re-batch again after it)
    epochs = re.findall(r"progress [0-9.]+ global batch (\d+) \(assigned (\d+) from the api.*on 2 rep", log)
    assert epochs, log[-3000:]
    trained, at = int(epochs[-1][0]), int(epochs[-1][1])
    given = {int(b[2]) for b in batches if b}
    assert at in given and trained == 2 * round(at / 2), (epochs[-1], given, log[-3000:])
    acc = re.findall(r"final accuracy ([0-9.]+)$", log, re.M)
    assert acc and float(acc[-1]) >= 0.97, log[-3000:]
