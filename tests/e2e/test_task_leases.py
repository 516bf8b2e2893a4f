"""Task-master leases under concurrency, on SQLite and on a throw-away PostgreSQL server.

- eight trainers leasing at once from one server never get one task twice (the per-job lock);
- eight servers sharing one PostgreSQL database, one trainer each, never either (the row lock of
  the job's ``task_queues`` row, ``SELECT ... FOR UPDATE``);
- a lease of job X does not wait for a slow lease of job Y (the lock is per job, not per server).

The leases go straight to ``TaskService`` (what the routes call) from threads released together,
so the race is between real database sessions. Each PostgreSQL test gets a database of its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from paddlecloud.api.tasks import LeaseRequest
from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Identity, Platform, PlatformConfig
from paddlecloud.controller.services.tasks import TaskService
from paddlecloud.core import tasks as task_logic
from paddlecloud.core.clock import ManualClock
from paddlecloud.server import create_app
from paddlecloud.store.db import open_database
from paddlecloud.store.tables import TaskRow

from .postgres import fresh_database

with warnings.catch_warnings():  # Starlette warns at import that its TestClient prefers httpx2
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TRAINERS = 8
TASKS = 48
ALICE = Identity("alice", is_admin=False)


def open_platform(url: str, tmp_path: Path) -> Platform:
    config = PlatformConfig(
        data_dir=tmp_path / "data", database_url=url, backend_settings=LocalSettings(nodes=NodeShape(count=1))
    )
    return Platform.open(config, clock=ManualClock())


@pytest.fixture(params=["sqlite", "postgresql"])
def platform(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Platform]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'paddlecloud.db'}"
    else:
        url = fresh_database(request.getfixturevalue("postgres"))
    p = open_platform(url, tmp_path)
    yield p
    p.close()


def submit(platform: Platform, tmp_path: Path, name: str, items: int) -> None:
    """A job of ``items`` explicit tasks, submitted through the SDK (never started: leases need not)."""
    pkg = tmp_path / f"pkg-{name}"
    pkg.mkdir()
    (pkg / "main.py").write_text("print('unused')\n")
    token = platform.ensure_user("alice")
    with TestClient(create_app(platform, run_loop=False)) as http:
        client = Client(endpoint="http://testserver", token=token, http=http)
        spec = {
            "name": name,
            "entry": "python main.py",
            "tasks": {"items": [f"shard-{i}" for i in range(items)]},
        }
        client.submit(spec, package_dir=pkg)


def lease_together(
    services: list[TaskService], job: str
) -> tuple[list[tuple[int, str]], list[BaseException]]:
    """Trainer i leases through ``services[i]`` until nothing is todo, all starting at once; returns
    every (task index, lease id) handed out, and what the lease calls raised."""
    start = threading.Barrier(len(services))
    got: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def trainer(i: int, service: TaskService) -> None:
        try:
            start.wait(timeout=30)
            for n in itertools.count():
                lease = f"lease-{i}-{n:05d}"
                r = service.lease(ALICE, job, LeaseRequest(lease=lease, worker=f"trainer-{i}"))
                if r.status != "leased" or r.task is None:
                    return
                got.append((r.task.index, lease))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=trainer, args=(i, s)) for i, s in enumerate(services)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return got, errors


def assert_each_task_handed_out_once(
    platform: Platform, leased: tuple[list[tuple[int, str]], list[BaseException]]
) -> None:
    got, errors = leased
    indexes = sorted(i for i, _ in got)
    twice = sorted({i for i in indexes if indexes.count(i) > 1})
    assert not twice, f"tasks {twice} were handed to two trainers"
    assert not errors, errors
    assert indexes == list(range(TASKS))
    with platform.ctx.session() as s:
        rows = s.scalars(select(TaskRow).order_by(TaskRow.index)).all()
        assert [(r.state, r.leases) for r in rows] == [("leased", 1)] * TASKS
        assert {r.index: r.lease for r in rows} == dict(got)  # each trainer holds the lease it was given


def test_eight_concurrent_leases_on_one_server_never_share_a_task(platform: Platform, tmp_path: Path) -> None:
    submit(platform, tmp_path, "shared", TASKS)
    assert_each_task_handed_out_once(platform, lease_together([platform.tasks] * TRAINERS, "shared"))


def test_eight_servers_on_one_postgresql_database_never_share_a_task(postgres: str, tmp_path: Path) -> None:
    url = fresh_database(postgres)
    platform = open_platform(url, tmp_path)
    servers = [dataclasses.replace(platform.ctx, db=open_database(url)) for _ in range(TRAINERS)]
    try:
        submit(platform, tmp_path, "shared", TASKS)
        assert_each_task_handed_out_once(
            platform, lease_together([TaskService(c) for c in servers], "shared")
        )
    finally:
        for ctx in servers:
            ctx.db.dispose()
        platform.close()


def test_a_slow_lease_of_one_job_does_not_hold_up_another_jobs(
    platform: Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(platform, tmp_path, "job-x", 2)
    submit(platform, tmp_path, "job-y", 2)
    inside, go_on = threading.Event(), threading.Event()
    real: Callable[..., task_logic.PassStep] = task_logic.pass_step

    def pass_step(*args: object) -> task_logic.PassStep:
        if threading.current_thread().name == "slow-y":  # job Y's lease stops half-way, lock held
            inside.set()
            go_on.wait(timeout=30)
        return real(*args)

    monkeypatch.setattr(task_logic, "pass_step", pass_step)
    answers: dict[str, str] = {}

    def lease(job: str, lease_id: str) -> None:
        answers[job] = platform.tasks.lease(
            ALICE, job, LeaseRequest(lease=lease_id, worker="trainer-0")
        ).status

    slow = threading.Thread(target=lease, args=("job-y", "lease-y-0001"), name="slow-y")
    fast = threading.Thread(target=lease, args=("job-x", "lease-x-0001"))
    slow.start()
    try:
        assert inside.wait(timeout=30)
        fast.start()
        fast.join(timeout=10)
        assert not fast.is_alive(), "job X's lease waited for job Y's"
        assert answers == {"job-x": "leased"} and slow.is_alive()
    finally:
        go_on.set()
        slow.join(timeout=30)
        if fast.ident is not None:
            fast.join(timeout=30)
    assert answers == {"job-x": "leased", "job-y": "leased"}
