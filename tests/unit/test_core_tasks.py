"""core.tasks: the task master's pure decisions (splitting, leases, expiry, failures, passes)."""

from __future__ import annotations

import dataclasses

import pytest

from paddlecloud.core.tasks import (
    MIN_WAIT_S,
    WAIT_S,
    LeaseError,
    PassStep,
    TaskDef,
    TaskKind,
    TaskLimits,
    TaskSlot,
    TaskState,
    abandon,
    complete,
    expired,
    fail,
    grant,
    holder_gone,
    holder_name,
    item_tasks,
    next_pass,
    pass_step,
    reclaim,
    renew,
    retry_after,
    split_files,
)

LIMITS = TaskLimits(lease_seconds=10.0, max_failures=3)
T0 = 1000.0


def leased(
    lease: str = "L1", holder: str = "trainer-0", expires: float = T0 + 10, failures: int = 0
) -> TaskSlot:
    return TaskSlot(state=TaskState.LEASED, lease=lease, holder=holder, expires=expires, failures=failures)


# -- splitting ------------------------------------------------------------------------------------


def test_files_become_tasks_in_path_order() -> None:
    got = split_files([("b.txt", 5), ("a/c.txt", 7), ("a.txt", 0)], None)
    assert got == [
        TaskDef(TaskKind.FILE, "a.txt", 0, 0),
        TaskDef(TaskKind.FILE, "a/c.txt", 0, 7),
        TaskDef(TaskKind.FILE, "b.txt", 0, 5),
    ]


def test_large_files_become_consecutive_ranges_covering_every_byte() -> None:
    got = split_files([("big", 25), ("small", 10)], chunk_size=10)
    assert [(t.kind, t.path, t.offset, t.length) for t in got] == [
        (TaskKind.RANGE, "big", 0, 10),
        (TaskKind.RANGE, "big", 10, 10),
        (TaskKind.RANGE, "big", 20, 5),
        (TaskKind.FILE, "small", 0, 10),  # not larger than a chunk: one whole-file task
    ]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("*", ["d/x.csv", "p-1.txt", "p-2.txt"]), ("p-*", ["p-1.txt", "p-2.txt"]), ("*.csv", ["d/x.csv"])],
)
def test_pattern_matches_the_path_or_the_file_name(pattern: str, expected: list[str]) -> None:
    got = split_files([("p-2.txt", 1), ("p-1.txt", 1), ("d/x.csv", 1)], None, pattern)
    assert [t.path for t in got] == expected


def test_items_keep_their_order() -> None:
    assert [t.path for t in item_tasks(["z", "a", "m"])] == ["z", "a", "m"]
    assert {t.kind for t in item_tasks(["z"])} == {TaskKind.ITEM}


# -- leases: one table of (start, operation) -> outcome ------------------------------------------

CASES = [
    # (name, start, operation, expected slot or LeaseError)
    ("grant todo", TaskSlot(), lambda t: grant(t, "L1", "trainer-0", T0, LIMITS), leased()),
    ("grant leased", leased(), lambda t: grant(t, "L2", "trainer-1", T0, LIMITS), LeaseError),
    ("renew by holder", leased(), lambda t: renew(t, "L1", T0 + 5, LIMITS), leased(expires=T0 + 15)),
    ("renew by other", leased(), lambda t: renew(t, "L2", T0 + 5, LIMITS), LeaseError),
    (
        "renew expired, not retaken",
        leased(),
        lambda t: renew(t, "L1", T0 + 30, LIMITS),
        leased(expires=T0 + 40),
    ),
    (
        "fail: todo again, failure counted",
        leased(),
        lambda t: fail(t, "L1", LIMITS, "boom"),
        TaskSlot(failures=1, error="boom"),
    ),
    (
        "fail at the limit: failed",
        leased(failures=2),
        lambda t: fail(t, "L1", LIMITS, "boom"),
        TaskSlot(state=TaskState.FAILED, failures=3, error="boom"),
    ),
    ("fail by other", leased(), lambda t: fail(t, "L2", LIMITS, "x"), LeaseError),
    ("fail when todo", TaskSlot(), lambda t: fail(t, "L1", LIMITS, "x"), LeaseError),
    ("reclaim live lease: unchanged", leased(), lambda t: reclaim(t, T0 + 9.9, LIMITS), leased()),
    (
        "reclaim expired lease: todo, failure counted",
        leased(),
        lambda t: reclaim(t, T0 + 10, LIMITS),
        TaskSlot(failures=1, error="lease of trainer-0 expired"),
    ),
    (
        "reclaim expired at the limit: failed",
        leased(failures=2),
        lambda t: reclaim(t, T0 + 11, LIMITS),
        TaskSlot(state=TaskState.FAILED, failures=3, error="lease of trainer-0 expired"),
    ),
    ("reclaim todo: unchanged", TaskSlot(), lambda t: reclaim(t, T0 + 99, LIMITS), TaskSlot()),
]


@pytest.mark.parametrize(("start", "op", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lease_transitions(start: TaskSlot, op: object, expected: object) -> None:
    if expected is LeaseError:
        with pytest.raises(LeaseError):
            op(start)  # type: ignore[operator]
    else:
        assert op(start) == expected  # type: ignore[operator]


def test_complete_by_holder_records_the_lease_and_counts_once() -> None:
    done, new = complete(leased(), "L1")
    assert new and done.state == TaskState.DONE and done.done_lease == "L1" and done.lease == ""
    again, new_again = complete(done, "L1")  # a retried acknowledgement
    assert again == done and not new_again


@pytest.mark.parametrize(
    "start",
    [leased(), TaskSlot(), TaskSlot(state=TaskState.FAILED, failures=3)],
    ids=["leased by another", "todo (reclaimed)", "failed"],
)
def test_complete_without_the_lease_is_refused(start: TaskSlot) -> None:
    with pytest.raises(LeaseError):
        complete(start, "L9")


def test_an_expired_lease_still_completes_until_someone_else_takes_the_task() -> None:
    late = leased(expires=T0)
    assert expired(late, T0 + 1)
    assert complete(late, "L1")[0].state == TaskState.DONE
    retaken = grant(reclaim(late, T0 + 1, LIMITS), "L2", "trainer-1", T0 + 1, LIMITS)
    with pytest.raises(LeaseError):
        complete(retaken, "L1")
    assert complete(retaken, "L2")[0].done_lease == "L2"


def test_next_pass_forgets_everything_but_the_last_done_lease() -> None:
    t = dataclasses.replace(TaskSlot(state=TaskState.FAILED, failures=3, error="x"), done_lease="L1")
    assert next_pass(t) == TaskSlot(done_lease="L1")


# -- passes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "pass_no", "num_passes", "step"),
    [
        ({TaskState.TODO: 1, TaskState.LEASED: 3}, 0, 1, PassStep.LEASE),
        ({TaskState.LEASED: 1, TaskState.DONE: 3}, 0, 1, PassStep.WAIT),
        ({TaskState.DONE: 3, TaskState.FAILED: 1}, 0, 2, PassStep.NEXT_PASS),
        ({TaskState.DONE: 4}, 1, 2, PassStep.FINISHED),
        ({TaskState.FAILED: 4}, 0, 1, PassStep.FINISHED),
    ],
)
def test_pass_step(counts: dict[TaskState, int], pass_no: int, num_passes: int, step: PassStep) -> None:
    assert pass_step(counts, pass_no, num_passes) == step


@pytest.mark.parametrize(
    ("expiries", "wait"),
    [([], WAIT_S), ([T0 + 60], WAIT_S), ([T0 + 60, T0 + 0.1], 0.1), ([T0 - 5], MIN_WAIT_S), ([None], WAIT_S)],
)
def test_retry_after_is_bounded_and_follows_the_first_expiry(
    expiries: list[float | None], wait: float
) -> None:
    assert retry_after(expiries, T0) == pytest.approx(wait)


# -- holders that ended ---------------------------------------------------------------------------

RUNS = {"trainer-0": (0, False), "trainer-1": (2, False), "trainer-2": (1, True)}


@pytest.mark.parametrize(
    ("holder", "gone"),
    [
        ("trainer-0#0", False),  # its current run, alive
        ("trainer-1#1", True),  # an earlier run: the worker was restarted
        ("trainer-1#2", False),
        ("trainer-2#1", True),  # its current run ended (failed, retired, lost)
        ("trainer-9#0", False),  # not a worker of the job: never judged
        ("someone", False),
        ("", False),
    ],
)
def test_holder_gone(holder: str, gone: bool) -> None:
    assert holder_gone(holder, RUNS) is gone


def test_holder_names_carry_the_run() -> None:
    assert holder_name("trainer-1", 2) == "trainer-1#2"
    assert holder_name("", 2) == ""


def test_abandon_counts_a_failure_and_leaves_other_states_alone() -> None:
    t = abandon(leased(holder="trainer-1#0"), LIMITS)
    assert (t.state, t.failures, t.lease) == (TaskState.TODO, 1, "")
    assert "trainer-1#0 ended" in t.error
    assert abandon(leased(failures=2), LIMITS).state == TaskState.FAILED
    done = complete(leased(), "L1")[0]
    assert abandon(done, LIMITS) == done
