"""The examples in a container image on the local backend (issue 27): examples/torch_ddp (elastic,
2 trainers, torchrun) and examples/fit_a_line (2 pservers + 2 trainers) submitted with ``--image``
on the training image of the test bed (``scripts/ensure-registry.sh train``: Debian 12's python3
with torch and PaddlePaddle in its /usr/local), at once. Each worker proves it ran in the image: its
entry first prints the Python that runs it (the image's 3.11.2 at /usr, not this machine's) and the
file only the image has; the job's environment is a venv of the image's Python in which pip found
the requirements already met by the image's packages (``logs -w prepare``); each example reaches its
stated loss / accuracy.

The bed here is this lane's own (port 5010): the unit lane's stops its registries when its session
ends, which may be while these jobs pull."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry_bed import PROOF, Place, assert_ran_in_image, start_bed, stop_bed

from .conftest import ROOT, Server
from .test_examples import assert_every_shard_done_once_per_pass, fit_a_line_data, submit_fit_a_line

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

PLACE = Place(port=5010, state=Path("/tmp/paddlecloud-registry-e2e"))


@pytest.fixture(scope="module")
def train_image() -> Iterator[str]:
    bed = start_bed(PLACE, train=True)
    yield bed.train_image
    stop_bed(PLACE)


def _ran_in_the_image(server: Server, job: str, worker: str) -> str:
    text = server.cli("logs", job, "-w", worker).stdout
    assert_ran_in_image(text)
    return text


def test_the_examples_run_in_the_training_image(server: Server, train_image: str, tmp_path: Path) -> None:
    server.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "torch-image", "--framework", "torch",
        "--entry", f"{PROOF} && torchrun train.py", "--trainers", "2", "--min-instance", "1",
        "--max-instance", "2", "--cpu", "500m", "--image", train_image,
    )  # fmt: skip
    data = fit_a_line_data(server, tmp_path)
    server.cli(*submit_fit_a_line(server, "fit-image", data, "--image", train_image,
                                  "--entry", f"{PROOF} && python train.py"))  # fmt: skip
    for name in ("torch-image", "fit-image"):
        job = server.wait_phase(name, {"Succeeded", "Failed"}, timeout=1200)
        assert job["phase"] == "Succeeded", (name, job["message"])
        prepare = server.cli("logs", name, "-w", "prepare").stdout
        assert "installing requirements.txt with the image's /usr/bin/python3" in prepare, prepare[-2000:]
        met = "torch==2.13.0" if name == "torch-image" else "paddlepaddle==2.6.2"
        satisfied = rf"already satisfied: {re.escape(met)} in /usr/local/lib/python3.11"
        assert re.search(satisfied, prepare), prepare[-3000:]
    texts = [_ran_in_the_image(server, "torch-image", f"trainer-{i}") for i in (0, 1)]
    ranks = {m.group(1) for text in texts for m in re.finditer(r"^rank (\d)/2 started", text, re.M)}
    assert ranks == {"0", "1"}, texts  # one world of both (which trainer is rank 0 is torchrun's choice)
    acc = [
        float(m.group(1)) for text in texts for m in re.finditer(r"^final accuracy ([0-9.]+)$", text, re.M)
    ]
    assert acc and max(acc) >= 0.97, acc
    for worker in ("pserver-0", "pserver-1", "trainer-1"):
        _ran_in_the_image(server, "fit-image", worker)
    loss = re.search(r"^final loss ([0-9.]+)$", _ran_in_the_image(server, "fit-image", "trainer-0"), re.M)
    assert loss and float(loss.group(1)) < 0.05  # noise floor 0.01; the initial loss is ~20
    assert_every_shard_done_once_per_pass(server, "fit-image")
