"""GPUs through Slurm's GRES, on a second private cluster whose nodes have 2 emulated GPUs each
(``PADDLECLOUD_SLURM_GPUS``: character devices stand for them, so Slurm allocates and binds them
as it would real ones; nothing computes on them). The backend asks for ``--gres=gpu:N``, Slurm
picks the GPUs (``SLURM_JOB_GPUS``), confines the job's device cgroup to them (``ConstrainDevices``)
and sets ``CUDA_VISIBLE_DEVICES`` to their indices as the job sees them; ``nodes()`` counts the GPUs
and what other users' jobs hold of them."""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from tests.kube.conftest import wait_for
from tests.slurm.test_backend import MI, contract_lines, launch, states, sync_until

pytestmark = pytest.mark.slurm

SHOW = """
import json, os, time
e = os.environ
print(json.dumps({k: e.get(k) for k in (
    "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "PADDLE_DISTRI_BACKEND")}), flush=True)
time.sleep(3)
"""


def _package(tmp: Path) -> Path:
    path = tmp / "gpu.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("work.py")
        info.size = len(SHOW.encode())
        tar.addfile(info, io.BytesIO(SHOW.encode()))
    return path


def test_trainers_get_the_gpus_slurm_gives_them_and_other_users_gpus_count(
    slurm_gpu: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_gpu["SLURM_CONF"])
    b = SlurmBackend(SlurmSettings(root=tmp_path / "slurm", cleanup_grace=1), time.time, lambda: None)
    other = subprocess.run(
        ["sbatch", "--parsable", "-w", "n2", "--gres=gpu:1", "--mem=100M", "-J", "their-gpu-job",
         f"--chdir={tmp_path}", "-o", "/dev/null", "--wrap", "sleep 120"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        n2 = wait_for(
            "their GPU counted", lambda: (n := {x.name: x for x in b.nodes()}["n2"]).foreign.gpu and n, 30
        )
        assert n2.capacity.gpu == 2 and n2.gpus == (0, 1) and n2.foreign_gpus == (1,), n2
        assert f"job {other} (their-gpu-job" in n2.note, n2.note
        trainers = (("n1", (0,)), ("n1", (1,)), ("n2", (0,)))
        job = launch(
            _package(tmp_path), tmp_path, framework="paddle-collective", entry="python work.py",
            placement=tuple(WorkerPlacement("trainer", i, n, g) for i, (n, g) in enumerate(trainers)),
            resources={"trainer": Resources(1000, 256 * MI, 1)},
        )  # fmt: skip
        b.start(job)
        seen = sync_until(b, job.key, lambda s: s.finished, timeout=90)
        assert seen[-1].failure is None and set(states(seen[-1]).values()) == {WorkerState.SUCCEEDED}
        env = {f"trainer-{i}": contract_lines(b, job.key, f"trainer-{i}")[0] for i in range(3)}
        print(json.dumps(env))
        assert {w: e["SLURMD_NODENAME"] for w, e in env.items()} == {
            "trainer-0": "n1", "trainer-1": "n1", "trainer-2": "n2"}  # fmt: skip
        n1 = sorted(env[f"trainer-{i}"]["SLURM_JOB_GPUS"] for i in (0, 1))
        assert n1 == ["0", "1"], env  # one GPU each, not the same one
        # each job's device cgroup holds its one GPU, which it sees as device 0
        assert {e["CUDA_VISIBLE_DEVICES"] for e in env.values()} == {"0"}, env
        detail = subprocess.run(
            ["scontrol", "show", "job", "-d", other], capture_output=True, text=True
        ).stdout
        theirs = re.findall(r"IDX:(\d+)", detail)
        assert len(theirs) == 1 and env["trainer-2"]["SLURM_JOB_GPUS"] in {"0", "1"} - set(theirs), env
        assert {e["PADDLE_DISTRI_BACKEND"] for e in env.values()} == {"nccl"}
    finally:
        subprocess.run(["scancel", other], check=False)


def test_a_job_opens_only_the_gpus_slurm_gave_it(
    slurm_gpu: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``ConstrainDevices=yes``: two jobs of one GPU each on n1, each can open its own GPU's device
    node (the emulation's /dev/ttyN) and is refused the other's by its device cgroup. Each job holds
    its GPU until both have started, so Slurm must give them different ones (without that, the
    first could end before the second started, and both got GPU 0)."""
    monkeypatch.setenv("SLURM_CONF", slurm_gpu["SLURM_CONF"])
    probe = (
        'echo "gpu $SLURM_JOB_GPUS"; for i in 0 1; do if (exec 3</dev/tty$i) 2>/dev/null; '
        'then echo "tty$i open"; else echo "tty$i refused"; fi; done; '
        # hold the GPU until the other probe runs too, so the two jobs overlap (bounded: 60 s)
        'touch "up.$SLURM_JOB_ID"; for n in $(seq 300); do '
        '[ "$(ls up.* | wc -l)" -ge 2 ] && break; sleep 0.2; done'
    )
    outs = [tmp_path / f"probe{i}.out" for i in range(2)]
    ids = [
        subprocess.run(
            ["sbatch", "--parsable", "-w", "n1", "--gres=gpu:1", "--mem=100M", f"--chdir={tmp_path}",
             "-o", str(out), "--wrap", probe],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        for out in outs
    ]  # fmt: skip

    def ended() -> bool:  # each probe's last line is about tty1
        return all(o.is_file() and "tty1 " in o.read_text() for o in outs)

    try:
        wait_for("both probes", ended, timeout=60)
    finally:
        subprocess.run(["scancel", *ids], check=False)
    seen = sorted(o.read_text().split("\n", 1)[0] for o in outs)
    assert seen == ["gpu 0", "gpu 1"], seen
    for out in outs:
        text = out.read_text()
        mine = text.split()[1]
        other = "1" if mine == "0" else "0"
        assert f"tty{mine} open" in text and f"tty{other} refused" in text, text
