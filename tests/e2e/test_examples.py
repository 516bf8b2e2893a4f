"""The shipped examples run as real distributed jobs and converge (they build their environments)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, Server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


FIT_A_LINE = ROOT / "examples" / "fit_a_line"


def fit_a_line_data(server: Server, tmp_path: Path) -> str:
    """The example's data set, 8 shard files, in PFS (as `make demo` puts it there)."""
    if not server.cli("pfs", "stat", "pfs:data/fit-a-line", check=False).returncode:
        return "pfs:data/fit-a-line"
    subprocess.run([sys.executable, str(FIT_A_LINE / "data.py"), str(tmp_path / "dataset")], check=True)
    server.cli("pfs", "cp", "-r", "-q", str(tmp_path / "dataset"), "pfs:data/fit-a-line")
    return "pfs:data/fit-a-line"


def submit_fit_a_line(server: Server, name: str, data: str, *extra: str) -> list[str]:
    return [
        "submit", str(FIT_A_LINE), "--name", name, "--framework", "paddle-ps", "--entry", "python train.py",
        "--pservers", "2", "--trainers", "2", "--input", data, "--tasks-from-input", "--passes", "5", *extra,
    ]  # fmt: skip


def assert_every_shard_done_once_per_pass(server: Server, name: str, passes: int = 5) -> None:
    tasks = server.json("get", "tasks", name)
    assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", passes)] * 8
    assert tasks["summary"]["finished"]


def test_fit_a_line_paddle_parameter_server(server: Server, tmp_path: Path) -> None:
    data = fit_a_line_data(server, tmp_path)
    r = server.cli(*submit_fit_a_line(server, "fit-a-line", data, "--wait"), timeout=900)
    job = server.job("fit-a-line")
    assert job["phase"] == "Succeeded"
    events = [e["reason"] for e in job["events"]]
    assert events.index("ServersReady") < events.index("Running")  # trainers start after pservers listen
    states = {w["name"]: w["state"] for w in job["workers"]}
    assert states == {"pserver-0": "Stopped", "pserver-1": "Stopped",
                      "trainer-0": "Succeeded", "trainer-1": "Succeeded"}  # fmt: skip
    m = re.search(r"^\[trainer-0\] final loss ([0-9.]+)$", r.stdout, re.M)
    assert m, r.stdout[-3000:]
    assert float(m.group(1)) < 0.05  # noise floor 0.01; the initial loss is ~20
    assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
    assert_every_shard_done_once_per_pass(server, "fit-a-line")


def test_fit_a_line_loses_nothing_when_a_trainer_is_killed(server: Server, tmp_path: Path) -> None:
    """SIGKILL trainer-1 in the middle of the run: its shard goes to trainer-0 at once, the restart
    policy brings trainer-1 back (it rejoins: no barriers between trainers), every shard is trained
    once per pass, and the model converges as in an undisturbed run."""
    data = fit_a_line_data(server, tmp_path)
    server.cli(*submit_fit_a_line(server, "fit-a-line-kill", data, "--restart-policy", "OnFailure"))
    server.wait_phase("fit-a-line-kill", {"Running"}, timeout=900)
    victim = next(
        w for w in server.json("get", "workers", "fit-a-line-kill")["items"] if w["name"] == "trainer-1"
    )
    deadline = time.monotonic() + 120
    while (
        not re.search(r"^pass [1-3]:", server.log_file("fit-a-line-kill", victim).read_text(), re.M)
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    os.killpg(victim["pid"], signal.SIGKILL)
    job = server.wait_phase("fit-a-line-kill", {"Succeeded", "Failed"}, timeout=300)
    assert job["phase"] == "Succeeded", job["message"]
    assert any(e["reason"] == "WorkerRestarted" for e in job["events"])
    m = re.search(
        r"^final loss ([0-9.]+)$", server.cli("logs", "fit-a-line-kill", "-w", "trainer-0").stdout, re.M
    )
    assert m and float(m.group(1)) < 0.02  # undisturbed: 0.0100; noise floor 0.01
    assert_every_shard_done_once_per_pass(server, "fit-a-line-kill")
    assert (
        sum(t["leases"] for t in server.json("get", "tasks", "fit-a-line-kill")["items"]) >= 41
    )  # a re-lease


@pytest.mark.parametrize("entry", ["python train.py", "torchrun train.py"])
def test_torch_ddp(server: Server, entry: str) -> None:
    """A fixed-size torch job forms one world of its trainers, started by python or by torchrun
    (issue 25: under torchrun each trainer was a world of 1, training its own copy)."""
    name = f"torch-ddp-{entry.split()[0]}"
    r = server.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", name, "--framework", "torch",
        "--entry", entry, "--trainers", "2", "--cpu", "500m", "--wait", timeout=900,
    )  # fmt: skip
    job = server.job(name)
    assert job["phase"] == "Succeeded", job["message"]
    for rank in (0, 1):
        assert re.search(rf"^\[trainer-{rank}\] rank {rank}/2 started", r.stdout, re.M), r.stdout[-3000:]
    acc = re.search(r"^\[trainer-0\] final accuracy ([0-9.]+)$", r.stdout, re.M)
    assert acc, r.stdout[-3000:]
    assert float(acc.group(1)) >= 0.97
    assert (Path(job["output_dir"]) / "model.pt").is_file()


def _epoch_losses(text: str) -> list[float]:
    # one worker's lines come unprefixed, several workers' with their names
    return [float(x) for x in re.findall(r"^(?:\[trainer-0\] )?epoch \d+ loss ([0-9.]+)$", text, re.M)]


def test_paddle_collective_trains_as_one_process_does(server: Server) -> None:
    """examples/paddle_collective (Paddle 3.x, fleet data parallel, gloo on CPU) on 2 trainers and on
    1: both succeed, the loss goes down, and the 2 trainers make the updates 1 process makes (the
    same global batch, gradients all-reduced): the same loss every epoch."""
    runs, outs = {}, {}
    for trainers in (2, 1):
        name = f"paddle-collective-{trainers}"
        r = server.cli(
            "submit", str(ROOT / "examples" / "paddle_collective"), "--name", name,
            "--framework", "paddle-collective", "--entry", "python train.py", "--trainers", str(trainers),
            "--cpu", "500m", "--wait", timeout=900,
        )  # fmt: skip
        job = server.job(name)
        assert job["phase"] == "Succeeded", (job["message"], r.stdout[-3000:])
        assert (Path(job["output_dir"]) / "model.pdparams").is_file()
        runs[trainers], outs[trainers] = _epoch_losses(r.stdout), r.stdout
        acc = re.search(r"^(?:\[trainer-0\] )?final accuracy ([0-9.]+)$", r.stdout, re.M)
        assert acc and float(acc.group(1)) >= 0.97, r.stdout[-3000:]
    assert re.search(r"^\[trainer-1\] rank 1/2 started", outs[2], re.M), outs[2][-3000:]  # one world
    two, one = runs[2], runs[1]
    assert len(two) == len(one) == 8 and two[-1] < two[0] / 10, runs
    assert two == pytest.approx(one, rel=1e-3), runs
