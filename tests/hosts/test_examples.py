"""The examples across hosts of the bed, as a user runs them: the CLI on ``laptop`` against the server
on ``head`` (``up --backend slurm``), over HTTP only; every worker a Slurm batch job on c1..c3, in
its sandbox, built offline on head into the shared directory. examples/fit_a_line (2 pservers + 2
trainers, PaddlePaddle parameter-server mode, its 8 shards leased from the task master) and the
elastic torch example (torchrun agents around the platform's rendezvous store) each run their
workers on at least two hosts, talking across the bed's bridge, and reach their stated loss /
accuracy."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import COMPUTE, Bed
from tests.hosts.platform import BedPlatform, elapsed, wait_phase

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSES = 3


@pytest.fixture(scope="module")
def platform(bed: Bed) -> Iterator[BedPlatform]:
    t0 = time.monotonic()
    p = BedPlatform(bed)
    print(f"\nplatform: up on head, login from the laptop: {elapsed(t0)}")
    try:
        yield p
    finally:
        p.close()


def _placement(p: BedPlatform, job: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each worker's node (Slurm's, from ``get workers``) and endpoint, checked against the bed: the
    node is a compute host and the endpoint's address is that host's."""
    where = {w["name"]: (w["node"], w["endpoint"]) for w in p.json("get", "workers", job["name"])["items"]}
    for name, (node, endpoint) in where.items():
        assert node in COMPUTE, (name, node)
        assert endpoint.rpartition(":")[0] == p.bed.addresses[node], (name, node, endpoint)
    return where


def test_fit_a_line_trains_across_hosts(bed: Bed, platform: BedPlatform) -> None:
    p, t0 = platform, time.monotonic()
    data = f"/tmp/{p.base.name}/dataset"  # made on the laptop, uploaded over HTTP
    bed.run("laptop", sys.executable, str(EXAMPLES / "fit_a_line" / "data.py"), data)
    p.cli("pfs", "cp", "-r", "-q", data, "pfs:data/fit-a-line")
    p.cli(
        "submit", str(EXAMPLES / "fit_a_line"), "--name", "fit", "--framework", "paddle-ps",
        "--entry", "python train.py", "--pservers", "2", "--trainers", "2", "--cpu", "3", "--pscpu", "1",
        "--input", "pfs:data/fit-a-line", "--tasks-from-input", "--passes", str(PASSES),
    )  # fmt: skip
    job = wait_phase(p, "fit", ("Succeeded", "Failed"), timeout=600)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "fit")[-3000:])
    where = _placement(p, job)
    trainers = {where[f"trainer-{i}"][0] for i in range(2)}
    assert len(trainers) == 2, where  # --cpu 3 of 4: one trainer per host
    assert len({node for node, _ in where.values()}) >= 2, where
    tasks = p.json("get", "tasks", "fit")
    assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", PASSES)] * 8
    m = re.search(r"final loss ([0-9.]+)$", p.cli("logs", "fit", "-w", "trainer-0"), re.M)
    assert m and float(m.group(1)) < 0.05, m  # noise floor 0.01; initial ~20
    assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
    print(f"fit_a_line: final loss {m.group(1)}, workers {where}, {elapsed(t0)}")


def test_elastic_torch_trains_across_hosts(bed: Bed, platform: BedPlatform) -> None:
    p, t0 = platform, time.monotonic()
    p.cli(
        "submit", str(EXAMPLES / "torch_ddp"), "--name", "elastic", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "3", "--min-instance", "1", "--max-instance", "3",
        "--cpu", "2", "--env", "PROGRESS_EVERY=10",
    )  # fmt: skip
    job = wait_phase(p, "elastic", ("Succeeded", "Failed"), timeout=600)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "elastic")[-3000:])
    where = _placement(p, job)
    trainers = {where[f"trainer-{i}"][0] for i in range(3)}
    assert len(trainers) >= 2, where  # --cpu 2 of 4: at most two trainers per host
    out = p.cli("logs", "elastic")
    assert re.search(r"^step \d+ epoch \d+ world 3 ", out, re.M), out[-3000:]  # all 3 in one group
    acc = re.findall(r"final accuracy ([0-9.]+)$", out, re.M)
    assert acc and float(acc[-1]) >= 0.97, out[-3000:]
    print(f"elastic torch: final accuracy {acc[-1]}, workers {where}, {elapsed(t0)}")
