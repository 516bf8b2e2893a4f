"""scheduler.goodput: exact values of the goodput model on small hand-made step-time models."""

from __future__ import annotations

import math

import pytest

from paddlecloud.scheduler.goodput import (
    AdaptiveBatch,
    FittedStepTime,
    GoodputModel,
    efficiency,
    goodput,
    goodput_table,
    throughput,
)

#: step = 0.1 s + 0.01 s per sample of the local batch, + 0.05 s all-reduce on one node, 0.2 s across
MODEL = FittedStepTime(base=0.1, per_sample=0.01, sync_local=0.05, sync_net=0.2)
SPEC = AdaptiveBatch(init=100, lo=50, hi=400)


def test_efficiency_is_one_at_the_initial_batch_and_falls_with_the_noise_scale() -> None:
    assert efficiency(100.0, 100, 100) == 1.0
    assert efficiency(100.0, 100, 300) == pytest.approx(200 / 400)
    assert efficiency(100.0, 100, 50) == pytest.approx(200 / 150)  # smaller: each example worth more
    assert efficiency(1e12, 100, 400) == pytest.approx(1.0)  # pure noise: a larger batch costs nothing
    # unknown noise scale: a larger batch gains nothing, a smaller one loses nothing
    assert efficiency(0.0, 100, 400) == 0.25 and efficiency(0.0, 100, 50) == 1.0


def test_goodput_is_throughput_times_efficiency() -> None:
    assert goodput(MODEL, SPEC, 0.0, (1, 1), 100) == pytest.approx(100 / 1.1)
    # 2 replicas on one node, batch 200: local 100, step 0.1 + 1 + 0.05 s; efficiency 200 / 300
    assert throughput(MODEL, SPEC, (2, 1), 200) == pytest.approx(200 / 1.15)
    assert goodput(MODEL, SPEC, 100.0, (2, 1), 200) == pytest.approx(200 / 1.15 * 2 / 3)
    assert goodput(MODEL, SPEC, 100.0, (2, 2), 200) == pytest.approx(200 / 1.3 * 2 / 3)  # across nodes


def test_accumulation_above_the_largest_local_batch() -> None:
    spec = AdaptiveBatch(init=100, lo=100, hi=400, max_local=100)
    # batch 400 on one replica: 4 micro-steps of 100, each 1.1 s (no all-reduce on one replica)
    assert throughput(MODEL, spec, (1, 1), 400) == pytest.approx(400 / 4.4)
    # on 2 replicas: 2 micro-steps of 100; the compute of one is 1.1 s, the last adds the all-reduce
    assert throughput(MODEL, spec, (2, 1), 400) == pytest.approx(400 / (1.15 + 1.1))


def test_table_keeps_the_initial_batch_when_the_noise_scale_is_unknown() -> None:
    table = goodput_table(MODEL, SPEC, 0.0, [1, 1, 1])
    assert table.batches == (100, 100, 100)
    # relative to one replica at 100: 100 / (0.1 + 1) per s; n replicas: 100 / (0.1 + 1 / n + 0.05)
    assert table.speedup == pytest.approx((1.0, 1.1 / 0.65, 1.1 / (0.15 + 1 / 3)))
    assert table.batch(7) == 100 and table.batch(0) == 100


def test_table_takes_the_largest_batch_when_noise_dominates() -> None:
    noise = 1e9
    table = goodput_table(MODEL, SPEC, noise, [1, 1])
    assert table.batches == (400, 400)
    eff = (noise + 100) / (noise + 400)
    assert table.speedup[0] == pytest.approx(400 / 4.1 * eff / (100 / 1.1))
    assert table.speedup[1] == pytest.approx(400 / 2.15 * eff / (100 / 1.1))


def test_table_at_a_finite_noise_scale_is_the_best_candidate() -> None:
    """Brute force over every batch in [lo, hi]: the table's choice is within the candidates' grid
    (geometric, 24 steps) of the true optimum, and its goodput is what goodput() says."""
    noise = 300.0
    table = goodput_table(MODEL, SPEC, noise, [1, 1, 2, 2])
    base = goodput(MODEL, SPEC, noise, (1, 1), 100)
    for n, nodes in enumerate([1, 1, 2, 2], start=1):
        b = table.batches[n - 1]
        assert table.speedup[n - 1] == pytest.approx(goodput(MODEL, SPEC, noise, (n, nodes), b) / base)
        best = max(goodput(MODEL, SPEC, noise, (n, nodes), x) for x in range(50, 401))
        assert best * 0.99 <= goodput(MODEL, SPEC, noise, (n, nodes), b) <= best * (1 + 1e-12)


def test_table_gives_each_replica_at_least_min_local() -> None:
    spec = AdaptiveBatch(init=100, lo=50, hi=400, min_local=60)
    table = goodput_table(MODEL, spec, 0.0, [1, 1, 1, 1, 1, 1, 1, 1])
    assert all(b >= min(n * 60, 400) for n, b in enumerate(table.batches, start=1))
    assert table.batches[7] == 400  # 8 x 60 > 400: the largest batch is all there is


def test_goodput_model_caches_throughput_and_matches_goodput_table() -> None:
    gm = GoodputModel(MODEL, SPEC, (1, 1, 2, 2))
    for noise in (0.0, 50.0, 300.0, 1e6):
        assert gm.table(noise) == goodput_table(MODEL, SPEC, noise, [1, 1, 2, 2])


def test_spec_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="lo <= init <= hi"):
        AdaptiveBatch(init=10, lo=20, hi=40)


def test_fit_recovers_a_known_model() -> None:
    truth = FittedStepTime(base=0.05, per_sample=0.002, sync_local=0.03, sync_net=0.1)
    reports = [
        (r, n, b, truth.step_time(r, n, b))
        for r, n in ((1, 1), (2, 1), (4, 1), (4, 2), (8, 2))
        for b in (16.0, 32.0, 64.0)
    ]
    fit = FittedStepTime.fit(reports)
    assert fit is not None
    assert (fit.base, fit.per_sample, fit.sync_local, fit.sync_net) == pytest.approx(
        (0.05, 0.002, 0.03, 0.1), rel=1e-9, abs=1e-12
    )


def test_fit_with_little_to_go_on() -> None:
    assert FittedStepTime.fit([]) is None
    one = FittedStepTime.fit([(1, 1, 32.0, 0.64)])  # one batch size: half constant, half per sample
    assert one == FittedStepTime(0.32, 0.01, 0.0, 0.0)
    # no single-replica report: the compute line over all, the sync borrowed across node counts
    multi = FittedStepTime.fit([(2, 1, 10.0, 1.0), (2, 1, 20.0, 2.0)])
    assert multi is not None and multi.sync_net == multi.sync_local and math.isfinite(multi.per_sample)


def test_a_noise_scale_that_is_not_finite_counts_as_unknown() -> None:
    """A job reporting |G|^2 ~ 0 with a large variance must not get a negative or NaN goodput (it
    would never leave the least-served queue) nor break JSON views."""
    for bad in (math.inf, math.nan):
        assert efficiency(bad, 32, 64) == efficiency(0.0, 32, 64) == 0.5
        assert efficiency(bad, 32, 32) == 1.0
