"""One user's job can neither reach into another's nor starve it, on the local backend (issue 24).

In-process platform (the reconcile loop ticked by hand), real sandboxed workers. Each test is one
finding of a hostile user against the code before the fix (main at 6dfcd95):

- another user's job connected to a running job's ports (the torch rendezvous store: code execution
  by unpickling) -> every job has a network namespace of its own;
- ``--memory 512Mi`` reached 6 GiB -> the worker is OOM-killed at its limit and says so;
- 5,000 forks and more -> the run stops at the pids limit;
- 7.3 GB of log in 25 s -> the log keeps at most ``--max-log-size``.

The network, memory and pids attacks run twice: on the host's system and from inside a container
image (issue 27; the test bed's image, ``scripts/ensure-registry.sh``).

Where this host cannot confine (not root: no namespaces or cgroups), the platform refuses
``--isolation sandbox`` and these tests are skipped with that reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from paddlecloud.api.models import JobDetail
from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.local.isolation import RunLimits
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import JobPhase, WorkerReason

pytestmark = pytest.mark.timeout(180)

MakePackage = Callable[[dict[str, str]], Path]
Asgi = Callable[[Platform], httpx.Client]

PEERS = {
    "peers.py": """\
import json, os, socket, time
from pathlib import Path

me = int(os.environ["PADDLECLOUD_TRAINER_ID"])
eps = os.environ["PADDLECLOUD_TRAINER_ENDPOINTS"].split(",")
out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
if me == 0:  # a store, as a rendezvous or a pserver would be
    srv = socket.socket()
    srv.bind(("0.0.0.0", int(eps[0].rpartition(":")[2])))
    srv.listen()
    srv.settimeout(1)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "stop").exists():
        try:
            conn, _ = srv.accept()
            conn.sendall(b"secret state")
            conn.close()
        except socket.timeout:
            pass
else:
    for _ in range(200):
        try:
            with socket.create_connection(tuple(eps[0].rsplit(":", 1)), timeout=2) as c:
                (out / "peer.txt").write_bytes(c.recv(100))
                break
        except OSError:
            time.sleep(0.1)
    time.sleep(120)
"""
}

SCAN = {
    "scan.py": """\
import errno, json, os, socket
from pathlib import Path

targets = [tuple(t.rsplit(":", 1)) for t in os.environ["TARGETS"].split(",")]
found = []
for host, port in targets:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        found.append(f"{host}:{port}")
    except OSError:
        pass
for port in range(1, 65536):  # every port of this loopback
    s = socket.socket()
    s.settimeout(0.5)
    if s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername():  # not itself
        found.append(f"127.0.0.1:{port}")
    s.close()
Path(os.environ["PADDLECLOUD_OUTPUT_DIR"], "found.json").write_text(json.dumps(found))
"""
}

HOG = {"hog.py": "x = bytearray(4 * 64 * 2**20)  # 4 x its --memory\nprint('survived', flush=True)\n"}

BOMB = {
    "bomb.py": """\
import os, time
kids = 0
while kids < 100000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    kids += 1
print(f"forked {kids}", flush=True)
time.sleep(300)
"""
}

SPEW = {
    "spew.py": """\
import sys, time
line = "x" * 99 + "\\n"
t = time.time()
while time.time() - t < 8:
    sys.stdout.write(line * 1000)
"""
}


def _platform(platform_factory: Callable[..., Platform], **settings: object) -> Platform:
    try:
        return platform_factory(isolation="sandbox", **settings)
    except IsolationError as exc:
        pytest.skip(f"this host cannot confine jobs: {exc}")


@pytest.fixture(params=["host", "image"])
def image(request: pytest.FixtureRequest) -> dict[str, str]:
    """Each attack twice: on the host's system, and from inside a container image (issue 27: the
    sandbox around an image's root is the same one); the image is the test bed's."""
    if request.param == "host":
        return {}
    bed = request.getfixturevalue("bed")
    return {"image": bed.image}


def _client(platform: Platform, asgi: Asgi, user: str) -> Client:
    return Client(endpoint="http://testserver", token=platform.ensure_user(user), http=asgi(platform))


def _until(platform: Platform, client: Client, name: str, check: Callable[[JobDetail], bool],
           timeout: float = 120) -> JobDetail:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        platform.reconciler.tick()
        job = client.job(name)
        if check(job):
            return job
        assert time.monotonic() < deadline, f"{name}: {job.phase} {job.message}"
        time.sleep(0.1)


def test_another_users_job_reaches_no_port_of_a_running_job_whose_own_workers_meet(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage, image: dict[str, str]
) -> None:
    platform = _platform(platform_factory)
    alice, bob = _client(platform, asgi, "alice"), _client(platform, asgi, "bob")
    alice.submit({"name": "a", "entry": "python peers.py", "trainers": {"count": 2, "cpu": "250m"}, **image},
                 package_dir=make_package(PEERS))  # fmt: skip
    job = _until(platform, alice, "a", lambda j: j.phase == JobPhase.RUNNING)
    peer = Path(job.output_dir) / "peer.txt"
    _until(platform, alice, "a", lambda j: peer.exists())
    assert peer.read_bytes() == b"secret state"  # the job's own workers reach each other
    targets = ",".join(w.endpoint for w in job.workers)
    scan_spec = {"name": "scan", "entry": "python scan.py", "env": {"TARGETS": targets},
                 "trainers": {"cpu": "1"}, **image}  # fmt: skip
    bob.submit(scan_spec, package_dir=make_package(SCAN))
    scan = _until(platform, bob, "scan", lambda j: j.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED))
    assert scan.phase == JobPhase.SUCCEEDED, scan.message
    assert json.loads((Path(scan.output_dir) / "found.json").read_text()) == []  # nothing at all
    (Path(job.output_dir) / "stop").write_text("")
    alice.kill("a", 0.5)


def test_a_worker_allocating_four_times_its_memory_is_oom_killed_and_says_so(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage, image: dict[str, str]
) -> None:
    platform = _platform(platform_factory)
    alice = _client(platform, asgi, "alice")
    alice.submit({"name": "hog", "entry": "python hog.py", "trainers": {"memory": "64Mi"}, **image},
                 package_dir=make_package(HOG))  # fmt: skip
    job = _until(platform, alice, "hog", lambda j: j.phase == JobPhase.FAILED)
    (w,) = job.workers
    assert w.reason == WorkerReason.OOM_KILLED and "64Mi" in w.message and w.exit_code == 137
    assert job.reason == "OOMKilled" and "submit --memory" in job.message
    log = "".join(alice.logs("hog"))
    assert "survived" not in log


def test_a_fork_bomb_stops_at_the_pids_limit(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage, image: dict[str, str]
) -> None:
    platform = _platform(platform_factory, limits=RunLimits(max_pids=64))
    alice = _client(platform, asgi, "alice")
    alice.submit({"name": "bomb", "entry": "python bomb.py", **image}, package_dir=make_package(BOMB))
    _until(platform, alice, "bomb", lambda j: "forked" in "".join(alice.logs("bomb")))
    forked = int("".join(alice.logs("bomb")).split("forked ")[1].split()[0])
    assert 0 < forked < 64  # the launcher, the shell and python count too
    alice.kill("bomb", 0.5)
    job = _until(platform, alice, "bomb", lambda j: j.phase == JobPhase.KILLED)
    assert "refused at the process limit (64)" in job.workers[0].message


def test_a_job_writing_logs_at_full_speed_keeps_at_most_its_limit(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    limit = 2 * 2**20
    platform = _platform(platform_factory, limits=RunLimits(max_log_bytes=limit))
    alice = _client(platform, asgi, "alice")
    spec = {"name": "spew", "entry": "python spew.py", "trainers": {"cpu": "1"}}
    alice.submit(spec, package_dir=make_package(SPEW))
    job = _until(platform, alice, "spew", lambda j: j.phase == JobPhase.SUCCEEDED)
    log = platform.ctx.config.data_dir / "cluster" / "jobs" / "alice" / "spew" / "logs" / job.workers[0].log
    text = log.read_text()
    assert log.stat().st_size <= limit and "bytes" in text and "were dropped here" in text
    dropped = int(text.split("[paddlecloud: ")[1].split(" bytes")[0].replace(",", ""))
    assert dropped > 10 * limit  # it wrote far more than it keeps
