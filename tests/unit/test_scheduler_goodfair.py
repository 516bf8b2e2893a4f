"""Goodput fairness (``scheduler.goodfair``): the greedy share against exhaustive search on small
hand-made cases, the restart discount, resource limits; and ``elastic`` using it for adaptive jobs."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import ElasticPolicy, JobRequest, NodeState, Snapshot, WorkerPlacement, policy
from paddlecloud.scheduler.goodfair import Claim, share, utility
from paddlecloud.scheduler.resizecost import FLOOR, paid_at, restart_factor

GI = 1 << 30
GPU = (1000, GI, 1)


def claim(key: str, rate: tuple[float, ...], lo: int = 1, held: int = 0, weight: float = 1.0) -> Claim:
    return Claim(key, lo, len(rate), held, GPU, rate, weight)


def best(claims: list[Claim], gpus: int, p: float, restart: float = 1.0) -> float:
    """The optimum by exhaustive search over every split of at most ``gpus`` extra trainers."""
    top = -float("inf")
    for counts in itertools.product(*(range(c.lo, c.hi + 1) for c in claims)):
        if sum(n - c.lo for n, c in zip(counts, claims, strict=True)) <= gpus:
            top = max(top, sum(c.value(n, p, restart) for n, c in zip(counts, claims, strict=True)))
    return top


def total(claims: list[Claim], counts: dict[str, int], p: float, restart: float = 1.0) -> float:
    return sum(c.value(counts[c.key], p, restart) for c in claims)


def test_harmonic_mean_splits_evenly_between_linear_jobs() -> None:
    counts, order = share(
        [claim("a", (1, 2, 3, 4, 5, 6)), claim("b", (1, 2, 3, 4, 5, 6))], (4000, 4 * GI, 4), -1
    )
    assert counts == {"a": 3, "b": 3}
    assert sorted(order) == ["a", "a", "b", "b"]


def test_weights_move_trainers_to_the_heavier_job() -> None:
    # minimise 4/n_a + 1/n_b with n_a + n_b = 6: (4, 2) gives 1.5, the best of the five splits
    claims = [claim("a", (1, 2, 3, 4, 5), weight=4), claim("b", (1, 2, 3, 4, 5))]
    assert share(claims, (4000, 4 * GI, 4), -1)[0] == {"a": 4, "b": 2}


def test_a_job_that_stops_scaling_gets_no_more() -> None:
    # b gains nothing past 2 trainers: the rest goes to a even at p = 1 (summed speed-up)
    claims = [claim("a", (1, 1.9, 2.7, 3.4, 4.0)), claim("b", (1, 1.5, 1.5, 1.5, 1.5))]
    counts, _ = share(claims, (6000, 6 * GI, 6), 1)
    assert counts == {"a": 5, "b": 2}


def concave_claims(rng: random.Random) -> list[Claim]:
    """Three claims with random concave speed-up tables (1 to 6 counts) and weights."""
    claims = []
    for k in range(3):
        rate, gain = [1.0], rng.uniform(0.3, 1.0)
        for _ in range(rng.randint(1, 5)):
            rate.append(rate[-1] + gain)
            gain *= rng.uniform(0.3, 1.0)  # falling gains: concave
        claims.append(claim(f"j{k}", tuple(rate), weight=rng.choice([1.0, 0.5, 2.0])))
    return claims


@pytest.mark.parametrize("p", [-2.0, -1.0, 0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", range(12))
def test_greedy_matches_exhaustive_search_on_concave_tables(p: float, seed: int) -> None:
    rng = random.Random(seed)
    claims = concave_claims(rng)
    gpus = rng.randint(0, 8)
    counts, order = share(claims, (1000 * gpus, GI * gpus, gpus), p)
    assert sum(counts[c.key] - c.lo for c in claims) == len(order) <= gpus
    assert total(claims, counts, p) == pytest.approx(best(claims, gpus, p))


@pytest.mark.parametrize("p", [-1.0, 0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", range(12))
def test_the_exchange_search_from_any_counts_reaches_the_optimum_on_concave_tables(
    p: float, seed: int
) -> None:
    # start from a random split of the trainers the claims hold (some free besides): moving one
    # trainer at a time to the largest gain from the least loss ends where the greedy from the mins does
    rng = random.Random(seed)
    claims = concave_claims(rng)
    start = [rng.randint(c.lo, c.hi) for c in claims]
    free = rng.randint(0, 3)
    counts, order = share(claims, (1000 * free, GI * free, free), p, start=start)
    gpus = sum(n - c.lo for n, c in zip(start, claims, strict=True)) + free
    assert sum(counts[c.key] - c.lo for c in claims) <= gpus
    assert all(c.lo <= counts[c.key] <= c.hi for c in claims)
    assert total(claims, counts, p) == pytest.approx(best(claims, gpus, p))
    assert len(order) >= sum(max(counts[c.key] - n, 0) for c, n in zip(claims, start, strict=True))


def test_the_exchange_search_moves_nothing_that_does_not_pay_for_its_restarts() -> None:
    # a and b run at 2 each, the same tables: moving one trainer from b to a costs both a restart
    # (x0.9) for a gain of nothing, so nothing moves; without the discount the split is kept too
    claims = [claim("a", (1, 2, 3, 4), held=2), claim("b", (1, 2, 3, 4), held=2)]
    for restart in (0.9, 1.0):
        assert share(claims, (0, 0, 0), 0.5, restart, start=[2, 2]) == ({"a": 2, "b": 2}, [])
    # b barely scales: at restart 1.0 its second trainer goes to a; at x0.5 it is not worth the restarts
    claims = [claim("a", (1, 2, 3, 4), held=2), claim("b", (1, 1.01, 1.02, 1.03), held=2)]
    assert share(claims, (0, 0, 0), 0.5, 1.0, start=[2, 2]) == ({"a": 3, "b": 1}, ["a"])
    assert share(claims, (0, 0, 0), 0.5, 0.5, start=[2, 2]) == ({"a": 2, "b": 2}, [])


def test_the_restart_discount_keeps_a_running_job_at_its_count() -> None:
    # without it 2 extra trainers split (2, 2); a, running at 1, keeps 1 when a change costs x0.5
    claims = [claim("a", (1, 2, 3, 4), held=1), claim("b", (1, 2, 3, 4))]
    room = (2000, 2 * GI, 2)
    assert share(claims, room, -1, restart=1.0)[0] == {"a": 2, "b": 2}
    counts, _ = share(claims, room, -1, restart=0.5)
    assert counts == {"a": 1, "b": 3}
    assert total(claims, counts, -1, 0.5) == pytest.approx(best(claims, 2, -1, 0.5))


def test_a_job_shrunk_below_its_count_gets_back_over_the_discount() -> None:
    # a runs at 4 and starts the share at 1: counts 2 and 3 are discounted, 4 is not; looking ahead
    # over the dip, it goes back to 4 rather than stopping at 1 or splitting the room with b
    claims = [claim("a", (1, 2, 3, 4), held=4), claim("b", (1, 1.2, 1.3, 1.35))]
    counts, _ = share(claims, (4000, 4 * GI, 4), -1, restart=0.8)
    assert counts["a"] == 4
    assert total(claims, counts, -1, 0.8) == pytest.approx(best(claims, 4, -1, 0.8))


def test_the_scarcest_resource_bounds_the_share() -> None:
    # 10 GPUs free but CPU for two more trainers only
    counts, order = share([claim("a", (1, 2, 3, 4, 5, 6))], (2500, 10 * GI, 10), 0)
    assert counts == {"a": 3} and order == ["a", "a"]


def test_utility_is_increasing_and_concave() -> None:
    for p in (-1.0, 0.0, 0.5, 1.0):
        u = [utility(x, p) for x in (1.0, 2.0, 3.0)]
        assert u[0] < u[1] < u[2] and u[1] - u[0] >= u[2] - u[1]
    assert utility(0.0, -1) == -float("inf")


# ------------------------------------------------------------------------------- in ``elastic``


def adaptive(key: str, at: float, attained: float, rate: tuple[float, ...]) -> JobRequest:
    return JobRequest(
        key=key, user="u", priority=0, submitted_at=at, pservers=0, pserver=Resources(), trainers=2,
        trainer=Resources(1000, GI, 1), min_trainers=1, max_trainers=len(rate), attained=attained,
        speedup=rate, batches=tuple(32 * n for n in range(1, len(rate) + 1)), resized_at=-1e9,
    )  # fmt: skip


def test_elastic_shares_among_adaptive_jobs_not_by_las_alone() -> None:
    # L has been served far longer and holds all 8 GPUs; N arrives. Under LAS alone N would be
    # topped up to its request (2) and grown by marginal speed-up; with goodput fairness the two
    # (same scaling) split the cluster evenly, L keeping its lowest trainers in place
    rate = (1.0, 1.9, 2.7, 3.4, 4.0, 4.5, 4.9, 5.2)
    node = NodeState("n0", Resources(64000, 256 * GI, 8), Resources(8000, 8 * GI, 8), ())
    placement = tuple(WorkerPlacement("trainer", i, "n0", (i,)) for i in range(8))
    served = dataclasses.replace(adaptive("L", 0, 10_000.0, rate), running=8, placement=placement)
    snap = Snapshot(
        cycle=1, now=1e6, nodes=(node,), queue=(adaptive("N", 5e5, 0.0, rate),), running=(served,)
    )
    plan = ElasticPolicy(fair_p=0.5).schedule(snap)
    assert [(a.job, len(a.placement)) for a in plan.admit] == [("N", 4)]
    assert [(r.job, r.trainers, r.batch_size) for r in plan.resize] == [("L", 4, 128)]
    assert [p.gpus for p in plan.resize[0].placement] == [(0,), (1,), (2,), (3,)]


def test_elastic_keeps_the_las_top_up_unless_asked() -> None:
    # the share is opt-in (``fair_p``): the default ``elastic`` tops adaptive jobs up in LAS order
    assert policy("elastic").fair_p is None  # type: ignore[attr-defined]


# ---------------------------------------------------- ``fair_group``: the adaptive jobs one claimant


def on_four(*jobs: tuple[JobRequest, int]) -> Snapshot:
    """One node of 4 GPUs held by ``jobs`` (each with that many trainers, lowest GPUs first)."""
    running, gpu = [], 0
    for job, n in jobs:
        placement = tuple(WorkerPlacement("trainer", i, "n0", (gpu + i,)) for i in range(n))
        running.append(dataclasses.replace(job, running=n, placement=placement))
        gpu += n
    node = NodeState("n0", Resources(64000, 256 * GI, 4), Resources(1000 * gpu, gpu * GI, gpu), ())
    return Snapshot(cycle=1, now=1e6, nodes=(node,), queue=(), running=tuple(running))


def fixed(key: str, at: float, attained: float, trainers: int) -> JobRequest:
    job = dataclasses.replace(
        adaptive(key, at, attained, (1.0, 1.9, 2.7, 3.4)), batches=(), trainers=trainers
    )
    return dataclasses.replace(job, speedup=(1.0, 1.9, 2.7, 3.4))


def resizes(pol: ElasticPolicy, snap: Snapshot) -> dict[str, int]:
    return {r.job: r.trainers for r in pol.schedule(snap).resize}


GROUP = ElasticPolicy(fair_p=0.5, fair_group=True)


def test_the_group_takes_its_reservation_from_fixed_jobs_later_in_the_order() -> None:
    # A (adaptive, asked 2, least served) holds 1; F (fixed-batch, served far more) holds 3. As one
    # claimant the group reserves A's 2 in the LAS order and takes it from F; without the group the
    # adaptive jobs share only what they hold and what is free (nothing): A stays at 1
    a = adaptive("A", 0, 0.0, (1.0, 1.9, 2.7, 3.4))
    f = dataclasses.replace(fixed("F", 0, 1e6, 1), min_trainers=1)
    snap = on_four((a, 1), (f, 3))
    assert resizes(GROUP, snap) == {"A": 2, "F": 2}
    assert resizes(ElasticPolicy(fair_p=0.5), snap) == {}


def test_a_fixed_job_ahead_takes_what_the_group_holds_beyond_its_reservation() -> None:
    # F (fixed-batch, asked 3, least served) holds 1; A (adaptive, asked 2, served more) holds 3:
    # F is ahead and the group holds 3 against a reservation of 0 so far, so F is topped up to 3
    # from it, A keeping its min; the share alone never lets an adaptive job give to a fixed one
    f = fixed("F", 0, 0.0, 3)
    a = adaptive("A", 0, 1e6, (1.0, 1.9, 2.7, 3.4))
    snap = on_four((f, 1), (a, 3))
    assert resizes(GROUP, snap) == {"F": 3, "A": 1}
    assert resizes(ElasticPolicy(fair_p=0.5), snap) == {}


def test_inside_the_group_the_share_decides_not_each_jobs_request() -> None:
    # two adaptive jobs, each asked 2; B (scales linearly) holds 3, A (barely scales) holds 1: the
    # group holds its reservation (4), so nobody is topped up to its own request and the share,
    # which gives the trainers to the job that uses them, keeps the counts (LAS top-up: A -> 2)
    a = dataclasses.replace(adaptive("A", 0, 0.0, (1.0, 1.05, 1.1, 1.12)), trainers=2)
    b = adaptive("B", 1, 0.0, (1.0, 2.0, 3.0, 4.0))
    snap = on_four((a, 1), (b, 3))
    assert resizes(GROUP, snap) == {}
    assert resizes(ElasticPolicy(), snap) == {"A": 2, "B": 2}


# ------------------------------------------ ``fair_restart_s``: restart-aware share (resizecost.py)


def test_a_claims_own_restart_factor_overrides_the_shares() -> None:
    # the case above where b's second trainer goes to a at restart 1.0: with b's own factor x0.3
    # the move no longer pays; with a's and b's own factor 1.0 it does even under a global x0.5
    a, b = claim("a", (1, 2, 3, 4), held=2), claim("b", (1, 1.01, 1.02, 1.03), held=2)
    slow = [a, dataclasses.replace(b, restart=0.3)]
    assert share(slow, (0, 0, 0), 0.5, 1.0, start=[2, 2]) == ({"a": 2, "b": 2}, [])
    free = [dataclasses.replace(a, restart=1.0), dataclasses.replace(b, restart=1.0)]
    assert share(free, (0, 0, 0), 0.5, 0.5, start=[2, 2]) == ({"a": 3, "b": 1}, ["a"])
    assert slow[1].value(1, 0.5, 1.0) == pytest.approx(utility(0.3, 0.5))


def test_the_restart_factor_grows_with_the_jobs_age() -> None:
    job = adaptive("A", 0.0, 0.0, (1.0, 2.0))
    # 1 - 2 x 30 / age, times the flat 0.9; never below the floor, however young
    assert restart_factor(job, 600.0, 30.0, 2.0, 0.9) == pytest.approx(0.9 * 0.9)
    assert restart_factor(job, 6000.0, 30.0, 2.0, 0.9) == pytest.approx(0.9 * 0.99)
    assert restart_factor(job, 10.0, 30.0, 2.0, 1.0) == FLOOR
    assert restart_factor(job, 60.0, 30.0, 1.0, 1.0) == pytest.approx(0.5)
    assert paid_at(dataclasses.replace(job, running=3), admitted=False) == 3
    assert paid_at(job, admitted=True) == 0


def free_gpus(job: JobRequest, n: int, now: float) -> Snapshot:
    """``job`` running on ``n`` of a 4-GPU node's GPUs, the rest free, at time ``now``."""
    snap = on_four((job, n))
    node = dataclasses.replace(snap.nodes[0], free_gpus=tuple(range(n, 4)))
    return dataclasses.replace(snap, nodes=(node,), now=now)


RESTART = ElasticPolicy(fair_p=0.5, fair_group=True, fair_exchange=True, fair_restart_s=30.0)


def test_a_young_job_is_not_grown_for_a_gain_an_old_one_takes() -> None:
    # A runs at 2 of 4 GPUs, 2 free; 4 trainers are 17 % faster. 120 s after its submit (and its
    # start: the grow step's 300 s cooldown holds step 4 back) a move must be 1 / (1 - 60 / 120) = 2x
    # faster to pay for the two restarts it must save: A stays. 10 hours later the factor is ~1 and
    # A grows, as it does at 120 s under the flat discount alone
    rate = (1.0, 1.8, 2.0, 2.1)
    a = dataclasses.replace(adaptive("A", 0.0, 0.0, rate), resized_at=0.0)
    assert resizes(RESTART, free_gpus(a, 2, 120.0)) == {}
    plain = dataclasses.replace(RESTART, fair_restart_s=None)
    assert resizes(plain, free_gpus(a, 2, 120.0)) == {"A": 4}
    assert resizes(RESTART, free_gpus(a, 2, 36_000.0)) == {"A": 4}


def test_the_share_may_undo_a_top_up_that_does_not_pay_for_its_restart() -> None:
    # A, asked 2, runs at 1 with 3 GPUs free and barely scales: the group's top-up grows it to 2.
    # The restart is paid against the count A ran at (1), so the share (from the mins) weighs 4
    # trainers (+10 %, discounted x0.9) against staying at 1 for free and keeps 1: no resize. Without
    # the rule the top-up's move made every count free and A is grown to 4. (Resized 100 s ago: the
    # grow step's cooldown holds step 4 back; submitted 10 hours ago: the age factor is ~1)
    a = dataclasses.replace(adaptive("A", 0.0, 0.0, (1.0, 1.05, 1.08, 1.1)), trainers=2, resized_at=35_900.0)
    snap = free_gpus(a, 1, 36_000.0)
    for exchange in (False, True):  # the exchange starts A at 1 too, the top-up's trainer free again
        on = ElasticPolicy(fair_p=0.5, fair_group=True, fair_exchange=exchange, fair_restart_s=30.0)
        assert resizes(on, snap) == {}
        assert resizes(dataclasses.replace(on, fair_restart_s=None), snap) == {"A": 4}
