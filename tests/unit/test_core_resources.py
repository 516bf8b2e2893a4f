"""core.resources: resource vectors, arithmetic, fits and shortfall phrases."""

from __future__ import annotations

import pytest

from paddlecloud.core.resources import Resources

GI = 2**30


def test_add_sub_times() -> None:
    a = Resources(500, GI, 1)
    b = Resources(1500, 2 * GI, 2)
    assert a + b == Resources(2000, 3 * GI, 3)
    assert b - a == Resources(1000, GI, 1)
    assert a.times(3) == Resources(1500, 3 * GI, 3)
    assert a.times(0) == Resources()


def test_resources_are_immutable() -> None:
    r = Resources(1, 2, 3)
    with pytest.raises(AttributeError):
        r.cpu_m = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("need", "free", "fits"),
    [
        (Resources(1000, GI, 0), Resources(1000, GI, 0), True),
        (Resources(), Resources(), True),
        (Resources(1001, GI, 0), Resources(1000, GI, 0), False),
        (Resources(1000, GI + 1, 0), Resources(1000, GI, 0), False),
        (Resources(1000, GI, 1), Resources(1000, GI, 0), False),
        (Resources(0, 0, 0), Resources(-1, 0, 0), False),
    ],
)
def test_fits_in(need: Resources, free: Resources, fits: bool) -> None:
    assert need.fits_in(free) is fits


@pytest.mark.parametrize(
    ("need", "free", "phrases"),
    [
        (Resources(1000, GI, 0), Resources(2000, 2 * GI, 0), []),
        (Resources(4000, GI, 0), Resources(2000, 2 * GI, 0), ["cpu 4 > 2 free"]),
        (Resources(500, 2 * GI, 0), Resources(250, GI, 0), ["cpu 500m > 250m free", "memory 2Gi > 1Gi free"]),
        (Resources(0, 0, 2), Resources(0, 0, 1), ["gpu 2 > 1 free"]),
        (Resources(1000, 0, 0), Resources(-500, 0, 0), ["cpu 1 > 0 free"]),
        # a machine's memory is no round number: for people, not 24683656Ki (rounded down)
        (Resources(0, 24 * GI, 0), Resources(0, 24683656 * 2**10, 0), ["memory 24Gi > 23.5Gi free"]),
        (Resources(0, 24 * GI, 0), Resources(0, 24 * GI - 1, 0), ["memory 24Gi > 23.9Gi free"]),
    ],
)
def test_shortfall(need: Resources, free: Resources, phrases: list[str]) -> None:
    assert need.shortfall(free) == phrases


@pytest.mark.parametrize(
    ("r", "text"),
    [
        (Resources(500, 512 * 2**20, 0), "cpu 500m, memory 512Mi"),
        (Resources(2000, GI, 1), "cpu 2, memory 1Gi, gpu 1"),
        (Resources(2000, 24683656 * 2**10, 0), "cpu 2, memory 23.5Gi"),
    ],
)
def test_describe(r: Resources, text: str) -> None:
    assert r.describe() == text


def test_cpus_in_units_round_up_to_at_least_one_unit() -> None:
    assert Resources(250, 5, 1).cpus_in_units(1000) == Resources(1000, 5, 1)
    assert Resources(3000).cpus_in_units(1000) == Resources(3000)
    assert Resources(3001).cpus_in_units(1000) == Resources(4000)
    assert Resources(0).cpus_in_units(1000) == Resources(1000)  # Slurm's -c is at least 1
    assert Resources(250).cpus_in_units(1) == Resources(250)
