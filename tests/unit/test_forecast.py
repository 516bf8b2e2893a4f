"""The start-time forecast (scheduler.forecast): exact small scenarios, bases, bounds."""

from __future__ import annotations

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Snapshot, WorkerPlacement, policy
from paddlecloud.scheduler.forecast import (
    Basis,
    ForecastConfig,
    Work,
    forecast,
    learned_work,
    least_sure,
    seconds_work,
)

GPU = Resources(4000, 16 * 2**30, 1)
NOW = 1000.0


def _node(name: str = "n0", used: int = 0) -> NodeState:
    return NodeState(name, GPU.times(4), GPU.times(used), tuple(range(used, 4)))


def _job(key: str, trainers: int = 4, submitted: float = 0.0, **kw: object) -> JobRequest:
    return JobRequest(
        key=key, user=key.split("/")[0], priority=0, submitted_at=submitted, pservers=0, pserver=Resources(),
        trainers=trainers, trainer=GPU, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _running(key: str, n: int = 4, node: str = "n0", **kw: object) -> JobRequest:
    placement = tuple(WorkerPlacement("trainer", i, node, (i,)) for i in range(n))
    return _job(key, n, running=n, placement=placement, **kw)


def _snap(
    queue: tuple[JobRequest, ...], running: tuple[JobRequest, ...], nodes: tuple[NodeState, ...]
) -> Snapshot:
    return Snapshot(cycle=7, now=NOW, nodes=nodes, queue=queue, running=running)


def test_a_job_behind_a_running_job_of_known_length_starts_the_round_after_it_ends() -> None:
    snap = _snap((_job("u/b", submitted=10),), (_running("u/a"),), (_node(used=4),))
    work = {"u/a": Work(1000.0, Basis.DECLARED), "u/b": Work(500.0, Basis.PROFILE)}
    fc = forecast(policy("fifo").schedule, snap, work, ForecastConfig(round_s=60, restart_s=30))
    a, b = fc.estimates["u/a"], fc.estimates["u/b"]
    assert (a.start, a.end, a.start_basis, a.end_basis) == (NOW, NOW + 1000, None, Basis.DECLARED)
    # a ends at +1000; the next round is at +1020 (rounds are 60 s apart): b starts then
    assert b.start == NOW + 1020
    assert b.end == NOW + 1020 + 30 + 500  # start-up, then its work
    assert (b.start_basis, b.end_basis) == (Basis.DECLARED, Basis.DECLARED)  # rests on a's declaration
    assert fc.complete and fc.horizon >= b.end


def test_a_job_that_fits_now_starts_now_and_rests_on_no_duration() -> None:
    snap = _snap((_job("u/b", trainers=2),), (_running("u/a", n=2),), (_node(used=2),))
    fc = forecast(policy("fifo").schedule, snap, {"u/b": Work(120.0, Basis.PROFILE)})
    b = fc.estimates["u/b"]
    assert (b.start, b.start_basis) == (NOW, None)
    assert b.end == NOW + 30 + 120
    # a has no Work: an hour at its size, unknown
    assert fc.estimates["u/a"].end_basis == Basis.UNKNOWN
    assert fc.estimates["u/a"].end == NOW + 3600


def test_the_queue_order_of_the_policy_decides_who_goes_first() -> None:
    """Two waiting jobs behind a running one: fifo starts the earlier first, the later after it."""
    queue = (_job("u/c", submitted=20), _job("u/b", submitted=10))
    snap = _snap(queue, (_running("u/a"),), (_node(used=4),))
    work = {k: Work(600.0, Basis.PROFILE) for k in ("u/a", "u/b", "u/c")}
    fc = forecast(policy("fifo").schedule, snap, work, ForecastConfig(round_s=60, restart_s=0))
    assert fc.estimates["u/b"].start == NOW + 600
    assert fc.estimates["u/c"].start == NOW + 1200
    assert fc.estimates["u/c"].start_basis == Basis.PROFILE


def test_elastic_speed_up_shortens_the_run_and_a_grown_job_ends_sooner() -> None:
    """An elastic job alone on a node grows to 4 trainers: its 800 s at 1 trainer take 200 s."""
    snap = _snap((_job("u/e", trainers=1, min_trainers=1, max_trainers=4),), (), (_node(),))
    fc = forecast(policy("elastic").schedule, snap, {"u/e": Work(800.0, Basis.DECLARED)},
                  ForecastConfig(round_s=60, restart_s=0))  # fmt: skip
    e = fc.estimates["u/e"]
    assert e.start == NOW
    assert e.end is not None and e.end < NOW + 800


def test_bounds_leave_unreached_jobs_without_an_estimate() -> None:
    snap = _snap((_job("u/b"),), (_running("u/a"),), (_node(used=4),))
    work = {"u/a": Work(100_000.0, Basis.DECLARED)}
    fc = forecast(policy("fifo").schedule, snap, work, ForecastConfig(max_rounds=3))
    assert not fc.complete and fc.rounds == 3
    assert fc.estimates["u/b"].start is None and fc.horizon == NOW + 180
    # a, still running when it stopped, ends when its speed then says
    assert fc.estimates["u/a"].end == NOW + 100_000 and fc.estimates["u/a"].end_basis == Basis.DECLARED
    calls = []
    fc = forecast(policy("fifo").schedule, snap, work, out_of_time=lambda: calls.append(1) or len(calls) > 1)
    assert fc.rounds == 2 and fc.estimates["u/b"].start is None


def test_a_job_no_node_can_hold_never_starts_and_the_forecast_ends() -> None:
    snap = _snap((_job("u/big", trainers=8, submitted=1),), (), (_node(),))
    fc = forecast(policy("fifo").schedule, snap, {})
    assert fc.estimates["u/big"].start is None and fc.rounds == 1


def test_the_snapshot_is_not_changed() -> None:
    snap = _snap((_job("u/b"),), (_running("u/a"),), (_node(used=4),))
    before = repr(snap)
    forecast(policy("elastic").schedule, snap, {"u/a": Work(300.0, Basis.PROFILE)})
    assert repr(snap) == before


def test_declared_and_learned_work() -> None:
    fresh = _job("u/a", trainers=2)
    assert seconds_work(fresh, 600.0) == Work(600.0, Basis.DECLARED)
    ran = _running("u/a", n=2, attained=2 * 200.0)  # 2 GPUs x 200 s: 200 s at its size
    assert seconds_work(ran, 600.0) == Work(400.0, Basis.DECLARED)
    overrun = _running("u/a", n=2, attained=2 * 900.0)
    assert seconds_work(overrun, 600.0) == Work(150.0, Basis.UNKNOWN)
    assert learned_work(ran, 0.25) == Work(600.0, Basis.LEARNED)  # 200 s for a quarter
    assert learned_work(ran, 0.001) is None and learned_work(_running("u/a", attained=10.0), 0.5) is None


@pytest.mark.parametrize(
    ("a", "b", "worst"),
    [(None, Basis.PROFILE, Basis.PROFILE), (Basis.LEARNED, Basis.DECLARED, Basis.DECLARED),
     (Basis.UNKNOWN, Basis.PROFILE, Basis.UNKNOWN), (None, None, None)],
)  # fmt: skip
def test_least_sure(a: Basis | None, b: Basis | None, worst: Basis | None) -> None:
    assert least_sure(a, b) == worst and least_sure(b, a) == worst
