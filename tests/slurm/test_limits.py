"""Slurm's own limits on the private cluster (``task/cgroup`` + ``proctrack/cgroup``, cgroup.conf of
``scripts/ensure-slurm.sh``): a worker's memory is its ``--memory`` (the cgroup of its Slurm job), a
worker over it is killed by the kernel, Slurm ends its job ``OUT_OF_MEMORY``, and the backend reports
it ``Failed`` with reason ``OOMKilled`` and the limit in its message; a worker within it runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from paddlecloud.backends.base import JobLaunch, LogRequest
from paddlecloud.backends.slurm import SlurmBackend
from paddlecloud.core.phases import WorkerReason, WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from tests.e2e.juicefs_fixtures import tar_package
from tests.slurm.test_backend import sync_until

pytestmark = pytest.mark.slurm

MI = 2**20
#: both trainers print the memory limit of their own cgroup; trainer-1 then allocates SMALL MiB and
#: says so in the output dir, trainer-0 waits for that (bounded) and allocates BIG MiB
HOG = """
import os, pathlib, time
e = os.environ
cg = dict(ln.split(":", 2)[1:] for ln in open("/proc/self/cgroup").read().splitlines())
path = cg["memory"].removesuffix("/task_0")
print("limit", open(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes").read().strip(), flush=True)
mark = pathlib.Path(e["PADDLECLOUD_OUTPUT_DIR"]) / "small-done"
if e["PADDLECLOUD_TRAINER_ID"] == "1":
    block = bytearray(int(e["SMALL"]) * 2**20)
    print("allocated", len(block) // 2**20, "MiB", flush=True)
    mark.write_text("ok")
else:
    deadline = time.time() + 60
    while not mark.exists() and time.time() < deadline:
        time.sleep(0.1)
    block = bytearray(int(e["BIG"]) * 2**20)
    print("allocated", len(block) // 2**20, "MiB: not killed", flush=True)
"""


def test_a_worker_over_its_memory_is_oom_killed_and_says_so(backend: SlurmBackend, tmp_path: Path) -> None:
    package = tar_package(tmp_path / "package.tar.gz", {"hog.py": HOG})
    name = f"hog{uuid.uuid4().hex[:6]}"
    (tmp_path / "output").mkdir()
    job = JobLaunch(
        key=f"alice/{name}", user="alice", name=name, framework="none", entry="python hog.py",
        package=package, output_dir=tmp_path / "output",
        placement=(WorkerPlacement("trainer", 0, "n1"), WorkerPlacement("trainer", 1, "n2")),
        resources={"trainer": Resources(1000, 128 * MI)}, env={"SMALL": "48", "BIG": "512"},
    )  # fmt: skip
    backend.start(job)
    seen = sync_until(backend, job.key, lambda s: s.finished, timeout=120)
    last, events = seen[-1], [e for s in seen for e in s.events]
    workers = {w.name: w for w in last.workers}
    hog, small = workers["trainer-0"], workers["trainer-1"]
    logs = {n: b"".join(backend.read_log(LogRequest(job.key, (n,)))).decode() for n in workers}
    print(logs)
    assert f"limit {128 * MI}" in logs["trainer-0"] and f"limit {128 * MI}" in logs["trainer-1"], logs
    # within its limit: it ran and succeeded
    assert small.state == WorkerState.SUCCEEDED and "allocated 48 MiB" in logs["trainer-1"], small
    assert small.reason == WorkerReason.NONE
    # over it: killed by the kernel (SIGKILL), Slurm OUT_OF_MEMORY, reported as such
    assert "not killed" not in logs["trainer-0"], logs["trainer-0"]
    assert hog.state == WorkerState.FAILED and hog.exit_code == 137, hog
    assert hog.reason == WorkerReason.OOM_KILLED, hog
    assert "memory limit 128Mi" in hog.message and "OUT_OF_MEMORY on n1" in hog.message, hog.message
    assert last.failure is not None and "OOMKilled: memory limit 128Mi" in last.failure, last.failure
    oom = [e.message for e in events if e.reason == "OOMKilled"]
    assert len(oom) == 1 and oom[0].startswith("trainer-0: memory limit 128Mi"), events
