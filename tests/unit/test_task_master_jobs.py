"""Two jobs' task masters side by side: every lookup of a task (by lease, by index, by expiry) stays
within its own job, even when the two jobs' workers use the same lease id (lease ids are chosen by
the client) and the other job's rows come first in the table.

Found by bench/mutation.py: dropping ``TaskRow.queue_id == q.id`` from the lease retry, the
by-index lookup of renew / done / fail, or the expiry reclaim, or the task id from the update that
hands on the leases of ended worker runs, survived the rest of the suite, which only ever runs one
task master at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from task_helpers import Bench

from paddlecloud.backends.base import WorkerStatus
from paddlecloud.controller.model.task_queue import release_ended
from paddlecloud.core.phases import WorkerState
from paddlecloud.store.tables import JobRow

pytestmark = pytest.mark.timeout(60)

SAME = "lease-000001"  # both jobs' first lease: a client may well pick the same id in two jobs


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


def states(bench: Bench, user: str, job: str) -> list[tuple[str, str, int]]:
    return [(t.path, t.state, t.failures) for t in bench.user(user).tasks.status(job).items]


def test_two_jobs_task_masters_never_touch_each_others_tasks(bench: Bench) -> None:
    bob, alice = bench.user("bob"), bench.user("alice")
    bench.submit(bob, "first", {"items": ["b0", "b1"], "lease_timeout": 30})  # its rows come first
    bench.submit(alice, "second", {"items": ["a0", "a1"], "lease_timeout": 30})
    wb, wa = bench.worker("bob", "first"), bench.worker("alice", "second")

    got_b = wb.tasks.lease("first", SAME, "trainer-0")
    got_a = wa.tasks.lease("second", SAME, "trainer-0")
    assert got_b.task is not None and got_a.task is not None
    assert (got_b.task.path, got_a.task.path) == ("b0", "a0")
    again = wa.tasks.lease("second", SAME, "trainer-0")  # a retried request: the same answer, its own job's
    assert again.task is not None and (again.task.path, again.task.leases) == ("a0", 1)

    wa.tasks.renew("second", 0, SAME)  # by index, within alice's job
    assert wa.tasks.done("second", 0, SAME).state == "done"
    assert states(bench, "bob", "first") == [("b0", "leased", 0), ("b1", "todo", 0)]

    bench.clock.advance(31)  # bob's lease has expired; only bob's task master may hand it on
    assert wa.tasks.lease("second", "lease-000002", "trainer-0").task is not None
    assert states(bench, "bob", "first") == [("b0", "leased", 0), ("b1", "todo", 0)]
    assert states(bench, "alice", "second") == [("a0", "done", 0), ("a1", "leased", 0)]
    handed_on = wb.tasks.lease("first", "lease-000002", "trainer-1")
    assert handed_on.task is not None and (handed_on.task.path, handed_on.task.failures) == ("b0", 1)


def test_leases_of_ended_runs_are_handed_on_in_their_own_job_only(bench: Bench) -> None:
    bob, alice = bench.user("bob"), bench.user("alice")
    bench.submit(bob, "first", {"items": ["b0"], "lease_timeout": 3600})
    bench.submit(alice, "second", {"items": ["a0"], "lease_timeout": 3600})
    for user, job in (("bob", "first"), ("alice", "second")):  # the same worker, run and lease id
        body = {"lease": SAME, "worker": "trainer-0", "run": 0}
        bench.worker(user, job).request("POST", f"/jobs/{job}/tasks/lease", json=body)
    restarted = WorkerStatus(name="trainer-0", role="trainer", index=0, state=WorkerState.RUNNING, restarts=1)
    with bench.platform.ctx.session() as s:
        job_id = s.scalar(select(JobRow.id).where(JobRow.user == "alice", JobRow.name == "second"))
        assert job_id is not None
        assert release_ended(s, job_id, [restarted]) == 1  # alice's run 0 ended: its lease goes
        s.commit()
    assert states(bench, "alice", "second") == [("a0", "todo", 1)]
    assert states(bench, "bob", "first") == [("b0", "leased", 0)]
