"""What ``paddlecloud sim`` gives back: the per-round series, the summary JSON, the plot.

The series and utilisation figures are worked out by hand on the fake 10 samples/s-per-replica model
of test_sim_engine; the CLI runs in-process on tiny Pollux and Philly files written here (with the real
measured profiles from ``../shared/data``) and on the EDL scenario. matplotlib is a dev dependency, so
the plot tests run (never skip); the missing-matplotlib path is forced by failing its import.
"""

from __future__ import annotations

import builtins
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import paddlecloud.scheduler as scheduler
from paddlecloud.cli.main import main
from paddlecloud.core.resources import Resources
from paddlecloud.sim import ClusterSpec, SimJob
from paddlecloud.sim.engine import SimConfig, simulate
from paddlecloud.sim.plot import PlotUnavailable, plot_series
from paddlecloud.sim.runner import DEFAULT_POLICY, RunSpec, run_report
from paddlecloud.sim.series import Series, combine

TRACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux" / "traces"
ONE_NODE = ClusterSpec(nodes=1, node=Resources(cpu_m=64_000, memory=2**38, gpu=4))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = {
    "jobs", "unfinished", "avg_jct_s", "median_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s",
    "makespan_s", "gpu_util", "useful_gpu_util", "resizes", "preemptions", "goodput_util",
    "adaptive_stat_eff",
}  # fmt: skip


class Linear:
    name = "linear"

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        return 10.0 * replicas

    def work(self, global_bsz: float) -> float:
        return 600.0

    def max_replicas(self, global_bsz: float) -> int:
        return 4


class SquareRoot(Linear):
    """10 x sqrt(n) samples/s: parallel efficiency 1 / sqrt(n) (0.5 on 4 replicas)."""

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        return 10.0 * replicas**0.5


def sjob(name: str, at: float, replicas: int, work: float, app: str = "linear") -> SimJob:
    return SimJob(name, at, app, replicas, 64, work=work)


# ------------------------------------------------------------------------------ engine series


def test_one_row_per_round_and_one_per_idle_gap() -> None:
    # A (2 replicas) runs 0..120; B (4, submitted at 10) 120..150; C (2, at 20) 180..210; idle 240..1000;
    # D (1, at 1000) 1000..1030. Rows are rounds: what is held, what progressed, who waits, who runs.
    jobs = [sjob("A", 0, 2, 2400), sjob("B", 10, 4, 1200), sjob("C", 20, 2, 600), sjob("D", 1000, 1, 300)]
    r = simulate(jobs, {"linear": Linear()}, scheduler.policy("fifo"), SimConfig(ONE_NODE, restart_s=0.0))
    s = r.series
    assert s.t == [0, 60, 120, 180, 240, 1000]
    assert s.dt == [60, 60, 60, 60, 760, 60]
    assert s.allocated == [2, 2, 4, 2, 0, 1]
    assert s.useful == pytest.approx([2, 2, 2, 1, 0, 0.5])  # B, C, D finish half-way through their round
    assert s.queued == [0, 2, 1, 0, 0, 0]
    assert s.running == [1, 1, 1, 1, 0, 1]
    summary = r.summary(4)
    # 5 busy rounds x 4 GPUs = 1,200 GPU-s; 11 x 60 = 660 allocated; 7.5 x 60 = 450 useful
    assert summary["gpu_util"] == pytest.approx(660 / 1200)
    assert summary["useful_gpu_util"] == pytest.approx(450 / 1200)
    assert summary["makespan_s"] == pytest.approx(1030)
    assert summary["median_jct_s"] == pytest.approx((120 + 140) / 2)  # JCTs 30, 120, 140, 190


def test_useful_counts_parallel_efficiency_and_restarts() -> None:
    # 4 replicas at 1/sqrt(4) = 50% efficiency: 20 samples/s, 2,400 samples; a 30 s restart first.
    # Round 0: 30 s progressing x 4 GPUs x 0.5 = 60 GPU-s (1 GPU on average); then 2 GPUs per round.
    job = sjob("S", 0, 4, 2400, app="sqrt")
    r = simulate([job], {"sqrt": SquareRoot()}, scheduler.policy("fifo"), SimConfig(ONE_NODE, restart_s=30.0))
    assert r.jct == pytest.approx({"S": 150})
    assert r.series.allocated == [4, 4, 4]
    assert r.series.useful == pytest.approx([1.0, 2.0, 1.0])
    assert r.summary(4)["useful_gpu_util"] == pytest.approx((60 + 120 + 60) / (3 * 60 * 4))


# ------------------------------------------------------------------------------ resampling


def test_resample_is_time_weighted() -> None:
    s = Series()
    s.add(0, 60, 4, 2, 3, 1)
    s.add(60, 180, 0, 0, 0, 0)
    half = s.resample(2)  # bins of 120 s: [0, 120) = 60 s of 4 + 60 s of 0
    assert half.t == [0, 120] and half.dt == [120, 120]
    assert half.allocated == [2, 0] and half.useful == [1, 0] and half.queued == [1.5, 0]
    assert s.resample(1, span=480).allocated == [0.5]  # past its end the cluster is empty


def test_combine_puts_workloads_on_one_axis() -> None:
    a, b = Series(), Series()
    a.add(100, 60, 4, 4, 0, 1)  # starts at 100: shifted to 0
    b.add(0, 120, 2, 2, 2, 1)
    mean = combine([a, b], bins=2)
    assert mean.t == [0, 60]
    assert mean.allocated == [3, 1]  # (4 + 2) / 2, then (0 + 2) / 2
    assert combine([], 5).t == []


# ------------------------------------------------------------------------------ the CLI


def pollux_csv(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(
        "name,time,application,num_replicas,batch_size\n"
        "cifar10-0,0,cifar10,4,512\nncf-1,30,ncf,2,1024\nncf-2,60,ncf,8,1024\ncifar10-3,90,cifar10,2,256\n"
    )
    return path


def philly_csv(tmp_path: Path) -> Path:
    path = tmp_path / "philly.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:00:00,600.0,4,2400.0,c1\n2017-10-09 07:01:00,900.0,2,1800.0,c2\n"
        "2017-10-09 07:02:00,7200.0,8,57600.0,c1\n"
    )
    return path


def cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_json_has_every_figure_per_workload_and_mean_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wl, js, png = pollux_csv(tmp_path), tmp_path / "s.json", tmp_path / "p.png"
    code = cli("sim", str(wl), "--traces", str(TRACES), "--policy", "fifo,elastic",
               "--summary-json", str(js), "--plot", str(png))  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "USEFUL" in out.out and "elastic" in out.out
    doc = json.loads(js.read_text())
    assert set(doc["policies"]) == {"fifo", "elastic"}
    for per in doc["policies"].values():
        assert set(per) == {"tiny", "mean"}
        for figures in per.values():
            assert set(figures) == FIGURES
            assert figures["jobs"] == 4 and figures["unfinished"] == 0
            assert 0 < figures["useful_gpu_util"] <= figures["gpu_util"] <= 1
    assert doc["cluster"] == {"nodes": 16, "gpus_per_node": 4, "capacity": 64, "util_unit": "gpu"}
    assert doc["workloads"] == {"tiny": {"jobs": 4, "applications": {"cifar10": 2, "ncf": 2}}}
    assert "measured Pollux profiles" in doc["speedup_model"]
    assert "series" not in doc  # only with --series
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_series_flag_adds_bounded_series(tmp_path: Path) -> None:
    js = tmp_path / "s.json"
    assert cli("sim", "--format", "edl", "--passes", "1", "--policy", "fifo", "--policy", "elastic,fifo",
               "--summary-json", str(js), "--series", "25") == 0  # fmt: skip
    doc = json.loads(js.read_text())
    assert list(doc["policies"]) == ["fifo", "elastic"]  # repeats dropped, order kept
    assert doc["cluster"]["util_unit"] == "cpu_core" and doc["cluster"]["capacity"] == 2327  # 133 x 17.5
    assert "synthetic" in doc["speedup_model"]
    series = doc["series"]["elastic"]["pass-0"]
    assert set(series) == {"t_s", "gpu_util", "useful_gpu_util", "goodput_util", "adaptive_stat_eff",
                           "queued", "running"}  # fmt: skip
    assert all(len(col) == 25 for col in series.values())
    assert series["adaptive_stat_eff"] == [None] * 25  # no adaptive job
    assert max(series["gpu_util"]) <= 1.0 and series["t_s"][0] == 0


def test_philly_json_states_the_speedup_model(tmp_path: Path) -> None:
    js = tmp_path / "s.json"
    code = cli("sim", str(philly_csv(tmp_path)), "--format", "philly", "--traces", str(TRACES),
               "--policy", "elastic", "--summary-json", str(js))  # fmt: skip
    assert code == 0
    doc = json.loads(js.read_text())
    model = doc["speedup_model"]
    assert "Philly" in model and "traced duration" in model and "measured" in model
    # by GPU time: 0.67 h -> cifar10 (row 0), 0.5 h -> ncf (row 1), 16 h -> yolov3
    assert doc["workloads"]["philly"]["applications"] == {"cifar10": 1, "ncf": 1, "yolov3": 1}
    assert doc["policies"]["elastic"]["mean"]["unfinished"] == 0


def test_unknown_policy_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("sim", "--format", "edl", "--policy", "fifo,lottery") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'lottery' is not one of" in err


# ------------------------------------------------------------------------------ no matplotlib


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def fake(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


@pytest.mark.usefixtures("no_matplotlib")
def test_plot_without_matplotlib_is_one_error_line_after_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    js, png = tmp_path / "s.json", tmp_path / "p.png"
    code = cli("sim", "--format", "edl", "--passes", "1", "--policy", "fifo", "--summary-json", str(js),
               "--plot", str(png))  # fmt: skip
    out = capsys.readouterr()
    assert code == 1
    assert out.err == "error: --plot needs matplotlib, an optional extra: pip install 'paddlecloud[plot]'\n"
    assert "Traceback" not in out.out + out.err
    assert json.loads(js.read_text())["policies"]["fifo"]["mean"]["jobs"] == 20
    assert not png.exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_plot_series_raises_plot_unavailable(tmp_path: Path) -> None:
    report = run_report(RunSpec([], ["fifo"], format="edl", passes=1))
    with pytest.raises(PlotUnavailable, match=r"paddlecloud\[plot\]"):
        plot_series(report.policy_series(), report.capacity, tmp_path / "x.png")


# ------------------------------------------------------------------------------ --html


def test_html_report_is_one_self_contained_page_with_the_reports_figures(tmp_path: Path) -> None:
    from paddlecloud.console.report import render_report, report_data

    report = run_report(RunSpec([], ["fifo", "edl"], format="edl", passes=1))
    data = report_data(report)
    assert [row[0] for row in data["table"]["rows"]] == ["fifo", "edl"]
    assert data["table"]["rows"][0][1] == format(report.summaries["fifo"]["mean"]["avg_jct_s"], ".0f")
    for pol in ("fifo", "edl"):
        cdf = data["jct_cdf"][pol]
        jcts = [j for per in report.jcts[pol].values() for j in per]
        assert len(jcts) == 20 and cdf[-1] == [max(jcts), 1.0]  # every job finished by the last point
        assert all(a[0] <= b[0] and a[1] < b[1] for a, b in itertools.pairwise(cdf))
        s = data["series"][pol]
        assert len(s["hours"]) == len(s["allocated_pct"]) == len(s["queued"]) > 0
        assert max(s["allocated_pct"]) <= 100.0
    page = render_report(report)
    assert page.startswith("<!doctype html>") and "new uPlot(" in page and ".uplot" in page  # inlined
    assert " src=" not in page and " href=" not in page and "@import" not in page  # nothing fetched


def test_html_report_escapes_what_it_did_not_write(tmp_path: Path) -> None:
    from paddlecloud.console.report import render_report

    report = run_report(RunSpec([], ["fifo"], format="edl", passes=1))
    hostile = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    report.workloads = {hostile: report.workloads[next(iter(report.workloads))]}
    page = render_report(report)
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert page.count("</script>") == 3  # the data block, uPlot, the drawing code: no more


def test_sim_html_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "sim.html"
    code = cli("sim", "--format", "edl", "--passes", "1", "--policy", "fifo,elastic", "--html", str(page))
    assert code == 0
    assert capsys.readouterr().out.endswith(f"page: {page}\n")
    text = page.read_text()
    assert '"fifo"' in text and '"elastic"' in text and "jct_cdf" in text


# ------------------------------------------------------------------------------ adaptive batch sizes


def test_cli_rejects_a_fraction_outside_0_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("sim", str(pollux_csv(tmp_path)), "--traces", str(TRACES), "--adaptive-fraction", "2") == 2
    err = capsys.readouterr().err
    assert "--adaptive-fraction" in err and "0<=x<=1" in err and "Traceback" not in err
    assert cli("sim", "--format", "edl", "--adaptive-fraction", "0.5") == 2
    assert "--format pollux" in capsys.readouterr().err


def test_cli_half_adaptive_lists_the_jobs_and_series(tmp_path: Path) -> None:
    js = tmp_path / "s.json"
    assert cli("sim", str(pollux_csv(tmp_path)), "--traces", str(TRACES), "--adaptive-fraction", "0.5",
               "--summary-json", str(js), "--series", "10") == 0  # fmt: skip
    doc = json.loads(js.read_text())
    assert list(doc["policies"]) == [DEFAULT_POLICY]  # no --policy: the server's default
    assert doc["adaptive"]["fraction"] == 0.5 and len(doc["adaptive"]["jobs"]["tiny"]) == 2
    mean = doc["policies"][DEFAULT_POLICY]["tiny"]
    assert mean["adaptive_avg_jct_s"] > 0 and mean["fixed_avg_jct_s"] > 0 and mean["adaptive_stat_eff"] > 0
    series = doc["series"][DEFAULT_POLICY]["tiny"]
    assert any(e is not None for e in series["adaptive_stat_eff"]) and max(series["goodput_util"]) > 0
