"""The data task master through the SDK in-process: splitting at submit, leases, expiry, failures,
passes, who may touch which tasks, and durability across a platform restart (manual clock)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from task_helpers import Bench

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, InvalidInput, NotFound, Unauthorized
from paddlecloud.backends.base import WorkerStatus
from paddlecloud.client import Client
from paddlecloud.controller.model.task_queue import release_ended
from paddlecloud.controller.services.tasks import JobLocks
from paddlecloud.core.phases import WorkerState
from paddlecloud.store.tables import JobRow, WorkerRow

pytestmark = pytest.mark.timeout(60)

FILES = {f"part-{i}.txt": "row\n" * (i + 1) for i in range(4)}  # 4, 8, 12, 16 bytes


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


@pytest.fixture
def alice(bench: Bench) -> Client:
    return bench.user("alice")


def lease_id(n: int) -> str:
    return f"lease-{n:06d}"


# -- splitting at submit --------------------------------------------------------------------------


def test_input_files_and_byte_ranges_become_tasks(bench: Bench, alice: Client) -> None:
    bench.upload(alice, {**FILES, "notes/readme.md": "hi"})
    bench.submit(alice, "ranges", {"chunk_size": "10", "pattern": "part-*"}, input="pfs:dataset")
    got = alice.tasks.status("ranges")
    assert [(t.kind, t.path, t.offset, t.length) for t in got.items] == [
        ("file", "part-0.txt", 0, 4),
        ("file", "part-1.txt", 0, 8),
        ("range", "part-2.txt", 0, 10),
        ("range", "part-2.txt", 10, 2),
        ("range", "part-3.txt", 0, 10),
        ("range", "part-3.txt", 10, 6),
    ]
    assert [t.index for t in got.items] == list(range(6))
    s = got.summary
    assert (s.total, s.todo, s.pass_no, s.num_passes, s.finished) == (6, 6, 0, 1, False)
    events = [e.reason for e in alice.job("ranges").events]
    assert "TasksPlanned" in events


def test_explicit_items_need_no_input(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "items", {"items": ["shard-b", "shard-a"], "num_passes": 3})
    got = alice.tasks.status("items")
    assert [(t.kind, t.path) for t in got.items] == [("item", "shard-b"), ("item", "shard-a")]
    assert got.summary.num_passes == 3


@pytest.mark.parametrize(
    ("tasks", "spec", "words"),
    [
        ({}, {}, "need an input"),
        ({"pattern": "*.csv"}, {"input": "pfs:dataset"}, "no file matching"),
        ({"items": ["a"], "chunk_size": "1Mi"}, {}, "either items or pattern"),
        ({"chunk_size": "lots"}, {"input": "pfs:dataset"}, "chunk_size"),
    ],
    ids=["no-input", "no-match", "items-and-chunks", "bad-size"],
)
def test_bad_task_specs_are_refused_at_submit(
    bench: Bench, alice: Client, tasks: dict[str, str], spec: dict[str, str], words: str
) -> None:
    bench.upload(alice, FILES)
    with pytest.raises(InvalidInput) as err:
        bench.submit(alice, "bad", tasks, **spec)
    assert words in err.value.message
    assert err.value.code == ErrorCode.INVALID_SPEC
    assert alice.jobs(all=True) == []  # nothing half-created


# -- leasing --------------------------------------------------------------------------------------


def test_trainers_lease_distinct_tasks_and_every_pass_sees_every_task_once(
    bench: Bench, alice: Client
) -> None:
    bench.submit(alice, "passes", {"items": ["a", "b", "c"], "num_passes": 2})
    w0, w1 = bench.worker("alice", "passes"), bench.worker("alice", "passes")
    n = 0

    def lease(w: Client, who: str) -> tuple[str, int | None, int]:
        nonlocal n
        n += 1
        r = w.tasks.lease("passes", lease_id(n), who)
        return r.status, (r.task.index if r.task else None), r.pass_no

    acks: list[tuple[int, int]] = []
    for p in range(2):
        a, b = lease(w0, "trainer-0"), lease(w1, "trainer-1")
        assert (a[:2], b[:2]) == (("leased", 0), ("leased", 1)) and a[2] == b[2] == p
        c = lease(w0, "trainer-0")
        assert c[:2] == ("leased", 2)
        assert lease(w1, "trainer-1")[0] == "wait"  # every remaining task is leased: wait, no new pass
        for i, lid in ((0, n - 3), (1, n - 2), (2, n - 1)):
            view = w0.tasks.done("passes", i, lease_id(lid))
            acks.append((p, view.index))
    assert lease(w0, "trainer-0")[0] == "finished"
    status = alice.tasks.status("passes")
    assert sorted(acks) == [(p, i) for p in range(2) for i in range(3)]
    assert [(t.state, t.done_passes, t.leases) for t in status.items] == [("done", 2, 2)] * 3
    assert status.summary.finished and status.summary.pass_no == 1


def test_retried_requests_get_the_same_answer_and_count_once(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "retry", {"items": ["a", "b"]})
    w = bench.worker("alice", "retry")
    first = w.tasks.lease("retry", lease_id(1), "trainer-0")
    again = w.tasks.lease("retry", lease_id(1), "trainer-0")  # the answer was lost: ask again
    assert first.task is not None and again.task is not None
    assert (again.task.index, again.lease) == (first.task.index, first.lease)
    w.tasks.done("retry", 0, lease_id(1))
    assert w.tasks.done("retry", 0, lease_id(1)).done_passes == 1  # a retried ack is not a second one
    assert alice.tasks.status("retry").items[0].leases == 1


def test_an_expired_lease_is_handed_out_again_and_the_old_holder_loses_it(
    bench: Bench, alice: Client
) -> None:
    bench.submit(alice, "expiry", {"items": ["a"], "lease_timeout": 30})
    w0, w1 = bench.worker("alice", "expiry"), bench.worker("alice", "expiry")
    w0.tasks.lease("expiry", lease_id(1), "trainer-0")
    bench.clock.advance(20)
    w0.tasks.renew("expiry", 0, lease_id(1))  # renewed: lasts until t+50
    bench.clock.advance(29)
    assert w1.tasks.lease("expiry", lease_id(2), "trainer-1").status == "wait"
    bench.clock.advance(2)  # t+51: expired
    r = w1.tasks.lease("expiry", lease_id(2), "trainer-1")
    assert r.status == "leased" and r.task is not None
    assert (r.task.index, r.task.holder, r.task.failures, r.task.leases) == (0, "trainer-1#0", 1, 2)
    with pytest.raises(Conflict) as err:
        w0.tasks.done("expiry", 0, lease_id(1))
    assert err.value.code == ErrorCode.LEASE_LOST
    assert w1.tasks.done("expiry", 0, lease_id(2)).state == "done"


def test_a_task_that_keeps_failing_is_recorded_failed_and_the_pass_goes_on(
    bench: Bench, alice: Client
) -> None:
    bench.submit(alice, "bad-task", {"items": ["poison", "fine"], "max_failures": 2})
    w = bench.worker("alice", "bad-task")
    for n in (1, 2):
        r = w.tasks.lease("bad-task", lease_id(n), "trainer-0")
        assert r.task is not None and r.task.index == 0
        w.tasks.fail("bad-task", 0, lease_id(n), "decoder crashed")
    r = w.tasks.lease("bad-task", lease_id(3), "trainer-0")
    assert r.task is not None and r.task.index == 1
    w.tasks.done("bad-task", 1, lease_id(3))
    assert w.tasks.lease("bad-task", lease_id(4), "trainer-0").status == "finished"
    status = alice.tasks.status("bad-task")
    assert [(t.state, t.failures, t.error) for t in status.items] == [
        ("failed", 2, "decoder crashed"),
        ("done", 0, ""),
    ]
    assert (status.summary.done, status.summary.failed) == (1, 1)
    assert [t.index for t in alice.tasks.status("bad-task", state="failed").items] == [0]


def test_leases_of_a_worker_run_that_ended_are_handed_on_at_once(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "dead", {"items": ["a", "b", "c"], "lease_timeout": 3600})
    w = bench.worker("alice", "dead")
    for n, (worker, run) in enumerate([("trainer-0", 0), ("trainer-1", 0), ("trainer-2", 3)]):
        w.request("POST", "/jobs/dead/tasks/lease", json={"lease": lease_id(n), "worker": worker, "run": run})
    w.tasks.done("dead", 0, lease_id(0))

    def status(name: str, run: int, state: WorkerState) -> WorkerStatus:
        return WorkerStatus(name=name, role="trainer", index=int(name[-1]), state=state, restarts=run)

    observed = [
        status("trainer-0", 1, WorkerState.PENDING),  # restarted, but its task was acknowledged: kept done
        status("trainer-1", 1, WorkerState.RUNNING),  # run 0 died, run 1 runs: run 0's lease goes
        status("trainer-2", 3, WorkerState.RUNNING),  # the run holding the lease is alive
    ]
    with bench.platform.ctx.session() as s:
        job_id = s.scalar(select(JobRow.id).where(JobRow.name == "dead"))
        assert job_id is not None
        assert release_ended(s, job_id, observed) == 1
        s.commit()
    items = alice.tasks.status("dead").items
    assert [(t.state, t.holder, t.failures) for t in items] == [
        ("done", "trainer-0#0", 0),
        ("todo", "", 1),
        ("leased", "trainer-2#3", 0),
    ]
    assert "trainer-1#0 ended" in items[1].error
    with pytest.raises(Conflict):
        w.tasks.done("dead", 1, lease_id(1))


def test_a_run_the_platform_saw_end_is_given_no_task_and_a_newer_run_keeps_its_own(
    bench: Bench, alice: Client
) -> None:
    """The two orders issue 11 asked about, decided without timing: a lease request of a killed run
    that reaches the server after the reconciler recorded the run's end (and released its leases)
    is refused, not granted until the next cycle; a run newer than the one the server recorded (it
    started after the last observation) leases, and its lease is not taken for a dead one's."""
    bench.submit(alice, "late", {"items": ["a", "b", "c"], "lease_timeout": 3600})
    with bench.platform.ctx.session() as s:  # what the reconciler recorded from the backend
        job = s.scalars(select(JobRow).where(JobRow.name == "late")).one()
        job.workers += [
            WorkerRow(
                name="trainer-1", role="trainer", index=1, state=WorkerState.PENDING, restarts=1
            ),  # run 0 died
            WorkerRow(
                name="trainer-2", role="trainer", index=2, state=WorkerState.FAILED, restarts=0
            ),  # run 0 ended
        ]
        s.commit()
        job_id = job.id
    w = bench.worker("alice", "late")

    def lease(n: int, worker: str, run: int) -> dict[str, object]:
        body = {"lease": lease_id(n), "worker": worker, "run": run}
        return dict(w.request("POST", "/jobs/late/tasks/lease", json=body).json())

    for n, (worker, run) in enumerate([("trainer-1", 0), ("trainer-2", 0)]):
        with pytest.raises(Conflict) as err:
            lease(n, worker, run)
        assert err.value.code == ErrorCode.LEASE_LOST and f"{worker}#{run} has ended" in err.value.message
    assert alice.tasks.status("late").summary.leased == 0  # nothing handed to a dead run
    assert lease(3, "trainer-1", 1)["status"] == "leased"  # the run that replaced it
    assert lease(4, "trainer-2", 1)["status"] == "leased"  # a run the server has not recorded yet
    observed = [
        WorkerStatus(name="trainer-1", role="trainer", index=1, state=WorkerState.RUNNING, restarts=1),
        WorkerStatus(name="trainer-2", role="trainer", index=2, state=WorkerState.FAILED, restarts=0),
    ]
    with bench.platform.ctx.session() as s:
        assert release_ended(s, job_id, observed) == 0  # trainer-2#1 is newer than the ended run 0
        s.commit()
    assert [(t.state, t.holder) for t in alice.tasks.status("late").items] == [
        ("leased", "trainer-1#1"),
        ("leased", "trainer-2#1"),
        ("todo", ""),
    ]


def test_job_locks_hold_one_job_at_a_time_and_are_dropped_when_free() -> None:
    locks, entered = JobLocks(), threading.Event()

    def second() -> None:
        with locks.hold(1):
            entered.set()

    with locks.hold(1), locks.hold(2):  # two jobs at once
        t = threading.Thread(target=second)
        t.start()
        assert not entered.wait(0.2)  # the same job waits
        assert len(locks) == 2
    t.join(timeout=5)
    assert entered.is_set() and len(locks) == 0  # nobody holds or waits: nothing kept


# -- paging ---------------------------------------------------------------------------------------


def test_tasks_are_listed_page_by_page_with_the_counts_of_all(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "paged", {"items": [f"shard-{i:02d}" for i in range(25)]})
    w = bench.worker("alice", "paged")
    for n in range(5):  # tasks 0..4 leased
        w.tasks.lease("paged", lease_id(n), "trainer-0")
    pages, after = [], None
    while True:
        page = alice.tasks.status("paged", limit=10, after=after)
        assert (page.summary.total, page.summary.leased, page.summary.todo) == (25, 5, 20)
        pages.append([t.index for t in page.items])
        if page.next_after is None:
            break
        after = page.next_after
    assert pages == [list(range(10)), list(range(10, 20)), list(range(20, 25))]
    todo = alice.tasks.status("paged", state="todo", limit=10)
    assert ([t.index for t in todo.items], todo.next_after) == (list(range(5, 15)), 14)
    last = alice.tasks.status("paged", state="todo", limit=10, after=14)
    assert ([t.index for t in last.items], last.next_after) == (list(range(15, 25)), None)
    counts_only = alice.tasks.status("paged", limit=0)
    assert (counts_only.items, counts_only.next_after, counts_only.summary.total) == ([], None, 25)
    every = alice.tasks.all("paged", page=7)
    assert [t.index for t in every.items] == list(range(25)) and every.next_after is None


def test_a_page_is_bounded_by_default_and_by_a_limit(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "big", {"items": [f"s{i}" for i in range(1500)]})
    first = alice.tasks.status("big")
    assert (len(first.items), first.next_after, first.summary.total) == (1000, 999, 1500)
    assert len(alice.tasks.all("big").items) == 1500
    for params in ({"limit": 10_001}, {"limit": -1}, {"after": -1}, {"limit": "many"}):
        with pytest.raises(InvalidInput) as err:
            alice.request("GET", "/jobs/big/tasks", params=params)
        assert err.value.code == ErrorCode.INVALID_REQUEST


# -- who may touch which tasks --------------------------------------------------------------------


def test_a_job_token_touches_only_its_own_jobs_tasks(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "mine", {"items": ["a"]})
    bench.submit(alice, "other", {"items": ["b"]})
    w = bench.worker("alice", "mine")
    for call in (
        lambda: w.tasks.status("other"),
        lambda: w.tasks.lease("other", lease_id(1), "x"),
        lambda: w.tasks.done("other", 0, lease_id(1)),
        lambda: w.tasks.status("mine", user="bob"),
    ):
        with pytest.raises(Forbidden) as err:
            call()
        assert err.value.code == ErrorCode.FORBIDDEN
    with pytest.raises(Unauthorized):  # a job token is no user token: the job API is closed to it
        w.jobs()
    assert w.tasks.status("mine").summary.total == 1


def test_users_see_only_their_own_jobs_tasks(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "mine", {"items": ["a"]})
    bench.submit(alice, "plain", {"items": ["a"]})
    bob, root = bench.user("bob"), bench.user("root", admin=True)
    with pytest.raises(NotFound) as err:
        bob.tasks.status("mine")
    assert err.value.code == ErrorCode.JOB_NOT_FOUND
    with pytest.raises(Forbidden):
        bob.tasks.status("mine", user="alice")
    assert root.tasks.status("mine", user="alice").summary.total == 1
    with pytest.raises(Unauthorized):
        bench.client("pcj_not-a-real-token").tasks.status("mine")


def test_errors_name_what_is_missing(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "tasks", {"items": ["a"]})
    pkg = bench.root / "plain-pkg"
    pkg.mkdir()
    (pkg / "main.py").write_text("print(1)\n")
    alice.submit({"name": "plain", "entry": "python main.py"}, package_dir=pkg)
    with pytest.raises(NotFound) as err:
        alice.tasks.status("plain")
    assert err.value.code == ErrorCode.NO_TASK_MASTER
    with pytest.raises(NotFound) as err:
        alice.tasks.done("tasks", 7, lease_id(1))
    assert err.value.code == ErrorCode.TASK_NOT_FOUND


def test_removing_the_job_removes_its_tasks_and_tokens(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "gone", {"items": ["a"]})
    w = bench.worker("alice", "gone")
    alice.kill("gone")
    alice.delete("gone")
    with pytest.raises(Unauthorized):
        w.tasks.status("gone")


# -- durability -----------------------------------------------------------------------------------


def test_a_restart_loses_no_task_and_repeats_none_acknowledged(bench: Bench, alice: Client) -> None:
    bench.submit(alice, "durable", {"items": ["a", "b", "c", "d"], "lease_timeout": 30})
    w = bench.worker("alice", "durable")
    for n in range(1, 4):
        w.tasks.lease("durable", lease_id(n), "trainer-0")
    w.tasks.done("durable", 0, lease_id(1))
    w.tasks.done("durable", 1, lease_id(2))  # task 2 stays leased by a trainer that will die

    bench.restart()
    alice, w = bench.user("alice"), bench.worker("alice", "durable")
    status = alice.tasks.status("durable")
    assert [t.state for t in status.items] == ["done", "done", "leased", "todo"]
    assert w.tasks.done("durable", 1, lease_id(2)).done_passes == 1  # the ack survived; a retry is no new one
    r = w.tasks.lease("durable", lease_id(4), "trainer-1")
    assert r.task is not None and r.task.index == 3  # never a done task
    w.tasks.done("durable", 3, lease_id(4))
    assert w.tasks.lease("durable", lease_id(5), "trainer-1").status == "wait"  # task 2's lease still runs
    bench.clock.advance(31)
    r = w.tasks.lease("durable", lease_id(5), "trainer-1")
    assert r.task is not None and (r.task.index, r.task.failures) == (2, 1)
    w.tasks.done("durable", 2, lease_id(5))
    assert w.tasks.lease("durable", lease_id(6), "trainer-1").status == "finished"
    assert [(t.state, t.done_passes) for t in alice.tasks.status("durable").items] == [("done", 1)] * 4
