"""Restart policies on real processes: the local backend restarts failed workers or fails the job.

In-process platform (real controller, local backend, OS processes), the reconcile loop ticked by
hand. Every worker runs ``w.py`` below with a plan per worker, ``NAME=SLEEP/CODE,SLEEP/CODE,...``:
run i of NAME (counted in a file in the job's output dir, not by the platform) sleeps, then exits
with that code (the last entry repeats); a pserver that should exit 0 listens on its port instead
until it is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import paddlecloud
from paddlecloud.api.models import JobDetail, WorkerView
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import JobPhase, WorkerState

pytestmark = pytest.mark.timeout(90)

MakePackage = Callable[[dict[str, str]], Path]
Asgi = Callable[[Platform], httpx.Client]

WORKER = {
    "w.py": """\
import os, socket, sys, time
from pathlib import Path

worker, role = os.environ["PADDLECLOUD_WORKER"], os.environ["PADDLECLOUD_ROLE"]
counter = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"]) / f"{worker}.runs"
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
print(f"{worker} run {n} restart={os.environ['PADDLECLOUD_RESTART']} "
      f"endpoint={os.environ['PADDLECLOUD_CURRENT_ENDPOINT']}", flush=True)
plan = dict(arg.split("=") for arg in sys.argv[1:])
runs = [step.split("/") for step in plan.get(worker, "0/0").split(",")]
sleep, code = runs[min(n, len(runs) - 1)]
if role == "pserver" and code == "0":
    s = socket.create_server(("127.0.0.1", int(os.environ["PADDLECLOUD_PORT"])))
    print(f"{worker} listening", flush=True)
    time.sleep(600)
time.sleep(float(sleep))
print(f"{worker} run {n} exits {code}", flush=True)
sys.exit(int(code))
"""
}
DONE = {JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.KILLED}


def _alice(platform: Platform, asgi: Asgi) -> Client:
    return Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=asgi(platform))


def _submit(client: Client, package: Path, name: str, plan: str, **spec: Any) -> None:
    body = {"name": name, "entry": f"python w.py {plan}", **spec}
    body.setdefault("trainers", {})
    body["trainers"] = {"cpu": "500m", **body["trainers"]}
    client.submit(body, package_dir=package)


def _until(
    platform: Platform,
    client: Client,
    name: str,
    check: Callable[[JobDetail], bool],
    seen: list[JobDetail] | None = None,
    timeout: float = 30.0,
) -> JobDetail:
    """Tick until ``check(job)`` holds (bounded); every observation is appended to ``seen``."""
    deadline = time.monotonic() + timeout
    while True:
        platform.reconciler.tick()
        job = client.job(name)
        if seen is not None:
            seen.append(job)
        if check(job):
            return job
        assert time.monotonic() < deadline, f"{name}: {job.phase} {job.reason} {job.message} {job.events}"
        time.sleep(0.05)


def _worker(job: JobDetail, name: str) -> WorkerView:
    return next(w for w in job.workers if w.name == name)


def _restarts(job: JobDetail) -> list[str]:
    return [e.message for e in job.events if e.reason == "WorkerRestarted"]


def _runs(job: JobDetail, worker: str) -> int:
    return int((Path(job.output_dir) / f"{worker}.runs").read_text())


def test_on_failure_restarts_a_failing_trainer_until_it_succeeds(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    plan = "trainer-0=5/0 trainer-1=1/3,0.5/3,0.2/0"
    _submit(alice, make_package(WORKER), "flaky", plan, trainers={"count": 2, "restart": "OnFailure"},
            max_restarts=2, restart_backoff_s=0.3)  # fmt: skip
    job = _until(platform, alice, "flaky", lambda j: j.phase == JobPhase.RUNNING)
    endpoint = _worker(job, "trainer-1").endpoint
    seen: list[JobDetail] = []
    job = _until(platform, alice, "flaky", lambda j: j.phase in DONE, seen)

    assert job.phase == JobPhase.SUCCEEDED, job.message
    t1 = _worker(job, "trainer-1")
    assert (t1.restarts, t1.exit_code, t1.endpoint) == (2, 0, endpoint)
    assert _worker(job, "trainer-0").restarts == 0
    assert _runs(job, "trainer-1") == 3
    # the job stayed Running while trainer-1 waited for its restart
    waiting = [j for j in seen if _worker(j, "trainer-1").state == WorkerState.PENDING]
    assert waiting and all(j.phase == JobPhase.RUNNING for j in waiting)
    assert all(j.trainers.failed == 0 for j in seen)
    restarts = _restarts(job)
    assert len(restarts) == 2
    assert restarts[0].startswith("trainer-1 failed with exit code 3; restarting it as run 1 in 0.3 s")
    assert restarts[1].startswith("trainer-1 failed with exit code 3; restarting it as run 2 in 0.6 s")
    # each run has its own log; the failed run before the last is `logs --previous`
    assert list(alice.logs("flaky", worker="trainer-1")) == [
        f"trainer-1 run 2 restart=2 endpoint={endpoint}\n",
        "trainer-1 run 2 exits 0\n",
    ]
    assert list(alice.logs("flaky", worker="trainer-1", previous=True)) == [
        f"trainer-1 run 1 restart=1 endpoint={endpoint}\n",
        "trainer-1 run 1 exits 3\n",
    ]


def test_the_restart_limit_fails_the_job_and_says_so(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "doomed", "trainer-0=0.1/3", trainers={"restart": "OnFailure"},
            max_restarts=2, restart_backoff_s=0.05)  # fmt: skip
    job = _until(platform, alice, "doomed", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.FAILED
    assert "trainer-0 failed with exit code 3; restart limit 2 reached" in job.message
    t0 = _worker(job, "trainer-0")
    assert (t0.state, t0.restarts, t0.exit_code) == (WorkerState.FAILED, 2, 3)
    assert len(_restarts(job)) == 2
    assert _runs(job, "trainer-0") == 3


def test_a_worker_that_ran_stably_restarts_after_the_first_backoff_again(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    """Backoff 0.2 s doubling; runs 0 and 1 crash at once (0.2 s, 0.4 s), run 2 lasts 3.5 s, past the
    3 s reset period, so its restart waits 0.2 s again rather than 0.8 s; the count is recorded."""
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "steady", "trainer-0=0/3,0/3,3.5/3,0/0",
            trainers={"restart": "OnFailure"}, max_restarts=5, restart_backoff_s=0.2,
            restart_backoff_reset_s=3.0)  # fmt: skip
    job = _until(platform, alice, "steady", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.SUCCEEDED, job.message
    delays = [m.split(" in ")[1].split(" s ")[0] for m in _restarts(job)]
    assert delays == ["0.2", "0.4", "0.2"]
    assert "backoff reset: the run lasted" not in "".join(_restarts(job)[:2])
    assert "backoff reset: the run lasted" in _restarts(job)[2]
    book = json.loads((platform.ctx.config.cluster_dir / "jobs/alice/steady/restarts.json").read_text())
    assert (book["count"], book["workers"], book["streaks"]) == (3, {"trainer-0": 3}, {"trainer-0": 1})


def test_exit_code_policy_retries_listed_codes_and_fails_fast_on_others(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "picky", "trainer-0=0.1/75,0.1/3", trainers={"restart": "ExitCode"},
            retry_exit_codes=[75], max_restarts=5, restart_backoff_s=0.05)  # fmt: skip
    job = _until(platform, alice, "picky", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.FAILED
    assert job.message.startswith(
        "trainer-0 failed with exit code 3; exit code 3 is not retryable "
        "(ExitCode policy: signals and exit codes 75)"
    )
    assert _worker(job, "trainer-0").restarts == 1
    assert [m.split(";")[0] for m in _restarts(job)] == ["trainer-0 failed with exit code 75"]


def test_exit_code_policy_restarts_a_trainer_killed_by_sigkill(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "killed", "trainer-0=30/0,0.1/0", trainers={"restart": "ExitCode"},
            restart_backoff_s=0.1)  # fmt: skip
    job = _until(platform, alice, "killed", lambda j: "run 0" in "".join(alice.logs("killed")))
    pid = _worker(job, "trainer-0").pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    job = _until(platform, alice, "killed", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.SUCCEEDED, job.message
    t0 = _worker(job, "trainer-0")
    assert t0.restarts == 1 and t0.pid != pid
    (restart,) = _restarts(job)
    assert restart.startswith("trainer-0 was killed by signal 9 (SIGKILL); restarting it as run 1 in 0.1 s")
    previous = list(alice.logs("killed", worker="trainer-0", previous=True))
    assert previous == ["trainer-0 run 0 restart=0 endpoint=" + t0.endpoint + "\n"]  # killed mid-sleep


def test_never_fails_the_job_at_the_first_failure(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "plain", "trainer-0=0.1/3", max_restarts=5)
    job = _until(platform, alice, "plain", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.FAILED
    assert job.message == "trainer-0 failed with exit code 3 (see: paddlecloud logs -w trainer-0)"
    assert _restarts(job) == []
    assert _worker(job, "trainer-0").restarts == 0
    assert _runs(job, "trainer-0") == 1
    assert list(alice.logs("plain", worker="trainer-0", previous=True)) == []


def test_a_pserver_is_restarted_on_its_port_before_the_trainers_start(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "ps", "pserver-0=0.2/3,0/0 trainer-0=0.2/0",
            pservers={"count": 1, "restart": "OnFailure"}, restart_backoff_s=0.1)  # fmt: skip
    job = _until(platform, alice, "ps", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.SUCCEEDED, job.message
    ps = _worker(job, "pserver-0")
    assert (ps.state, ps.restarts) == (WorkerState.STOPPED, 1)
    assert _restarts(job)[0].startswith("pserver-0 failed with exit code 3; restarting it as run 1")
    assert list(alice.logs("ps", worker="pserver-0"))[-1] == "pserver-0 listening\n"
    previous = list(alice.logs("ps", worker="pserver-0", previous=True))
    assert previous == [f"pserver-0 run 0 restart=0 endpoint={ps.endpoint}\n", "pserver-0 run 0 exits 3\n"]


def test_a_worker_waiting_for_its_restart_is_restarted_after_a_server_restart(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    first = platform_factory()
    alice = _alice(first, asgi)
    _submit(alice, make_package(WORKER), "survivor", "trainer-0=6/0 trainer-1=0.3/3,0.2/0",
            trainers={"count": 2, "restart": "OnFailure"}, restart_backoff_s=2.0)  # fmt: skip
    job = _until(first, alice, "survivor", lambda j: bool(_restarts(j)))
    assert _worker(job, "trainer-1").state == WorkerState.PENDING
    first.close()  # the server stops while trainer-1 waits for its restart; trainer-0 keeps running
    book = json.loads((first.ctx.config.cluster_dir / "jobs/alice/survivor/restarts.json").read_text())
    assert book["count"] == 1 and book["pending"]["trainer-1"]["run"] == 1

    second = platform_factory(data_dir=first.ctx.config.data_dir)
    second.reconciler.adopt_all()
    alice = _alice(second, asgi)
    job = _until(second, alice, "survivor", lambda j: j.phase in DONE)

    assert job.phase == JobPhase.SUCCEEDED, job.message
    assert _worker(job, "trainer-1").restarts == 1
    assert len(_restarts(job)) == 1  # decided once, before the restart of the server
    assert "Adopted" in [e.reason for e in job.events]
    assert _runs(job, "trainer-1") == 2


def test_a_retired_trainer_is_never_restarted(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    _submit(alice, make_package(WORKER), "shrunk", "trainer-0=30/0 trainer-1=30/0",
            trainers={"count": 2, "restart": "OnFailure"}, restart_backoff_s=0.05)  # fmt: skip
    _until(platform, alice, "shrunk", lambda j: "trainer-1 run 0" in "".join(alice.logs("shrunk")))
    platform.ctx.backend.remove_trainer("alice/shrunk", 0.2)  # SIGTERM kills it (no handler): 143
    job = _until(platform, alice, "shrunk", lambda j: _worker(j, "trainer-1").state == WorkerState.STOPPED)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        job = _until(platform, alice, "shrunk", lambda j: True)
        assert _worker(job, "trainer-1").state == WorkerState.STOPPED
    assert _worker(job, "trainer-1").restarts == 0
    assert _restarts(job) == [] and job.phase == JobPhase.RUNNING
    alice.kill("shrunk", 0.5)


def test_train_takes_a_restart_policy_and_limit(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory()
    alice = _alice(platform, asgi)
    paddlecloud.train(make_package(WORKER), name="sdk", entry="python w.py trainer-0=0/3", client=alice,
                      restart_policy="OnFailure", max_restarts=1)  # fmt: skip
    job = _until(platform, alice, "sdk", lambda j: j.phase in DONE)
    assert (job.spec.trainers.restart, job.spec.pservers.restart) == ("OnFailure", "OnFailure")
    assert "trainer-0 failed with exit code 3; restart limit 1 reached" in job.message
    assert _worker(job, "trainer-0").restarts == 1
