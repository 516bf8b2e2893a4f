"""sim.profiles: measured step time, accumulation, throughput and work of the Pollux applications.

Reads the real traces in ``../shared/data/pollux/traces`` (small CSVs); expected numbers are copied
from those files or computed by hand from them.
"""

from __future__ import annotations

import csv
import math
from itertools import pairwise
from pathlib import Path

import pytest

from paddlecloud.sim import (
    APPLICATIONS,
    EPOCH_LIMITS,
    AppProfile,
    ElasticCpuModel,
    load_profiles,
    packed_nodes,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TRACES = DATA / "pollux" / "traces"


@pytest.fixture(scope="module")
def profiles() -> dict[str, AppProfile]:
    assert TRACES.is_dir(), f"shared data missing: {TRACES}"
    return load_profiles(TRACES)


def placement_rows(app: str) -> list[dict[str, str]]:
    with (TRACES / app / "placements.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def row(app: str, placement: str, local_bsz: int) -> tuple[float, float]:
    for r in placement_rows(app):
        if r["placement"] == placement and int(r["local_bsz"]) == local_bsz:
            return float(r["step_time"]), float(r["sync_time"])
    raise LookupError((app, placement, local_bsz))


# ------------------------------------------------------------------------------------ loading


def test_every_application_loads_with_its_epoch_limit_and_batch_range(
    profiles: dict[str, AppProfile],
) -> None:
    assert set(profiles) == set(APPLICATIONS)
    expected_local = {
        "bert": (4, 12),
        "cifar10": (32, 1024),
        "deepspeech2": (10, 80),
        "imagenet": (20, 200),
        "ncf": (32, 32768),
        "yolov3": (4, 8),  # 11 and 16 are measured, but the paper caps yolov3 at 8
    }
    for name, p in profiles.items():
        assert p.epoch_limit == EPOCH_LIMITS[name]
        assert (p.min_local_bsz, p.max_local_bsz) == expected_local[name]
        assert p.init_batch_size == min(p.batch_sizes)
    assert profiles["cifar10"].batch_sizes == (128, 256, 512, 1024, 2048, 4096)


def test_unknown_application_needs_an_explicit_epoch_limit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="epoch limit"):
        AppProfile.load(tmp_path / "mystery")


# ---------------------------------------------------------------------------------- step time


@pytest.mark.parametrize("app", APPLICATIONS)
def test_step_time_at_a_measured_placement_is_the_csv_value(
    profiles: dict[str, AppProfile], app: str
) -> None:
    p = profiles[app]
    rows = placement_rows(app)
    counts: dict[tuple[int, int], set[str]] = {}
    for r in rows:
        pl = r["placement"]
        counts.setdefault((len(pl), sum(map(int, pl))), set()).add(pl)
    checked = 0
    for r in rows:
        pl, b = r["placement"], float(r["local_bsz"])
        if b > p.max_local_bsz:
            continue  # accumulated instead (yolov3 11 and 16)
        nodes, replicas = len(pl), sum(map(int, pl))
        assert p.placement_step_time([int(c) for c in pl], b) == float(r["step_time"])
        if counts[nodes, replicas] == {pl}:  # the only placement with these counts
            assert p.step_time(replicas, nodes, b) == float(r["step_time"])
            assert p.step_and_sync(replicas, nodes, b) == (float(r["step_time"]), float(r["sync_time"]))
            checked += 1
    assert checked >= 16 * 3  # 16 unique (nodes, replicas) pairs, >= 3 batches each


def test_placement_rotations_and_empty_nodes_are_normalized(profiles: dict[str, AppProfile]) -> None:
    p = profiles["cifar10"]
    step, _ = row("cifar10", "1242", 64)
    for spelled in [(1, 2, 4, 2), (2, 4, 2, 1), (4, 2, 1, 2), (0, 2, 1, 0, 2, 4)]:
        assert p.placement_step_time(spelled, 64) == step


def test_same_counts_average_their_placements(profiles: dict[str, AppProfile]) -> None:
    # 4 GPUs on 2 nodes: measured as '13' and '22'
    p = profiles["cifar10"]
    assert p.step_time(4, 2, 64) == pytest.approx(
        (row("cifar10", "13", 64)[0] + row("cifar10", "22", 64)[0]) / 2
    )


def test_linear_in_local_batch_between_measurements(profiles: dict[str, AppProfile]) -> None:
    p = profiles["cifar10"]
    (s32, y32), (s45, y45) = row("cifar10", "1", 32), row("cifar10", "1", 45)
    assert p.step_time(1, 1, 38.5) == pytest.approx((s32 + s45) / 2)
    assert p.step_and_sync(1, 1, 35.0)[1] == pytest.approx(y32 + (y45 - y32) * 3 / 13)


def test_below_the_smallest_batch_is_flat_above_the_largest_scales_compute(
    profiles: dict[str, AppProfile],
) -> None:
    p = profiles["ncf"]
    assert p.step_time(1, 1, 1) == row("ncf", "1", 32)[0]
    last = max(int(r["local_bsz"]) for r in placement_rows("ncf") if r["placement"] == "44")
    step, sync = row("ncf", "44", last)
    assert p.step_and_sync(8, 2, 2 * last) == pytest.approx((sync + 2 * (step - sync), sync))


def test_unmeasured_node_counts_interpolate_in_nodes_at_equal_gpus_per_node(
    profiles: dict[str, AppProfile],
) -> None:
    p = profiles["cifar10"]
    for b in (32.0, 100.0, 1024.0):
        four = p.step_and_sync(4, 4, b)  # '1111'
        six = p.step_and_sync(6, 6, b)  # scalability.csv
        five = p.step_and_sync(5, 5, b)
        assert five == pytest.approx(((four[0] + six[0]) / 2, (four[1] + six[1]) / 2))
        # 10 nodes x 4 GPUs: between 8 x 4 and 12 x 4
        s8, s12 = p.step_time(32, 8, b), p.step_time(48, 12, b)
        assert p.step_time(40, 10, b) == pytest.approx((s8 + s12) / 2)
        # beyond the 16 measured nodes: the 16-node value at the same GPUs per node
        assert p.step_time(128, 32, b) == p.step_time(64, 16, b)


def test_unmeasured_replica_count_interpolates_in_gpus_per_node(profiles: dict[str, AppProfile]) -> None:
    p = profiles["bert"]
    # 6 nodes: measured at 16 and 20 replicas, not 18
    assert p.step_time(18, 6, 8) == pytest.approx((p.step_time(16, 6, 8) + p.step_time(20, 6, 8)) / 2)


def test_bad_counts_are_rejected(profiles: dict[str, AppProfile]) -> None:
    p = profiles["bert"]
    for replicas, nodes in [(0, 1), (2, 3), (1, 0)]:
        with pytest.raises(ValueError):
            p.step_time(replicas, nodes, 8)


# ---------------------------------------------------------------------- accumulation, throughput


def test_gradient_accumulation_keeps_the_global_batch(profiles: dict[str, AppProfile]) -> None:
    y = profiles["yolov3"]
    plan = y.plan(4, 64)  # local 16 > 8: two micro-steps of 8
    assert (plan.micro_bsz, plan.accum_steps, plan.global_bsz) == (8, 2, 64)
    step, sync = row("yolov3", "4", 8)
    assert y.step_time(4, 1, 16) == pytest.approx(step + (step - sync))
    assert y.throughput(4, 1, 64) == pytest.approx(64 / (2 * step - sync))
    for p in profiles.values():
        for replicas in (1, 3, 7, 16, 64):
            for bsz in p.batch_sizes:
                plan = p.plan(replicas, bsz)
                assert plan.global_bsz == pytest.approx(bsz)
                assert plan.micro_bsz <= p.max_local_bsz + 1e-9
                assert plan.accum_steps == max(1, math.ceil(bsz / (replicas * p.max_local_bsz) - 1e-9))


def test_no_accumulation_at_or_below_the_cap(profiles: dict[str, AppProfile]) -> None:
    c = profiles["cifar10"]
    assert c.plan(2, 2048).accum_steps == 1  # exactly 1024 per GPU
    assert c.plan(1, 2048).accum_steps == 2
    assert c.throughput(1, 1, 1024) == pytest.approx(1024 / row("cifar10", "1", 1024)[0])


def test_artifact_plan_reproduces_the_papers_integer_rule(profiles: dict[str, AppProfile]) -> None:
    c, n = profiles["cifar10"], profiles["ncf"]
    assert c.artifact_plan(6, 2048).micro_bsz == 342  # ceil(341.33)
    # a single replica above init_batch_size always accumulates in the artifact
    plan = n.artifact_plan(1, 32768)
    assert (plan.micro_bsz, plan.accum_steps) == (16384, 2)
    assert n.plan(1, 32768).accum_steps == 1


def test_cifar10_throughput_grows_with_replicas_then_falls(profiles: dict[str, AppProfile]) -> None:
    c = profiles["cifar10"]
    rates = [c.throughput(r, packed_nodes(r), 4096) for r in range(1, 65)]
    assert all(a <= b for a, b in pairwise(rates[:11]))  # 1..11 replicas
    assert rates[15] > 12 * rates[0]  # 16 GPUs: > 12x one GPU
    peak = max(range(64), key=rates.__getitem__)
    assert 16 <= peak + 1 < 64 and rates[63] < rates[peak]


def test_max_replicas_keeps_min_local_batch(profiles: dict[str, AppProfile]) -> None:
    assert profiles["cifar10"].max_replicas(2048) == 64
    assert profiles["bert"].max_replicas(384) == 96
    assert profiles["imagenet"].max_replicas(6400) == 320
    assert profiles["yolov3"].max_replicas(64) == 16
    assert profiles["yolov3"].max_replicas(67) == 16
    assert profiles["cifar10"].max_replicas(16) == 1


# ----------------------------------------------------------------------------------------- work


def test_validation_files_have_one_row_per_epoch_up_to_the_limit() -> None:
    for app in APPLICATIONS:
        for path in (TRACES / app).glob("validation-*.csv"):
            with path.open() as f:
                assert sum(1 for _ in f) - 1 == EPOCH_LIMITS[app], path


def test_work_at_the_reference_batch_is_the_progress_target(profiles: dict[str, AppProfile]) -> None:
    # at init_batch_size every step earns exactly 1 progress: steps = min over files of the last row
    bert = profiles["bert"]
    assert bert.completion_progress == 14774.0  # validation-12.csv, row 2
    assert bert.work(12) == 12 * 14774.0
    cifar = profiles["cifar10"]
    # the smallest last-row progress is in validation-256.csv, not validation-128.csv (39063.0)
    assert cifar.completion_progress == 39062.90816659533
    assert cifar.work(128) == pytest.approx(128 * 39062.90816659533)


def test_work_at_a_larger_batch_by_hand(profiles: dict[str, AppProfile]) -> None:
    # bert at 384: scale 32; P(1) = 7387.0 (validation-12 row 1), P(2) = 14774.0;
    # grad_sqr, grad_var of validation-384.csv rows 1 and 2
    def gain(sqr: float, var: float) -> float:
        return (var + sqr) / (var / 32 + sqr)

    steps = 7387.0 / gain(6509198881259.403, 6086044601707605.0) + (14774.0 - 7387.0) / gain(
        43032304393.29889, 45868579275033.31
    )
    bert = profiles["bert"]
    assert bert.steps_to_complete(384) == pytest.approx(steps)
    assert bert.work(384) == pytest.approx(384 * steps)
    assert bert.measured_steps(384) == 480  # the real run: within 1%
    assert steps == pytest.approx(480, rel=0.01)


def test_larger_batches_need_more_samples(profiles: dict[str, AppProfile]) -> None:
    for p in profiles.values():
        works = [p.work(b) for b in p.batch_sizes]
        assert works[-1] > works[0]
        for b in p.batch_sizes:
            assert p.work(b) / b == pytest.approx(p.measured_steps(b), rel=0.6)


def test_unvalidated_batch_interpolates_grad_stats(profiles: dict[str, AppProfile]) -> None:
    c = profiles["cifar10"]
    lo, hi = c.grad_stats(256, 0), c.grad_stats(512, 0)
    assert c.grad_stats(384, 0) == pytest.approx(((lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2))
    assert c.grad_stats(64, 3) == c.grad_stats(128, 3)  # below the smallest file: clamped
    assert c.work(256) < c.work(384) < c.work(512)
    assert c.measured_steps(384) is None


# ------------------------------------------------------------------------------------ EDL model


def test_edl_model_is_near_linear_with_fixed_work() -> None:
    m = ElasticCpuModel()
    rates = [m.throughput(n, 1, 0) for n in range(1, 61)]
    assert all(a < b for a, b in pairwise(rates))
    assert rates[1] / (2 * rates[0]) > 0.99
    assert 0.8 < rates[59] / (60 * rates[0]) < 0.85
    assert m.work(1) == m.work(10_000) == 4_000_000
    assert m.max_replicas(128) == 60
    assert m.throughput(0, 1, 0) == 0.0
