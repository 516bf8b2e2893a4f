"""Fixtures of the Slurm tests: a real private Slurm cluster on this machine (not a fake).

    slurm     session-scoped: ``scripts/ensure-slurm.sh start`` (installs slurm-wlm + munge with
              apt-get when root, starts one slurmctld and 3 emulated nodes n1..n3), its ``export``
              lines parsed into a dict and put into ``os.environ`` (SLURM_CONF, ...) for the session;
              stopped at the end only if this session started it (the controller was not running)
    slurm_sh  runs ``scripts/ensure-slurm.sh`` with arguments (kill-node, revive-node, status)

Where the cluster cannot exist (not root and the packages missing) the tests are skipped with that
reason; any other failure to start it fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-slurm.sh"
#: the longest ensure-slurm.sh may take (a fresh machine: apt-get install included, ~20 s here)
START_TIMEOUT_S = 600


def _sh(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def parse_exports(text: str) -> dict[str, str]:
    """``export NAME=VALUE`` lines (what ``eval`` would run) as a dict."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line.removeprefix("export ").partition("=")
            out[name.strip()] = value.strip()
    return out


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0 and shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed and only root can install it (scripts/ensure-slurm.sh)")
    already = _sh("status").returncode == 0
    proc = _sh("start", timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, f"ensure-slurm.sh start failed:\n{proc.stderr}"
    env = parse_exports(proc.stdout)
    assert "SLURM_CONF" in env, proc.stdout
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        yield env
    if not already:
        _sh("stop")


@pytest.fixture
def slurm_sh(slurm: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = _sh(*args)
        assert proc.returncode == 0, f"ensure-slurm.sh {' '.join(args)} failed:\n{proc.stderr}"
        return proc

    return run
