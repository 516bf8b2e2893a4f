"""Fixtures of the Slurm tests: a real private Slurm cluster on this machine (not a fake).

    slurm     session-scoped: ``ensure_cluster()``: ``scripts/ensure-slurm.sh start`` (installs
              slurm-wlm + munge with apt-get when root, starts one slurmctld and 3 emulated nodes
              n1..n3) once per test process, its ``export`` lines parsed into a dict and put into
              ``os.environ`` (SLURM_CONF, ...); stopped when the process exits, only if it started
              it (the controller was not running). The conformance suite uses ``ensure_cluster`` too
    slurm_sh  runs ``scripts/ensure-slurm.sh`` with arguments (kill-node, revive-node, status)
    slurm_gpu module-scoped: a second private cluster beside the first, 2 nodes with 2 emulated GRES
              GPUs each (``PADDLECLOUD_SLURM_GPUS``), stopped after the module; its ``SLURM_CONF``
              is for the test to put into ``os.environ`` (monkeypatch) while it uses it (its
              directory and port: ``PADDLECLOUD_SLURM_GPU_DIR`` / ``_GPU_PORT``)

Where the cluster cannot exist (not root and the packages missing) the tests are skipped with that
reason; any other failure to start it fails them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-slurm.sh"
#: the longest ensure-slurm.sh may take (a fresh machine: apt-get install included, ~20 s here)
START_TIMEOUT_S = 600


def _sh(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def parse_exports(text: str) -> dict[str, str]:
    """``export NAME=VALUE`` lines (what ``eval`` would run) as a dict."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line.removeprefix("export ").partition("=")
            out[name.strip()] = value.strip()
    return out


_STARTED: dict[str, str] = {}


def ensure_cluster() -> dict[str, str]:
    """Start the cluster once per test process (skip where it cannot exist) and put its exports in
    ``os.environ``; stopped when the process exits, only if it was started here."""
    if _STARTED:
        return _STARTED
    if os.geteuid() != 0 and shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed and only root can install it (scripts/ensure-slurm.sh)")
    already = _sh("status").returncode == 0  # 0 while slurmctld runs
    proc = _sh("start", timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, f"ensure-slurm.sh start failed:\n{proc.stderr}"
    env = parse_exports(proc.stdout)
    assert "SLURM_CONF" in env, proc.stdout
    os.environ.update(env)
    _STARTED.update(env)
    if not already:
        atexit.register(_sh, "stop")
    return _STARTED


@pytest.fixture(scope="session")
def slurm() -> dict[str, str]:
    return ensure_cluster()


@pytest.fixture
def slurm_sh(slurm: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = _sh(*args)
        assert proc.returncode == 0, f"ensure-slurm.sh {' '.join(args)} failed:\n{proc.stderr}"
        return proc

    return run


#: the GPU cluster's settings: its own directory and ports, clear of the default cluster's
GPU_CLUSTER = {
    "PADDLECLOUD_SLURM_DIR": os.environ.get("PADDLECLOUD_SLURM_GPU_DIR", "/tmp/paddlecloud-slurm-gpu"),
    "PADDLECLOUD_SLURM_PORT": os.environ.get("PADDLECLOUD_SLURM_GPU_PORT", "17217"),
    "PADDLECLOUD_SLURM_NODES": "2",
    "PADDLECLOUD_SLURM_GPUS": "2",
}


@pytest.fixture(scope="module")
def slurm_gpu(slurm: dict[str, str]) -> Iterator[dict[str, str]]:
    proc = _sh("start", timeout=START_TIMEOUT_S, env=GPU_CLUSTER)
    assert proc.returncode == 0, f"ensure-slurm.sh start (GPUs) failed:\n{proc.stderr}"
    try:
        yield parse_exports(proc.stdout)
    finally:
        _sh("stop", env=GPU_CLUSTER)


@pytest.fixture
def backend(slurm: dict[str, str], tmp_path: Path) -> Iterator[SlurmBackend]:
    """A Slurm backend on the test cluster, its data under ``tmp_path``; every job it still holds
    is stopped at the end (a test's own ``backend`` fixture may configure another)."""
    b = SlurmBackend(SlurmSettings(root=tmp_path / "slurm", cleanup_grace=1), time.time, lambda: None)
    yield b
    for key in list(b._jobs):
        b.stop(key, 0)
