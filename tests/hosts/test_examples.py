"""The examples across hosts of the bed, as a user runs them: the CLI on ``laptop`` against the server
on ``head`` (``up --backend slurm``), over HTTP only; every worker a Slurm batch job on c1..c3, in
its sandbox, its environment built offline on head into the shared directory. examples/fit_a_line
(2 pservers + 2 trainers, PaddlePaddle parameter-server mode, its 8 shards leased from the task
master) and the elastic torch example (torchrun agents around the platform's rendezvous store) run at
once (the module's ``jobs``: their builds and start-ups overlap), each with its workers on at least
two hosts, talking across the bed's bridge, and each reaches its stated loss / accuracy.

Sizes, on compute hosts of 8 CPUs (``ensure-hosts.sh``): fit_a_line's trainers ``--cpu 5`` (one per
host), pservers 1; the torch trainers ``--cpu 3`` (at most two per host); 22 of the 24 CPUs with the
rendezvous store's one."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.conftest import COMPUTE, Bed
from tests.hosts.platform import BedPlatform, elapsed, wait_phase

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSES = 3
#: a job's longest run here: both environments built at once on 2 cores, then the training
JOB_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def platform(bed: Bed, request: pytest.FixtureRequest) -> Iterator[BedPlatform]:
    t0, failed = time.monotonic(), request.session.testsfailed
    p = BedPlatform(bed)
    print(f"\nplatform: up on head, logged in from the laptop: {elapsed(t0)}")
    try:
        yield p
    finally:
        p.close(keep=request.session.testsfailed > failed)


@pytest.fixture(scope="module")
def jobs(bed: Bed, platform: BedPlatform) -> float:
    """Both examples submitted from the laptop (fit_a_line's data set made there and uploaded over
    HTTP); the time they were submitted."""
    p = platform
    data = f"/tmp/{p.base.name}/dataset"
    bed.run("laptop", sys.executable, str(EXAMPLES / "fit_a_line" / "data.py"), data)
    p.cli("pfs", "cp", "-r", "-q", data, "pfs:data/fit-a-line")
    t0 = time.monotonic()
    p.cli(
        "submit", str(EXAMPLES / "fit_a_line"), "--name", "fit", "--framework", "paddle-ps",
        "--entry", "python train.py", "--pservers", "2", "--trainers", "2", "--cpu", "5", "--pscpu", "1",
        "--input", "pfs:data/fit-a-line", "--tasks-from-input", "--passes", str(PASSES),
    )  # fmt: skip
    p.cli(
        "submit", str(EXAMPLES / "torch_ddp"), "--name", "elastic", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "3", "--min-instance", "1", "--max-instance", "3",
        "--cpu", "3", "--env", "PROGRESS_EVERY=10",
    )  # fmt: skip
    return t0


def _placement(p: BedPlatform, name: str) -> dict[str, tuple[str, str]]:
    """Each worker's node (Slurm's, from ``get workers`` on the laptop) and endpoint, checked
    against the bed: the node is a compute host and the endpoint's address is that host's."""
    where = {w["name"]: (w["node"], w["endpoint"]) for w in p.json("get", "workers", name)["items"]}
    for worker, (node, endpoint) in where.items():
        assert node in COMPUTE, (worker, node)
        assert endpoint.rpartition(":")[0] == p.bed.addresses[node], (worker, node, endpoint)
    return where


def test_fit_a_line_trains_across_hosts(platform: BedPlatform, jobs: float) -> None:
    p = platform
    job = wait_phase(p, "fit", ("Succeeded", "Failed"), timeout=JOB_TIMEOUT_S)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "fit")[-3000:])
    where = _placement(p, "fit")
    assert where["trainer-0"][0] != where["trainer-1"][0], where  # --cpu 5 of 8: one per host
    tasks = p.json("get", "tasks", "fit")
    assert [(t["state"], t["done_passes"]) for t in tasks["items"]] == [("done", PASSES)] * 8
    m = re.search(r"final loss ([0-9.]+)$", p.cli("logs", "fit", "-w", "trainer-0"), re.M)
    assert m and float(m.group(1)) < 0.05, m  # noise floor 0.01; initial ~20
    assert (Path(job["output_dir"]) / "model" / "inference.pdmodel").is_file()
    print(f"fit_a_line: final loss {m.group(1)}, workers {where}, {elapsed(jobs)} after its submit")


def test_elastic_torch_trains_across_hosts(platform: BedPlatform, jobs: float) -> None:
    p = platform
    job = wait_phase(p, "elastic", ("Succeeded", "Failed"), timeout=JOB_TIMEOUT_S)
    assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "elastic")[-3000:])
    where = _placement(p, "elastic")
    assert len({where[f"trainer-{i}"][0] for i in range(3)}) >= 2, where  # --cpu 3 of 8: two per host at most
    out = p.cli("logs", "elastic")
    # one group of all 3 trainers trained (the logs' lines carry their worker's name)
    assert re.search(r"^\[trainer-\d\] step \d+ epoch \d+ world 3 ", out, re.M), out[-3000:]
    acc = re.findall(r"final accuracy ([0-9.]+)$", out, re.M)
    assert acc and float(acc[-1]) >= 0.97, out[-3000:]
    print(f"elastic torch: final accuracy {acc[-1]}, workers {where}, {elapsed(jobs)} after its submit")
