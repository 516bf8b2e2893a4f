"""The container-image test bed for these tests: ``scripts/ensure-registry.sh start`` (two registries
on 127.0.0.1 and the base image built from Debian packages, cached on the machine), stopped at the
end of the session."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_bed import Bed

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    script = ROOT / "scripts" / "ensure-registry.sh"
    out = subprocess.run(
        ["bash", str(script), "start"], capture_output=True, text=True, timeout=900, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.stdout.splitlines()
        if line.startswith("export ")
    )
    yield Bed(
        registry=env["PADDLECLOUD_REGISTRY"],
        private_registry=env["PADDLECLOUD_PRIVATE_REGISTRY"],
        image=env["PADDLECLOUD_TEST_IMAGE"],
        private_image=env["PADDLECLOUD_PRIVATE_IMAGE"],
        user=env["PADDLECLOUD_PRIVATE_USER"],
        password=env["PADDLECLOUD_PRIVATE_PASSWORD"],
    )
    subprocess.run(["bash", str(script), "stop"], timeout=60, check=False, env=dict(os.environ))
