"""The container-image test bed as the tests see it: ``scripts/ensure-registry.sh start`` (two
registries on 127.0.0.1 and the base image built from Debian packages, cached on the machine) and
its exports; ``stop_bed`` stops the registries."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Bed", "start_bed", "stop_bed"]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-registry.sh"


@dataclass(frozen=True)
class Bed:
    registry: str
    private_registry: str
    image: str
    private_image: str
    user: str
    password: str


def start_bed() -> Bed:
    out = subprocess.run(
        ["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=900, check=False
    )
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
    )


def stop_bed() -> None:
    subprocess.run(["bash", str(SCRIPT), "stop"], timeout=60, check=False)
