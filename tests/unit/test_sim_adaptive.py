"""sim.adaptive and the engine's adaptive-batch jobs: exact progress at any batch, the seeded choice
of adaptive jobs (measured profiles of ../shared/data; the CLI option: test_sim_output.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import paddlecloud.scheduler as scheduler
from paddlecloud.core.resources import Resources
from paddlecloud.sim import ClusterSpec, SimJob, load_profiles
from paddlecloud.sim.adaptive import AdaptiveModel
from paddlecloud.sim.engine import SimConfig, SimResult, simulate
from paddlecloud.sim.runner import RunSpec, choose_adaptive, make_adaptive, run_report

TRACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux" / "traces"
PROFILES = load_profiles(TRACES)
CLUSTER = ClusterSpec(nodes=2, node=Resources(cpu_m=64_000, memory=2**38, gpu=4))


def run(jobs: list[SimJob], name: str = "tiresias") -> SimResult:
    return simulate(jobs, PROFILES, scheduler.policy(name), SimConfig(CLUSTER))


def test_an_adaptive_jobs_work_is_the_fixed_jobs_exactly() -> None:
    for app, p in PROFILES.items():
        for b in p.batch_sizes:
            m = AdaptiveModel.of(p, b)
            assert m.work == p.work(b), app
            assert m.bounds[0] == 0 and list(m.bounds) == sorted(m.bounds)
            assert m.epoch(0.0) == 0 and m.epoch(m.work) == p.epoch_limit - 1


def test_advance_crosses_epochs_exactly() -> None:
    m = AdaptiveModel.of(PROFILES["cifar10"], 512)
    done, used = m.advance(0.0, 1e12, 1000.0, 512)  # at its initial batch: work / throughput
    assert done == m.work and used == pytest.approx(m.work / 1000.0, rel=1e-12)
    half, used = m.advance(0.0, m.work / 2000.0, 1000.0, 512)
    assert half == pytest.approx(m.work / 2, rel=1e-12) and used == pytest.approx(m.work / 2000.0)


def test_at_its_initial_batch_an_adaptive_job_finishes_when_the_fixed_one_does() -> None:
    for app, bsz, replicas in (("cifar10", 512, 2), ("deepspeech2", 80, 4), ("yolov3", 64, 4)):
        fixed = SimJob(f"{app}-0", 0.0, app, replicas, bsz)
        pinned = SimJob(f"{app}-0", 0.0, app, replicas, bsz, adaptive=(bsz, bsz))
        a, b = run([fixed]), run([pinned])
        assert b.jct[f"{app}-0"] == pytest.approx(a.jct[f"{app}-0"], rel=1e-9), app
        assert b.summary(8)["adaptive_stat_eff"] == 1.0


def test_a_larger_batch_at_a_large_noise_scale_finishes_sooner() -> None:
    p = PROFILES["ncf"]  # gradient noise scale of millions of samples: a larger batch is ~free
    m = AdaptiveModel.of(p, 1024)
    assert all(m.efficiency(8192, e) > 0.98 for e in range(1, p.epoch_limit))
    fixed = run([SimJob("ncf-0", 0.0, "ncf", 1, 1024)]).jct["ncf-0"]
    grown = run([SimJob("ncf-0", 0.0, "ncf", 1, 1024, adaptive=(1024, 8192))])
    assert grown.jct["ncf-0"] < 0.8 * fixed
    # the fixed-batch job's progress per sample at a smaller scale: efficiency < 1 at a larger batch
    # when the noise scale is small (yolov3's first epochs)
    y = AdaptiveModel.of(PROFILES["yolov3"], 64)
    assert y.efficiency(512, 0) < 0.2 and y.efficiency(8, 0) > 1.0


def test_the_engine_runs_an_adaptive_job_at_the_batch_its_admit_chose() -> None:
    seen: list[int] = []

    class Spy:
        name = "spy"

        def __init__(self) -> None:
            self.inner = scheduler.policy("tiresias")

        def schedule(self, snap: scheduler.Snapshot) -> scheduler.Plan:
            plan = self.inner.schedule(snap)
            seen.extend(a.batch_size for a in plan.admit)
            for job in snap.queue:
                assert job.batches and len(job.speedup) == job.hi == 1
            return plan

    res = simulate([SimJob("ncf-0", 0.0, "ncf", 1, 1024, adaptive=(1024, 8192))], PROFILES, Spy(),
                   SimConfig(CLUSTER))  # fmt: skip
    assert seen and seen[0] > 1024  # the table's best for one replica at ncf's noise scale
    assert res.summary(8)["adaptive_stat_eff"] < 1.0


def test_the_choice_of_adaptive_jobs_is_seeded() -> None:
    jobs = [SimJob(f"cifar10-{i}", float(i), "cifar10", 1, 128) for i in range(10)]
    a = choose_adaptive(jobs, 0.5, 0, "w")
    assert len(a) == 5 and a == choose_adaptive(jobs, 0.5, 0, "w")
    assert a != choose_adaptive(jobs, 0.5, 1, "w") or a != choose_adaptive(jobs, 0.5, 0, "v")
    assert choose_adaptive(jobs, 0.0, 0, "w") == set() and len(choose_adaptive(jobs, 1.0, 0, "w")) == 10
    made = make_adaptive(jobs[0], PROFILES["cifar10"], 64)
    assert made.adaptive == (128, 4096) and made.lo == 1 and made.hi == 64


def test_the_fraction_is_checked() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        RunSpec(["x.csv"], ["elastic"], adaptive_fraction=1.5)
    with pytest.raises(ValueError, match="pollux format"):
        RunSpec([], ["elastic"], format="edl", adaptive_fraction=0.5)


def test_the_goodput_policy_is_the_measured_opt_in_and_beats_elastic_on_a_pollux_workload() -> None:
    """``goodput`` by name is the variant bench/README.md measured (share + pack), and on a Pollux
    workload with every job adaptive it finishes jobs sooner on average than the default."""
    pol = scheduler.policy("goodput")
    assert pol == scheduler.GOODPUT and pol.name == "goodput"
    assert (pol.fair_p, pol.fair_group, pol.fair_exchange, pol.fair_restart_s, pol.pack) == (
        0.5,
        True,
        True,
        30.0,
        True,
    )
    spec = RunSpec(
        [str(TRACES.parent / "workloads" / "workload-1.csv")], ["elastic", "goodput"], adaptive_fraction=1.0
    )
    means = {name: s["mean"]["avg_jct_s"] for name, s in run_report(spec).summaries.items()}
    assert means["goodput"] < 0.95 * means["elastic"]  # measured 1,931 vs 2,090 s
