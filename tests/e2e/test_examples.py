"""The shipped examples run as real distributed jobs and converge (they build their environments)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT, Server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_fit_a_line_paddle_parameter_server(server: Server) -> None:
    r = server.cli(
        "submit", str(ROOT / "examples" / "fit_a_line"), "--name", "fit-a-line", "--framework", "paddle-ps",
        "--entry", "python train.py", "--pservers", "2", "--trainers", "2", "--wait", timeout=900,
    )  # fmt: skip
    job = server.job("fit-a-line")
    assert job["phase"] == "Succeeded"
    events = [e["reason"] for e in job["events"]]
    assert events.index("PserversReady") < events.index("Running")  # trainers start after pservers listen
    states = {w["name"]: w["state"] for w in job["workers"]}
    assert states == {"pserver-0": "Stopped", "pserver-1": "Stopped",
                      "trainer-0": "Succeeded", "trainer-1": "Succeeded"}  # fmt: skip
    m = re.search(r"^\[trainer-0\] final loss ([0-9.]+)$", r.stdout, re.M)
    assert m, r.stdout[-3000:]
    assert float(m.group(1)) < 0.05  # noise floor 0.01; the initial loss is ~20
    assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()


def test_torch_ddp(server: Server) -> None:
    r = server.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "torch-ddp", "--framework", "torch",
        "--entry", "python train.py", "--trainers", "2", "--cpu", "500m", "--wait", timeout=900,
    )  # fmt: skip
    job = server.job("torch-ddp")
    assert job["phase"] == "Succeeded", job["message"]
    acc = re.search(r"^\[trainer-0\] final accuracy ([0-9.]+)$", r.stdout, re.M)
    assert acc, r.stdout[-3000:]
    assert float(acc.group(1)) >= 0.97
    assert (Path(job["output_dir"]) / "model.pt").is_file()
