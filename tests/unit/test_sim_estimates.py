"""sim.estimates: each job's start and end estimate at submit against the actual ones, worked out by
hand on the fake linear model of test_sim_engine (10 samples/s per replica, rounds 60 s apart)."""

from __future__ import annotations

import pytest
from test_sim_engine import MODELS, ONE_NODE, Linear, sjob

import paddlecloud.scheduler as scheduler
from paddlecloud.sim.engine import SimConfig, simulate
from paddlecloud.sim.estimates import EstimateSpec, accuracy, declared_limit


def _run(jobs: list, policy: str, spec: EstimateSpec | None = None):  # type: ignore[no-untyped-def]
    cfg = SimConfig(ONE_NODE, round_s=60.0, restart_s=0.0, estimates=spec or EstimateSpec())
    return simulate(jobs, MODELS, scheduler.policy(policy), cfg)


def test_fifo_with_profiles_estimates_every_start_exactly() -> None:
    """a holds the node for 600 s; b (submitted at 30 s) waits for it, c (at 90 s) for both: fifo
    never lets a later job overtake, and the profiles are what the simulator runs, so each estimate
    made at submit is what happens."""
    jobs = [sjob("a", 0, 4, 24_000), sjob("b", 30, 4, 12_000), sjob("c", 90, 4, 6_000)]
    res = _run(jobs, "fifo")
    assert res.starts["b"] == {"submitted": 30, "estimated_start": 600.0, "actual_start": 600.0,
                               "estimated_end": 900.0, "actual_end": 900.0}  # fmt: skip
    assert res.starts["c"]["estimated_start"] == res.starts["c"]["actual_start"] == 900.0
    s = res.summary(4)
    assert s["start_estimate_median_abs_error_s"] == 0.0
    assert s["start_estimate_within_25pct"] == 1.0 and s["start_estimates"] == 3


def test_the_policy_s_own_rules_are_forecast_and_later_arrivals_are_what_it_misses() -> None:
    """tiresias: a (6,000 s on 4 GPUs) reaches the first LAS threshold (3,600 GPU-s) at 900 s, so b,
    submitted at 30 s, is told 900 s (preempting a), and c, at 60 s, the round after b's end (1,080 s):
    both exact. a was told 6,000 s at its submit; b and c, unknown then, cost it 360 s."""
    jobs = [sjob("a", 0, 4, 240_000), sjob("b", 30, 4, 6_000), sjob("c", 60, 4, 6_000)]
    res = _run(jobs, "tiresias")
    a, b, c = res.starts["a"], res.starts["b"], res.starts["c"]
    assert (b["estimated_start"], b["actual_start"], b["estimated_end"]) == (900.0, 900.0, 1050.0)
    assert (c["estimated_start"], c["actual_start"]) == (1080.0, 1080.0)
    assert (a["estimated_end"], a["actual_end"]) == (6000.0, 6360.0)
    s = res.summary(4)
    assert s["end_estimate_median_abs_error_s"] == 0.0 and s["start_estimate_jobs_waited"] == 2


def test_slurm_style_limits_are_the_duration_rounded_up() -> None:
    job = sjob("a", 0, 4, 24_000)  # 600 s on 4 replicas, + 30 s start-up
    assert declared_limit(job, Linear(), 24_000, 4, 30.0) == 900.0
    assert declared_limit(job, Linear(), 40 * 24_000, 4, 0.0) == 28_800.0  # 24,000 s -> 8 h
    assert declared_limit(job, Linear(), 32e6, 4, 0.0) == 2 * 604_800.0  # 800,000 s: whole weeks
    jobs = [sjob("a", 0, 4, 24_000), sjob("b", 30, 4, 12_000)]
    res = _run(jobs, "fifo", EstimateSpec(durations="limits"))
    # a's limit is 15 min (600 s rounded up): b is expected at 900 s, starts at 600 s
    assert res.starts["b"]["estimated_start"] == 900.0 and res.starts["b"]["actual_start"] == 600.0


@pytest.mark.parametrize(
    ("est", "actual", "hit"),
    [(100.0, 100.0, True), (110.0, 100.0, True), (130.0, 100.0, False), (None, 100.0, False)],
)
def test_within_25_percent_of_the_wait(est: float | None, actual: float, hit: bool) -> None:
    """Submitted at 20: the wait is 80 s, so 20 s off is within 25 %, 30 s is not; no estimate
    (beyond the forecast) is a miss; a job that started at once must have been told so."""
    rec = {"submitted": 20.0, "estimated_start": est, "actual_start": actual, "estimated_end": None,
           "actual_end": None}  # fmt: skip
    a = accuracy({"j": rec})
    assert a["start_estimate_within_25pct"] == (1.0 if hit else 0.0)
    at_once = {"submitted": 100.0, "estimated_start": 160.0, "actual_start": 100.0, "estimated_end": None,
               "actual_end": None}  # fmt: skip
    assert accuracy({"j": at_once})["start_estimate_within_25pct"] == 0.0
    assert accuracy({"j": at_once})["start_estimate_median_abs_error_s"] == 60.0
