"""The container-image test bed as the tests see it: ``scripts/ensure-registry.sh start`` (two
registries on 127.0.0.1 and the base image built from Debian packages, cached on the machine) and
its exports, or ``train`` (the training image too); ``stop_bed`` stops the registries.

The two lanes of ``make test`` each have a bed of their own (``Place``: its port and state folder),
so that one lane's session ending never stops the registry the other is pulling from; the images'
cache is the machine's, shared (the script builds it under a lock)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PROOF", "Bed", "Place", "assert_ran_in_image", "start_bed", "stop_bed"]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ensure-registry.sh"


@dataclass(frozen=True)
class Bed:
    registry: str
    private_registry: str
    image: str
    private_image: str
    user: str
    password: str
    #: the training image (torch, PaddlePaddle), for a bed started with ``train``; else ""
    train_image: str = ""


@dataclass(frozen=True)
class Place:
    """Where a bed runs: the open registry's port (the private one's is the next) and its state."""

    port: int = 5000
    state: Path = Path("/tmp/paddlecloud-registry")

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PADDLECLOUD_REGISTRY_PORT": str(self.port),
            "PADDLECLOUD_REGISTRY_DIR": str(self.state),
        }


def start_bed(place: Place = Place(), *, train: bool = False) -> Bed:
    out = subprocess.run(
        ["bash", str(SCRIPT), "train" if train else "start"], capture_output=True, text=True,
        timeout=1200, check=False, env=place.env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.removeprefix("export ") for line in out.stdout.splitlines() if line.startswith("export ")]
    env = dict(line.split("=", 1) for line in lines)
    return Bed(
        registry=env["PADDLECLOUD_REGISTRY"],
        private_registry=env["PADDLECLOUD_PRIVATE_REGISTRY"],
        image=env["PADDLECLOUD_TEST_IMAGE"],
        private_image=env["PADDLECLOUD_PRIVATE_IMAGE"],
        user=env["PADDLECLOUD_PRIVATE_USER"],
        password=env["PADDLECLOUD_PRIVATE_PASSWORD"],
        train_image=env.get("PADDLECLOUD_TRAIN_IMAGE", ""),
    )


def stop_bed(place: Place = Place()) -> None:
    subprocess.run(["bash", str(SCRIPT), "stop"], timeout=60, check=False, env=place.env())


#: what a worker's entry runs first in the image tests of the examples (``... && python train.py``):
#: the Python that runs it, and the file only the test bed's images have
PROOF = (
    "python -c \"import sys; print('python', sys.version.split()[0], 'at', sys.base_prefix)\" "
    "&& cat /etc/paddlecloud-image"
)


def assert_ran_in_image(log: str) -> None:
    """``log`` (a worker's, its entry started with ``PROOF``) shows it ran in a test bed image: the
    image's marker file, and a Python at /usr that is not this machine's (3.11.2 against 3.11.7)."""
    assert "built for the PaddleCloud image tests" in log, log[-2000:]
    m = re.search(r"^(?:\[\S+\] )?python (\S+) at (\S+)$", log, re.M)
    assert m, log[-2000:]
    assert m.group(2) == "/usr" and m.group(1) != sys.version.split()[0], m.group(0)
