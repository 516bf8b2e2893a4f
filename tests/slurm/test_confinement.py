"""A Slurm worker with isolation ``sandbox`` sees only its owner's data, on the real private cluster.

The layout of a server's data dir on the shared directory (PFS homes of alice and bob, public, the
database, the backend's job folders), the ``SlurmBackend`` with ``isolation="sandbox"``: each
worker's batch script runs ``backends/slurm/jail.py``, which makes the local backend's bubblewrap
jail on the node. Alice's worker tries, by host path, what it must never reach (bob's file and home,
the database, the data dir, bob's running job's folder, its own run's jail spec, bob's processes) and
what it may (its home and output read-write, public read-only). Each worker also leaves behind a
process that a job could use to outlive its Slurm job on an unconfined node (double fork, own
session, empty environment: neither Slurm's process tracking by parentage nor a search of process
environments finds it); a stop (``scancel``) and a node failure (``ensure-slurm.sh kill-node``) must
end it with the rest. With ``isolation="none"`` the reads succeed and those processes survive.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from paddlecloud.backends.base import JobLaunch, LogRequest
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

from .test_backend import states, sync_until

pytestmark = pytest.mark.slurm

MI = 2**20

#: a worker: tries every target of $TARGETS (("ok", what it got) or ("refused", the error)), leaves
#: a process named $MARKER outside its own process tree and environment, prints RESULTS, holds $HOLD s
WORK = r"""
import json, os, socket, sys, time
from pathlib import Path

t = json.loads(os.environ.get("TARGETS", "{}"))
out = {"uid": os.getuid(), "hostname": socket.gethostname()}

def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except Exception as exc:
        out[name] = ["refused", f"{type(exc).__name__}: {exc}"[:300]]

def read(path):
    return Path(path).read_bytes()[:200].decode(errors="replace")

def write(path):
    Path(path).write_text("written by the job")
    return "written"

def foreign_processes():
    mine = os.environ["PADDLECLOUD_JOB_NAME"]
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            for var in environ.read_bytes().split(b"\0"):
                if var.startswith(b"PADDLECLOUD_JOB_NAME=") and var.split(b"=", 1)[1].decode() != mine:
                    found.append(var.decode())
        except OSError:
            pass
    if found:
        return found
    raise PermissionError("no other job's process is visible")

if t:
    attempt("bob_file", lambda: read(t["bob_file"]))
    attempt("bob_home_listing", lambda: os.listdir(t["bob_home"]))
    attempt("database", lambda: read(t["database"]))
    attempt("data_dir_listing", lambda: sorted(os.listdir(t["data_dir"])))
    attempt("bob_job_dir", lambda: os.listdir(t["bob_job_dir"]))
    attempt("own_spec", lambda: read(t["own_spec"]))
    attempt("write_own_spec", lambda: write(t["own_spec"]))
    attempt("write_bob_home", lambda: write(t["bob_home"] + "/planted.txt"))
    attempt("write_public", lambda: write(t["public_file"] + ".planted"))
    attempt("bob_processes", foreign_processes)
    attempt("own_home_write", lambda: write(t["own_home"] + "/from-job.txt"))
    attempt("own_home_read", lambda: read(t["own_home"] + "/from-job.txt"))
    attempt("output_write", lambda: write(os.environ["PADDLECLOUD_OUTPUT_DIR"] + "/result.txt"))
    attempt("public_read", lambda: read(t["public_file"]))
if os.environ.get("MARKER") and os.fork() == 0:  # a process that leaves the worker behind
    os.setsid()
    if os.fork() == 0:
        sleep = [sys.executable, "-c", "import time; time.sleep(600)", os.environ["MARKER"]]
        os.execve(sys.executable, sleep, {})
    os._exit(0)
print("RESULTS " + json.dumps(out), flush=True)
time.sleep(float(os.environ.get("HOLD", "0")))
"""

REFUSED = (
    "bob_file", "bob_home_listing", "database", "bob_job_dir", "own_spec", "write_bob_home",
    "write_public", "bob_processes",
)  # fmt: skip
ALLOWED = ("own_home_write", "own_home_read", "output_write", "public_read")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data dir: bob's secret in his PFS home, alice's home, public, the database."""
    data = tmp_path / "data"
    files = data / "pfs" / "files"
    for d in ("home/alice", "home/bob", "public"):
        (files / d).mkdir(parents=True)
    (files / "home" / "bob" / "secret.txt").write_text("bob's secret\n")
    (files / "public" / "data.txt").write_text("public data\n")
    (data / "paddlecloud.db").write_bytes(b"SQLite format 3\0 the database")
    return data


@pytest.fixture
def backend(slurm: dict[str, str], data: Path) -> Iterator[SlurmBackend]:
    b = SlurmBackend(
        SlurmSettings(root=data / "slurm", cleanup_grace=1, isolation="sandbox"), time.time, lambda: None
    )
    assert b.confinement().confined, b.confinement().description
    yield b
    for key in list(b._jobs):
        b.stop(key, 0)


@pytest.fixture
def marker() -> Iterator[str]:
    """The name of a process a worker leaves behind; SIGKILLed after the test if it is still there."""
    name = f"pc-left-behind-{uuid.uuid4().hex[:8]}"
    yield name
    for pid in _marked(name):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def _package(tmp: Path) -> Path:
    path = tmp / f"work-{uuid.uuid4().hex[:6]}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("work.py")
        info.size = len(WORK.encode())
        tar.addfile(info, io.BytesIO(WORK.encode()))
    return path


def _launch(data: Path, user: str, node: str, env: dict[str, str]) -> JobLaunch:
    name = f"job{uuid.uuid4().hex[:6]}"
    home = data / "pfs" / "files" / "home" / user
    return JobLaunch(
        key=f"{user}/{name}", user=user, name=name, framework="none", entry="python work.py",
        package=_package(data.parent), output_dir=home / "jobs" / name / "output",
        placement=(WorkerPlacement("trainer", 0, node),), env=env,
        resources={"trainer": Resources(1000, 256 * MI)}, home_dir=home,
        public_dir=data / "pfs" / "files" / "public",
    )  # fmt: skip


def _marked(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (the ones a worker left behind)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in (p.info["cmdline"] or []):
            found.append(p.pid)
    return found


def _until(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)
    return value


def _results(b: SlurmBackend, key: str) -> dict[str, Any]:
    text = b"".join(b.read_log(LogRequest(key, ("trainer-0",)))).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULTS ")]
    assert lines, f"no results in the log of {key}:\n{text[-3000:]}"
    results: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULTS "))
    return results


def test_a_sandboxed_worker_reaches_only_its_owners_data_and_a_stop_leaves_nothing(
    backend: SlurmBackend, data: Path, marker: str
) -> None:
    started = time.monotonic()
    bob = _launch(data, "bob", "n2", {"HOLD": "300", "MARKER": marker})
    backend.start(bob)
    sync_until(backend, bob.key, lambda s: states(s).get("trainer-0") == WorkerState.RUNNING)
    _until(lambda: _marked(marker), 30, "bob's worker left its process")

    files = data / "pfs" / "files"
    alice = _launch(data, "alice", "n1", {})
    targets = {
        "bob_file": str(files / "home" / "bob" / "secret.txt"), "bob_home": str(files / "home" / "bob"),
        "database": str(data / "paddlecloud.db"), "data_dir": str(data),
        "bob_job_dir": str(backend.root / "jobs" / "bob" / bob.name),
        "own_spec": str(backend.root / "jobs" / "alice" / alice.name / "run" / "trainer-0.0.jail.json"),
        "public_file": str(files / "public" / "data.txt"), "own_home": str(files / "home" / "alice"),
    }  # fmt: skip
    alice.env["TARGETS"] = json.dumps(targets)
    backend.start(alice)
    seen = sync_until(backend, alice.key, lambda s: s.finished, timeout=60)
    assert seen[-1].failure is None and states(seen[-1]) == {"trainer-0": WorkerState.SUCCEEDED}
    results = _results(backend, alice.key)

    for name in REFUSED:
        assert results[name][0] == "refused", f"{name}: the job got {results[name][1]}"
    for name in ALLOWED:
        assert results[name][0] == "ok", f"{name}: {results[name][1]}"
    assert results["uid"] == 1000 and results["hostname"].startswith("trainer-0-"), results
    # of the data dir the sandbox shows only the way to the job's own places
    assert results["data_dir_listing"][0] == "ok" and set(results["data_dir_listing"][1]) <= {"pfs", "slurm"}
    assert not (files / "home" / "bob" / "planted.txt").exists()
    assert not (files / "public" / "data.txt.planted").exists()
    assert (files / "home" / "alice" / "from-job.txt").read_text() == "written by the job"
    assert (alice.output_dir / "result.txt").read_text() == "written by the job"
    # a write to its spec's path lands in the sandbox's own /tmp (this data dir lies under /tmp)
    assert json.loads(Path(targets["own_spec"]).read_text())["user"] == "alice"

    backend.stop(bob.key, 1)
    _until(lambda: not _marked(marker), 10, f"bob's left-behind process still runs: {marker}")
    print(f"slurm confinement: {len(REFUSED)} refused, {len(ALLOWED)} allowed, stop left nothing; "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip


def test_a_node_failure_leaves_nothing_of_a_sandboxed_worker(
    backend: SlurmBackend, data: Path, slurm_sh: Callable[..., Any], marker: str
) -> None:
    job = _launch(data, "alice", "n3", {"HOLD": "300", "MARKER": marker})
    backend.start(job)
    sync_until(backend, job.key, lambda s: states(s).get("trainer-0") == WorkerState.RUNNING)
    _until(lambda: _marked(marker), 30, "the worker left its process")
    try:
        slurm_sh("kill-node", "n3")
        _until(lambda: not _marked(marker), 10, f"the left-behind process outlived its node: {marker}")
    finally:
        slurm_sh("revive-node", "n3")
