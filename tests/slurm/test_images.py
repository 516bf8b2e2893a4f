"""The Slurm backend runs a job's workers in its container image (issue 27): the image pulled once,
at Preparing, onto the shared directory; each worker's sandbox on its node (``jail.py``) has the
image's system and its python3 runs the launcher. Against the test bed's registry
(``scripts/ensure-registry.sh``) and the private Slurm cluster, sandboxed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.backends.base import JobLaunch, JobStatus, LogRequest
from paddlecloud.backends.images import RegistryAuth
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from tests.e2e.juicefs_fixtures import tar_package
from tests.registry_bed import Bed, Place, start_bed, stop_bed

MI = 2**20

pytestmark = pytest.mark.timeout(300)

# a bed of this lane's own: tests/unit runs its bed (the default place) in another lane at once
PLACE = Place(port=5020, state=Path("/tmp/paddlecloud-registry-slurm"))

PROBE = """\
import os, sys
from pathlib import Path
print("marker:", Path("/etc/paddlecloud-image").read_text().strip())
print("prefix:", sys.base_prefix)
print("node:", os.environ.get("SLURMD_NODENAME", "?"))
"""


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    yield start_bed(PLACE)
    stop_bed(PLACE)


@pytest.fixture
def backend(slurm: dict[str, str], tmp_path: Path) -> Iterator[SlurmBackend]:
    b = SlurmBackend(
        SlurmSettings(root=tmp_path / "data" / "slurm", cleanup_grace=1, isolation="sandbox"),
        time.time,
        lambda: None,
    )
    assert b.confinement().confined, b.confinement().description
    yield b
    for key in list(b._jobs):
        b.stop(key, 0)


def _launch(tmp: Path, image: str, files: dict[str, str], auth: RegistryAuth | None = None) -> JobLaunch:
    name = f"job{uuid.uuid4().hex[:6]}"
    home = tmp / "data" / "pfs" / "files" / "home" / "alice"
    home.mkdir(parents=True, exist_ok=True)
    return JobLaunch(
        key=f"alice/{name}", user="alice", name=name, framework="none", entry="python work.py",
        package=tar_package(tmp / f"{name}.tar.gz", files), output_dir=home / "jobs" / name / "output",
        placement=(WorkerPlacement("trainer", 0, "n1"), WorkerPlacement("trainer", 1, "n2")),
        resources={"trainer": Resources(1000, 256 * MI)}, home_dir=home, image=image, image_auth=auth,
    )  # fmt: skip


def _until_finished(b: SlurmBackend, key: str, timeout: float = 240) -> list[JobStatus]:
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        st = b.sync(key)
        seen.append(st)
        if st.finished:
            return seen
        assert time.monotonic() < deadline, f"not finished within {timeout} s: {st}"
        time.sleep(0.3)


def test_workers_on_two_nodes_run_in_the_image(bed: Bed, backend: SlurmBackend, tmp_path: Path) -> None:
    job = _launch(tmp_path, bed.image, {"work.py": PROBE})
    backend.start(job)
    seen = _until_finished(backend, job.key)
    assert seen[-1].failure is None, seen[-1].failure
    said = [e.message for s in seen for e in s.events]
    assert any(m.startswith(f"{bed.image} is sha256:") for m in said), said
    nodes = set()
    for worker in ("trainer-0", "trainer-1"):
        out = b"".join(backend.read_log(LogRequest(job.key, (worker,)))).decode()
        assert "marker: built for the PaddleCloud image tests" in out, out  # only the image has it
        assert "prefix: /usr" in out, out  # the image's Python, not the server's
        nodes |= {ln.split()[-1] for ln in out.splitlines() if ln.startswith("node:")}
    assert nodes == {"n1", "n2"}
    assert (backend.root / "images").is_dir()  # pulled onto the shared directory, once


def test_a_private_image_needs_its_owners_login(bed: Bed, backend: SlurmBackend, tmp_path: Path) -> None:
    job = _launch(tmp_path, bed.private_image, {"work.py": PROBE})
    backend.start(job)
    last = _until_finished(backend, job.key)[-1]
    assert last.failure_reason == "ImageUnauthorized" and "image login" in (last.failure or "")
    auth = RegistryAuth(bed.private_registry, bed.user, bed.password)
    job = _launch(tmp_path, bed.private_image, {"work.py": PROBE}, auth)
    backend.start(job)
    last = _until_finished(backend, job.key)[-1]
    assert last.failure is None, last.failure


def test_a_job_adopted_while_it_prepares_is_prepared_again_and_runs(
    bed: Bed, backend: SlurmBackend, tmp_path: Path
) -> None:
    """The server stopped while it pulled a job's image (its record says Preparing, nothing runs):
    the next server prepares it again and the job runs; before, it stayed Preparing for good."""
    backend._prepare_async = lambda job, requirements: None  # type: ignore[method-assign]  # died first
    job = _launch(tmp_path, bed.image, {"work.py": PROBE, "requirements.txt": "six\n"})
    backend.start(job)
    assert not backend.sync(job.key).workers or all(
        w.state == "Pending" for w in backend.sync(job.key).workers
    )
    backend._jobs.clear()  # that server is gone
    again = SlurmBackend(
        SlurmSettings(root=backend.root, cleanup_grace=1, isolation="sandbox"), time.time, lambda: None
    )
    again.adopt(job)
    try:
        last = _until_finished(again, job.key)[-1]
        assert last.failure is None, last.failure
        out = b"".join(again.read_log(LogRequest(job.key, ("trainer-0",)))).decode()
        assert "marker: built for the PaddleCloud image tests" in out, out
    finally:
        for key in list(again._jobs):
            again.stop(key, 0)
