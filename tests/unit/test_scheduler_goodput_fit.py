"""``FittedStepTime.fit``: the step-time model the server fits from an adaptive job's reports.

Reports from a single local batch cannot tell a step's constant cost from its per-sample cost. A line
through the origin (all per-sample) says a larger batch never runs faster per sample, so the goodput
table kept every job at its initial batch for good (the live test of the torch example grew 1 -> 4
trainers at batch 32). Half and half (AdaptDL's rule) lets the job try a larger batch; its reports
there then fit the real line.
"""

from __future__ import annotations

import pytest

from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, goodput_table


def test_reports_at_one_batch_split_the_time_between_constant_and_per_sample() -> None:
    fitted = FittedStepTime.fit([(1, 1, 32.0, 0.004), (1, 1, 32.0, 0.006)])
    assert fitted is not None
    assert (fitted.base, fitted.per_sample) == (pytest.approx(0.0025), pytest.approx(0.0025 / 32))
    assert fitted.step_time(1, 1, 32) == pytest.approx(0.005)  # the measurement itself is kept


def test_an_adaptive_job_measured_at_one_batch_is_offered_a_larger_one_on_more_replicas() -> None:
    fitted = FittedStepTime.fit([(1, 1, 32.0, 0.005)])
    assert fitted is not None
    table = goodput_table(fitted, AdaptiveBatch(init=32, lo=32, hi=1024), noise=200.0, nodes_for=[1, 1, 1, 1])
    assert table.batch(4) > 32 and table.batch(4) >= table.batch(1)
    assert table.speedup[3] > table.speedup[0]


def test_reports_at_two_batches_fit_the_line_they_lie_on() -> None:
    fitted = FittedStepTime.fit([(1, 1, 16.0, 0.1 + 0.01 * 16), (1, 1, 64.0, 0.1 + 0.01 * 64)])
    assert fitted is not None
    assert (fitted.base, fitted.per_sample) == (pytest.approx(0.1), pytest.approx(0.01))
