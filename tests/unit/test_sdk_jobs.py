"""In-process SDK → ASGI app → controller → local backend: the job lifecycle with real processes.

The reconcile loop does not run by itself here (``run_loop=False``); ``drive`` ticks it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from paddlecloud._version import API_VERSION, MIN_CLIENT_API_VERSION
from paddlecloud.api import HEADER_API_VERSION, HEADER_MIN_API_VERSION
from paddlecloud.api.errors import Conflict, ErrorCode, NotFound
from paddlecloud.api.models import JobDetail
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import WorkerState

pytestmark = pytest.mark.timeout(60)

# fixture types (see conftest.py)
MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]
WaitGone = Callable[..., list[int]]

OK, FAILED, KILLED = "Succeeded", "Failed", "Killed"
RUNNING, QUEUED = "Running", "Queued"

HELLO = {"main.py": "import os\nprint('hello from', os.environ['PADDLECLOUD_WORKER'])\n"}
SLEEPER = {"main.py": "print('unused')\n"}


def submit(client: Client, package: Path, name: str, entry: str = "python main.py", **spec: object) -> None:
    client.submit({"name": name, "entry": entry, **spec}, package_dir=package)


def test_version_and_health(alice: Client, platform: Platform) -> None:
    v = alice.version()
    assert v.api_version == API_VERSION
    assert v.min_client_api_version == MIN_CLIENT_API_VERSION
    assert v.backend == "local"
    assert {"gpu", "adopt", "logs-follow"} <= set(v.capabilities)
    assert v.max_package_bytes == platform.ctx.config.max_package_bytes
    assert alice.health() is True


def test_every_response_carries_the_version_headers(raw_http: httpx.Client) -> None:
    for path in ("/api/v1/health", "/api/v1/jobs", "/api/v1/nope"):
        r = raw_http.get(path)
        assert r.headers[HEADER_API_VERSION] == str(API_VERSION)
        assert r.headers[HEADER_MIN_API_VERSION] == str(MIN_CLIENT_API_VERSION)


@pytest.mark.parametrize(
    ("trainers", "expected_lines"),
    [
        (1, ["hello from trainer-0\n"]),
        (2, ["[trainer-0] hello from trainer-0\n", "[trainer-1] hello from trainer-1\n"]),
    ],
)
def test_job_runs_to_success_with_logs(
    alice: Client, make_package: MakePackage, drive: Drive, trainers: int, expected_lines: list[str]
) -> None:
    submitted = alice.submit(
        {"name": "hello", "entry": "python main.py", "trainers": {"count": trainers}},
        package_dir=make_package(HELLO),
    )
    assert submitted.phase == QUEUED
    assert submitted.user == "alice"

    job = drive(alice, "hello", {OK, FAILED})
    assert (job.phase, job.reason) == (OK, "Completed"), job.message
    assert job.trainers.succeeded == trainers
    assert job.started_at is not None and job.finished_at is not None
    assert job.started_at <= job.finished_at
    reasons = [e.reason for e in job.events]
    assert reasons[:2] == ["Submitted", "Admitted"]
    assert reasons[-1] == "Completed"

    assert sorted(alice.logs("hello")) == expected_lines


def test_logs_of_one_worker_and_tail(alice: Client, make_package: MakePackage, drive: Drive) -> None:
    script = "import os\nw = os.environ['PADDLECLOUD_WORKER']\nfor i in range(5):\n    print(w, i)\n"
    submit(alice, make_package({"main.py": script}), "lines", trainers={"count": 2})
    drive(alice, "lines", {OK, FAILED})
    assert list(alice.logs("lines", worker="trainer-1")) == [f"trainer-1 {i}\n" for i in range(5)]
    assert list(alice.logs("lines", worker="trainer-0", tail=2)) == ["trainer-0 3\n", "trainer-0 4\n"]
    assert list(alice.logs("lines", tail=1)) == ["[trainer-0] trainer-0 4\n", "[trainer-1] trainer-1 4\n"]


def test_workers_of_a_finished_job(alice: Client, make_package: MakePackage, drive: Drive) -> None:
    submit(alice, make_package(HELLO), "two", trainers={"count": 2})
    drive(alice, "two", {OK, FAILED})
    workers = alice.workers("two")
    assert [(w.name, w.role, w.index) for w in workers] == [
        ("trainer-0", "trainer", 0),
        ("trainer-1", "trainer", 1),
    ]
    for w in workers:
        assert w.state == WorkerState.SUCCEEDED
        assert w.exit_code == 0
        assert w.node == "node-0"
        assert w.endpoint.startswith("127.0.0.1:")
        assert w.pid is not None
        assert w.log == f"{w.name}.0.log"  # its name, never the server's path (issue 25)
    assert len({w.endpoint for w in workers}) == 2


def test_list_hides_finished_jobs_unless_all(alice: Client, make_package: MakePackage, drive: Drive) -> None:
    pkg = make_package(HELLO)
    submit(alice, pkg, "done")
    drive(alice, "done", {OK, FAILED})
    submit(alice, pkg, "waiting", trainers={"cpu": "64"}, queue_anyway=True)
    assert [j.name for j in alice.jobs()] == ["waiting"]
    assert [j.name for j in alice.jobs(all=True)] == ["done", "waiting"]


def test_quota_counts_running_and_queued(alice: Client, make_package: MakePackage, drive: Drive) -> None:
    pkg = make_package(SLEEPER)
    empty = alice.quota()
    assert (empty.user, empty.jobs_running, empty.jobs_queued) == ("alice", 0, 0)
    assert (empty.used.cpu, empty.used.memory) == ("0", "0")
    assert (empty.cluster.cpu, empty.cluster.memory, empty.cluster.gpu) == ("4", "8Gi", 0)
    assert empty.limit is None

    submit(alice, pkg, "sleeper", entry="sleep 30", trainers={"count": 2, "cpu": "750m", "memory": "1Gi"})
    drive(alice, "sleeper", {RUNNING})
    submit(alice, pkg, "too-big", entry="sleep 30", trainers={"cpu": "16"}, queue_anyway=True)
    q = alice.quota()
    assert (q.jobs_running, q.jobs_queued) == (1, 1)
    assert (q.used.cpu, q.used.memory) == ("1500m", "2Gi")


def test_kill_running_job_leaves_no_process(
    alice: Client, make_package: MakePackage, drive: Drive, wait_gone: WaitGone
) -> None:
    submit(alice, make_package(SLEEPER), "sleeper", entry="sleep 30", trainers={"count": 2})
    drive(alice, "sleeper", {RUNNING})
    launchers = [w.pid for w in alice.workers("sleeper") if w.pid is not None]
    assert len(launchers) == 2
    assert all(psutil.pid_exists(pid) for pid in launchers)
    # wait (bounded) until every launcher has started its entry, so the entry's processes are checked too
    deadline = time.monotonic() + 5
    while True:
        kids = {p: [c.pid for c in psutil.Process(p).children(recursive=True)] for p in launchers}
        if all(kids.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert all(kids.values()), "a launcher never started its entry"
    pids = launchers + [k for ks in kids.values() for k in ks]

    view = alice.kill("sleeper")
    assert (view.phase, view.reason) == (KILLED, "Killed")
    assert "alice" in view.message
    assert wait_gone(pids) == []

    job = alice.job("sleeper")
    assert job.phase == KILLED and job.finished_at is not None
    assert {w.state for w in job.workers} == {WorkerState.STOPPED}
    with pytest.raises(Conflict) as info:
        alice.kill("sleeper")
    assert info.value.code == ErrorCode.JOB_NOT_RUNNING


def test_kill_queued_job(alice: Client, make_package: MakePackage) -> None:
    submit(alice, make_package(SLEEPER), "queued", entry="sleep 30")
    assert alice.kill("queued").phase == KILLED
    assert alice.job("queued").workers == []


def test_delete_removes_job_from_history(alice: Client, make_package: MakePackage, drive: Drive) -> None:
    submit(alice, make_package(HELLO), "gone")
    drive(alice, "gone", {OK, FAILED})
    alice.delete("gone")
    assert alice.jobs(all=True) == []
    with pytest.raises(NotFound) as info:
        alice.job("gone")
    assert info.value.code == ErrorCode.JOB_NOT_FOUND


def test_delete_running_job_kills_it_and_frees_the_name(
    alice: Client, make_package: MakePackage, drive: Drive, wait_gone: WaitGone
) -> None:
    pkg = make_package(SLEEPER)
    submit(alice, pkg, "busy", entry="sleep 30")
    drive(alice, "busy", {RUNNING})
    pids = [w.pid for w in alice.workers("busy") if w.pid is not None]
    alice.delete("busy")
    assert wait_gone(pids) == []
    assert alice.jobs(all=True) == []
    submit(alice, pkg, "busy", entry="sleep 30")  # the name can be used again
    assert alice.job("busy").phase == QUEUED


def test_failing_entry_fails_the_job_with_the_exit_code(
    alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    submit(alice, make_package({"main.py": "import sys\nprint('bad')\nsys.exit(3)\n"}), "broken")
    job = drive(alice, "broken", {OK, FAILED})
    assert job.phase == FAILED
    assert "exit code 3" in job.message
    assert job.trainers.failed == 1
    assert [w.exit_code for w in job.workers] == [3]
    assert any(e.type == "Warning" for e in job.events)


@pytest.mark.parametrize(
    ("trainers", "reason", "words"),
    [
        ({"cpu": "8"}, "ExceedsNodeCapacity", ["cpu 8", "largest node has cpu 4"]),
        ({"count": 2, "cpu": "3"}, "InsufficientResources", ["2 trainers (cpu 3", "cpu 4, memory 8Gi free"]),
        ({"memory": "16Gi"}, "ExceedsNodeCapacity", ["memory 16Gi"]),
    ],
)
def test_job_that_does_not_fit_stays_queued_with_a_reason(
    alice: Client,
    platform: Platform,
    make_package: MakePackage,
    trainers: dict[str, object],
    reason: str,
    words: list[str],
) -> None:
    submit(alice, make_package(SLEEPER), "big", entry="sleep 30", trainers=trainers, queue_anyway=True)
    for _ in range(3):
        platform.reconciler.tick()
    job = alice.job("big")
    assert (job.phase, job.reason) == (QUEUED, reason)
    for w in words:
        assert w in job.message
    assert [e.reason for e in job.events].count(reason) == 1  # one event, not one per cycle


def test_another_user_cannot_see_alices_job(
    alice: Client, client_for: Callable[..., Client], make_package: MakePackage
) -> None:
    submit(alice, make_package(SLEEPER), "private", entry="sleep 30")
    bob = client_for("bob")
    assert bob.jobs(all=True) == []
    for call in (bob.job, bob.workers, bob.kill, bob.delete, lambda n: list(bob.logs(n))):
        with pytest.raises(NotFound) as info:
            call("private")
        assert info.value.code == ErrorCode.JOB_NOT_FOUND
    assert alice.job("private").phase == QUEUED  # untouched by bob's attempts
    # and bob may use the same job name for his own job
    submit(bob, make_package(SLEEPER), "private", entry="sleep 30")
    assert [j.user for j in bob.jobs()] == ["bob"]


def test_a_kill_interrupted_by_a_server_stop_is_finished_on_restart(
    alice: Client, platform: Platform, make_package: MakePackage, drive: Drive
) -> None:
    from sqlalchemy import update

    from paddlecloud.store import JobRow

    pkg = make_package({"main.py": "import time\ntime.sleep(60)\n"})
    alice.submit({"name": "half-killed", "entry": "python main.py", "trainers": {"count": 1, "cpu": "100m"}},
                 package_dir=pkg)  # fmt: skip
    drive(alice, "half-killed", {RUNNING})
    (pid,) = [w.pid for w in alice.workers("half-killed")]
    with platform.ctx.session() as s:  # the state a crash between the kill's two steps leaves behind
        s.execute(update(JobRow).where(JobRow.name == "half-killed").values(stop_requested=True))
        s.commit()
    platform.reconciler.adopt_all()  # what a restarted server does first
    job = alice.job("half-killed")
    assert job.phase == KILLED
    assert job.message == "kill completed after a server restart"
    # Adopted in-process, the launcher is still this test's child: once dead it stays a zombie until the
    # (discarded) original handle would reap it. A restarted server is not its parent; no zombie there.
    for _ in range(50):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"worker {pid} still runs after the kill was finished")
