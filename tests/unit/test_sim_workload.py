"""sim.workload and sim.paper: the Pollux, Philly and EDL workloads and the paper's reference JCTs.

Reads the real files in ``../shared/data``; philly.csv (82k rows) is only streamed with a small
``limit``, never loaded whole.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.sim import (
    APPLICATIONS,
    EDL_APP,
    EDL_CLUSTER,
    LOADS,
    POLICIES,
    AppProfile,
    ElasticCpuModel,
    PaperResult,
    SimJob,
    ThroughputModel,
    edl_scenario,
    job_work,
    load_philly,
    load_pollux,
    load_pollux_dir,
    load_profiles,
    load_result,
    load_results,
    packed_nodes,
    philly_application,
    speedup_table,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
POLLUX = DATA / "pollux"
PHILLY = DATA / "philly" / "philly.csv"
WORKLOAD_DIRS = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5"}
GIB = 2**30


@pytest.fixture(scope="module")
def profiles() -> dict[str, AppProfile]:
    assert POLLUX.is_dir(), f"shared data missing: {POLLUX}"
    return load_profiles(POLLUX / "traces")


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, float], PaperResult]:
    return load_results(POLLUX / "results-jobload")


# ------------------------------------------------------------------------------------- Pollux


@pytest.mark.parametrize(("load", "jobs"), [(0.5, 80), (1.0, 160), (1.5, 240)])
def test_pollux_workloads_parse(profiles: dict[str, AppProfile], load: float, jobs: int) -> None:
    workloads = load_pollux_dir(POLLUX / WORKLOAD_DIRS[load])
    assert list(workloads) == [f"workload-{k}" for k in range(1, 9)]
    for name, wl in workloads.items():
        assert len(wl) == jobs, name
        assert len({j.name for j in wl}) == jobs
        assert [j.submit_time for j in wl] == sorted(j.submit_time for j in wl)
        assert wl[0].submit_time >= 0 and wl[-1].submit_time < 8 * 3600
        for j in wl:
            p = profiles[j.app]
            assert j.global_bsz in p.batch_sizes  # every workload batch has its own validation file
            assert 1 <= j.num_replicas <= p.max_replicas(j.global_bsz)
            assert not j.elastic and (j.lo, j.hi) == (j.num_replicas, j.num_replicas)
            assert j.replica == Resources(gpu=1)
            assert j.work is None and job_work(j, profiles) == p.work(j.global_bsz)


def test_pollux_first_job_by_hand() -> None:
    jobs = load_pollux(POLLUX / "workloads" / "workload-1.csv")
    assert jobs[0] == SimJob(
        name="cifar10-0", submit_time=107, app="cifar10", num_replicas=6, global_bsz=2048
    )
    assert jobs[2].app == "ncf" and jobs[2].global_bsz == 32768 and jobs[2].num_replicas == 1


def test_pollux_unknown_application_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\nx-0,1,resnet,1,64\n")
    with pytest.raises(ValueError, match="unknown application 'resnet'"):
        load_pollux(bad)


def test_isolated_run_time_matches_the_papers_fastest_tiresias_jobs(
    profiles: dict[str, AppProfile], results: dict[tuple[str, float], PaperResult]
) -> None:
    # A rigid job alone on packed GPUs: work / throughput, plus the artifact's 30 s restart delay.
    # The fastest of each kind at load 0.5 ran nearly alone: within 5%.
    jcts = results["tiresias", 0.5].jcts
    wl = load_pollux_dir(POLLUX / "workloads-0.5")
    for app, replicas, bsz in [
        ("bert", 16, 384),
        ("cifar10", 16, 4096),
        ("yolov3", 4, 64),
        ("deepspeech2", 12, 640),
    ]:
        p = profiles[app]
        ours = p.work(bsz) / p.throughput(replicas, packed_nodes(replicas), bsz) + 30
        theirs = min(
            jcts[w][j.name]
            for w, jobs in wl.items()
            for j in jobs
            if (j.app, j.num_replicas, j.global_bsz) == (app, replicas, bsz)
        )
        assert ours == pytest.approx(theirs, rel=0.05), (app, ours, theirs)


# ------------------------------------------------------------------------------------- Philly


PHILLY_SAMPLE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-03 10:00:00,600.0,1,600.0,aaa
2017-10-03 09:00:00,3600.0,2,7200.0,bbb
2017-10-03 09:30:00,7200.0,8,57600.0,aaa
2017-10-04 09:00:00,36000.0,16,576000.0,ccc
2017-10-03 09:00:00,100.0,1,100.0,aaa
"""


def test_philly_sample_by_hand(tmp_path: Path, profiles: dict[str, AppProfile]) -> None:
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_SAMPLE)
    jobs = load_philly(path, profiles=profiles)
    # sorted by time, ties by row; times relative to the earliest
    assert [j.name for j in jobs] == ["philly-1", "philly-4", "philly-2", "philly-0", "philly-3"]
    assert [j.submit_time for j in jobs] == [0, 0, 1800, 3600, 86400]
    assert [j.app for j in jobs] == ["bert", "cifar10", "yolov3", "cifar10", "imagenet"]
    assert [j.tenant for j in jobs] == ["bbb", "aaa", "aaa", "aaa", "ccc"]
    by = {j.name: j for j in jobs}
    # bert on 2 GPUs: smallest validated batch with >= 4 per GPU is 12
    assert (by["philly-1"].global_bsz, by["philly-1"].num_replicas) == (12, 2)
    # yolov3 on 8 GPUs: >= 4 per GPU -> 32; imagenet on 16: >= 20 per GPU -> 400
    assert by["philly-2"].global_bsz == 32 and by["philly-3"].global_bsz == 400
    for j in jobs:
        p = profiles[j.app]
        rate = p.throughput(j.num_replicas, packed_nodes(j.num_replicas), j.global_bsz)
        assert j.trace_duration is not None
        assert job_work(j, profiles) / rate == pytest.approx(j.trace_duration)  # the traced duration
    assert [j.name for j in load_philly(path, limit=2, profiles=profiles)] == ["philly-1", "philly-4"]
    assert load_philly(path, limit=0, profiles=profiles) == []


def test_philly_application_by_gpu_time() -> None:
    hour = 3600.0
    assert [philly_application(0.5 * hour, r) for r in (0, 1)] == ["cifar10", "ncf"]
    assert [philly_application(5 * hour, r) for r in (0, 1)] == ["deepspeech2", "bert"]
    assert philly_application(1 * hour, 0) == "deepspeech2"
    assert philly_application(50 * hour, 7) == "yolov3"
    assert philly_application(100 * hour, 7) == "imagenet"


def test_philly_real_trace_streams_the_earliest_jobs(profiles: dict[str, AppProfile]) -> None:
    jobs = load_philly(PHILLY, limit=40, profiles=profiles)
    assert len(jobs) == 40
    # the trace's first submission: 2017-09-04 10:30:41, 8 GPUs for 2,240,194 s (row 31566)
    first = jobs[0]
    assert (first.name, first.submit_time, first.trace_duration, first.num_replicas) == (
        "philly-31566",
        0.0,
        2240194.0,
        8,
    )
    assert first.app == "imagenet" and first.tenant == "7f04ca"
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)
    assert all(j.app in APPLICATIONS and j.work is not None and j.work > 0 for j in jobs)


# ---------------------------------------------------------------------------------------- EDL


def test_edl_scenario() -> None:
    jobs = edl_scenario()  # the scenario itself: tests/unit/test_sim_edl.py
    assert len(jobs) == 20
    assert jobs[0].submit_time == 0.0
    assert all(10.0 <= b.submit_time - a.submit_time <= 15.0 for a, b in itertools.pairwise(jobs))
    model = ElasticCpuModel()
    models: dict[str, ThroughputModel] = {EDL_APP: model}
    for j in jobs:
        assert j.elastic and (j.lo, j.hi, j.num_replicas) == (2, 60, 2)
        assert j.replica == Resources(cpu_m=5_000, memory=8 * GIB, gpu=0)
        assert job_work(j, models) == 4_000_000
    assert EDL_CLUSTER.total.gpu == 0 and EDL_CLUSTER.total.cpu_m == 133 * 17_500
    # 2 trainers take ~5.6 h, 60 take ~14 min
    assert 4_000_000 / model.throughput(2, 1, 0) == pytest.approx(5.58 * 3600, rel=0.01)
    assert 4_000_000 / model.throughput(60, 1, 0) == pytest.approx(824, rel=0.01)


def test_speedup_table(profiles: dict[str, AppProfile]) -> None:
    table = speedup_table(profiles["cifar10"], 4096, 16)
    assert len(table) == 16 and table[0] == 1.0
    assert table[3] == pytest.approx(
        profiles["cifar10"].throughput(4, 1, 4096) / profiles["cifar10"].throughput(1, 1, 4096)
    )
    assert speedup_table(ElasticCpuModel(), 0, 3)[1] == pytest.approx(2 / 1.004)


def test_simjob_validates_its_bounds() -> None:
    base = SimJob(name="j", submit_time=0, app="bert", num_replicas=4, global_bsz=96)
    with pytest.raises(ValueError, match="min_replicas <= num_replicas"):
        dataclasses.replace(base, min_replicas=5, max_replicas=8)
    with pytest.raises(ValueError, match="num_replicas must be"):
        dataclasses.replace(base, num_replicas=0)
    with pytest.raises(ValueError, match="work must be"):
        dataclasses.replace(base, work=0.0)
    with pytest.raises(ValueError, match="pservers must be"):
        dataclasses.replace(base, pservers=-1)
    elastic = dataclasses.replace(base, min_replicas=1, max_replicas=16)
    assert elastic.elastic and (elastic.lo, elastic.hi) == (1, 16)
    with pytest.raises(KeyError, match="no model for application 'bert'"):
        job_work(base, {})


# --------------------------------------------------------------------------------------- paper


def test_paper_summaries_hold_jcts_avgs_mean(results: dict[tuple[str, float], PaperResult]) -> None:
    assert set(results) == {(p, x) for p in POLICIES for x in LOADS}
    for (_, load), r in results.items():
        r.check()
        assert r.workloads == tuple(f"workload-{k}" for k in range(1, 9))
        assert {r.job_count(w) for w in r.workloads} == {int(160 * load)}


def test_paper_means_match_the_issue(results: dict[tuple[str, float], PaperResult]) -> None:
    exact = {
        ("pollux", 1.0): 2751.13359375,
        ("tiresias", 1.0): 4038.18203125,
        ("optimus", 1.0): 5681.933593749999,
        ("pollux", 2.0): 5289.199609375,
        ("tiresias", 2.0): 10039.5171875,
        ("optimus", 2.0): 9721.039453125,
    }
    quoted = {
        ("pollux", 1.0): 2751,
        ("tiresias", 1.0): 4038,
        ("optimus", 1.0): 5682,
        ("pollux", 2.0): 5289,
        ("tiresias", 2.0): 10040,
        ("optimus", 2.0): 9721,
    }
    for key, mean in exact.items():
        assert results[key].mean_avg_jct == pytest.approx(mean, abs=1e-9)
        assert round(results[key].mean_avg_jct) == quoted[key]


def test_paper_jobs_are_the_workload_jobs(results: dict[tuple[str, float], PaperResult]) -> None:
    for load, folder in WORKLOAD_DIRS.items():
        workloads = load_pollux_dir(POLLUX / folder)
        for policy in POLICIES:
            r = results[policy, load]
            for w, jobs in workloads.items():
                assert set(r.jcts[w]) == {j.name for j in jobs}


def test_paper_derived_views(results: dict[tuple[str, float], PaperResult]) -> None:
    r = load_result(POLLUX / "results-jobload", "tiresias", 1.0)
    assert r.avg_jct == results["tiresias", 1.0].avg_jct
    by_app = r.avg_jct_by_app()
    assert set(by_app) == set(APPLICATIONS)
    assert by_app["ncf"] < by_app["cifar10"] < by_app["imagenet"]
    assert r.percentile(0) == min(r.all_jcts()) and r.percentile(100) == max(r.all_jcts())
    one = r.avg_jct_by_app("workload-1")
    w1 = r.jcts["workload-1"]
    cifar = [v for k, v in w1.items() if k.startswith("cifar10-")]
    assert one["cifar10"] == pytest.approx(sum(cifar) / len(cifar))
