"""Two jobs' task masters side by side: every lookup of a task (by lease, by index, by expiry) stays
within its own job, even when the two jobs' workers use the same lease id (lease ids are chosen by
the client) and the other job's rows come first in the table.

Found by bench/mutation.py: dropping ``TaskRow.queue_id == q.id`` from the lease retry, the
by-index lookup of renew / done / fail, or the expiry reclaim survived the rest of the suite, which
only ever runs one task master at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from task_helpers import Bench

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
