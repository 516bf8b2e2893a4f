"""Unsandboxed Slurm runs fence themselves too: where the API is an address another host uses, the
batch command starts the node's run monitor with ``--fence-api`` around the launcher (before, only
sandboxed runs had a monitor, and a node cut off from the server's host only trained on); with a
loopback API (the emulated cluster) or fencing off, the launcher runs alone."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.local.envs import install_runtime_shim
from paddlecloud.backends.slurm import script
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord
from paddlecloud.backends.slurm.script import BatchScripts, status_file
from paddlecloud.backends.slurm.settings import SlurmSettings
from paddlecloud.core.envcontract import ApiAccess, Topology
from paddlecloud.scheduler import WorkerPlacement

pytestmark = pytest.mark.timeout(60)
TOPOLOGY = Topology([], ["10.0.0.12:21000"], "10.0.0.12:21001", "10.0.0.12:21002")


def _job(tmp: Path, api: str) -> JobRecord:
    launch = JobLaunch(
        key="alice/j", user="alice", name="j", framework="none", entry="python train.py",
        package=tmp / "pkg.tar.gz", output_dir=tmp / "out", placement=(WorkerPlacement("trainer", 0, "c2"),),
        api=ApiAccess(url=api, token="t"),
    )  # fmt: skip
    jdir = tmp / "slurm" / "jobs" / "alice" / "j"
    for sub in ("package", "run", "logs", "contract"):
        (jdir / sub).mkdir(parents=True, exist_ok=True)
    return JobRecord(launch, jdir, {"trainer-0": WorkerRecord("trainer", 0, "c2", 21000)}, (21001, 21002))


def _command(tmp: Path, api: str, fence_s: int) -> tuple[list[str], JobRecord]:
    settings = SlurmSettings(root=tmp / "slurm", node_cache=tmp / "local")
    shim = install_runtime_shim(tmp / "slurm" / "pythonpath")
    scripts = dataclasses.replace(BatchScripts(settings, shim, None), fence_after=lambda: fence_s)
    job = _job(tmp, api)
    argv, _ = scripts.sbatch(job, job.workers["trainer-0"], TOPOLOGY)
    wrap = next(a for a in argv if a.startswith("--wrap="))
    return shlex.split(wrap.removeprefix("--wrap=exec ")), job


@pytest.fixture(autouse=True)
def _scontrol(monkeypatch: pytest.MonkeyPatch) -> None:  # the server's scontrol, found on its PATH
    monkeypatch.setattr(script.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_an_unsandboxed_run_starts_under_a_fencing_monitor(tmp_path: Path) -> None:
    cmd, job = _command(tmp_path, "http://10.0.0.1:8080", 5)
    cut = cmd.index("--")
    python = SlurmSettings().python
    assert cmd[:6] == [
        "/usr/bin/env",
        "--ignore-signal=TERM,INT",
        python,
        "-I",
        "-m",
        "paddlecloud.node.monitor",
    ]
    opts = dict(zip(cmd[6:cut:2], cmd[7:cut:2], strict=True))
    status = status_file(job, job.workers["trainer-0"])
    assert opts == {
        "--log": str(job.dir / "logs" / "trainer-0.0.log"), "--status": str(status),
        "--fence-api": "10.0.0.1:8080", "--fence-scontrol": "/usr/bin/scontrol", "--fence-after": "5",
    }  # fmt: skip
    assert cmd[cut + 1 : cut + 4] == [python, "-m", "paddlecloud.runtime.launcher"]


@pytest.mark.parametrize(("api", "fence_s"), [("http://127.0.0.1:8080", 5), ("http://10.0.0.1:8080", 0)])
def test_no_monitor_where_there_is_no_fence(tmp_path: Path, api: str, fence_s: int) -> None:
    cmd, _ = _command(tmp_path, api, fence_s)
    assert cmd[1:3] == ["-m", "paddlecloud.runtime.launcher"] and "paddlecloud.node.monitor" not in cmd
