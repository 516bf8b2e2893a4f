"""``paddlecloud sim``: replay workloads on a virtual cluster with the live scheduler's policies.

Runs in the client process (no server needed):

options ─▶ sim.runner.run_report (every policy x every workload) ─▶ table of the means on stdout
    ─▶ ``--summary-json FILE``: Report.to_json (``--series N`` adds N-point time series per run)
    ─▶ ``--plot FILE.png``: sim.plot over Report.policy_series (needs the optional matplotlib)
    ─▶ ``--html FILE``: console.report, one self-contained page with the same charts and the JCT
       distribution per policy (no other file, no request to any host)

The JSON is written before the plot is drawn, so a missing matplotlib still leaves the summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from paddlecloud.cli.output import print_table

if TYPE_CHECKING:
    from paddlecloud.sim.runner import Report

__all__ = ["sim"]

#: the live policies, and `pods`: a baseline (scheduler/pods.py) that `up --policy` does not offer
POLICIES = ["fifo", "fifo-backfill", "tiresias", "edl", "elastic", "goodput", "pods"]
PLOT_BINS = 400
_COLUMNS = [
    ("AVG JCT s", "avg_jct_s", ".0f"), ("MEDIAN JCT s", "median_jct_s", ".0f"),
    ("P99 JCT s", "p99_jct_s", ".0f"),
    ("AVG QUEUE s", "avg_queue_s", ".0f"), ("P99 QUEUE s", "p99_queue_s", ".0f"),
    ("MAKESPAN s", "makespan_s", ".0f"), ("UTIL", "gpu_util", ".2f"), ("USEFUL", "useful_gpu_util", ".2f"),
    ("RESIZES", "resizes", ".0f"), ("PREEMPT", "preemptions", ".0f"),
]  # fmt: skip


def _policies(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    """``--policy a --policy b`` and ``--policy a,b`` alike; order kept, repeats dropped."""
    names: list[str] = []
    for item in value:
        for name in (n.strip() for n in item.split(",")):
            if name not in POLICIES:
                raise click.BadParameter(f"{name!r} is not one of {', '.join(POLICIES)}")
            if name not in names:
                names.append(name)
    return names


@click.command()
@click.argument("workloads", nargs=-1)
@click.option("--policy", "policies", multiple=True, callback=_policies, metavar="NAME[,NAME...]",
              help=f"one of {', '.join(POLICIES)}; repeat or comma-separate to compare "
                   "[default: the server's default policy, elastic]")  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(["pollux", "philly", "edl"]), default="pollux", show_default=True
)
@click.option("--nodes", type=click.IntRange(1, 100_000), help="default: 16 (Pollux) / 133 (EDL)")
@click.option("--gpus-per-node", type=click.IntRange(0, 64), help="default: 4")
@click.option("--traces", type=click.Path(exists=True, file_okay=False), help="Pollux job profiles")
@click.option("--limit", type=int, default=1000, show_default=True, help="Philly: the N earliest jobs")
@click.option("--passes", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="EDL: passes of the experiment, each with its own seeded submission times")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="EDL: the first pass's seed")
@click.option("--adaptive-fraction", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Pollux format: make this share of each workload's jobs adaptive-batch (the "
                   "scheduler picks their batch; which: a seeded rule, in --summary-json)")  # fmt: skip
@click.option("--adaptive-seed", type=int, default=0, show_default=True, help="seed of that choice")
@click.option(
    "--summary-json", type=click.Path(dir_okay=False, path_type=Path), help="write all figures here"
)
@click.option("--series", "series_points", type=click.IntRange(0, 100_000), default=0, show_default=True,
              help="also put each run's time series, in N bins, into the JSON")  # fmt: skip
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
              help="PNG of utilisation and queue length over time, one line per policy "
                   "(needs matplotlib)")  # fmt: skip
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path),
              help="a self-contained web page: the means, utilisation and queue over time, and the "
                   "JCT distribution, per policy")  # fmt: skip
@click.option("--estimate-starts", is_flag=True,
              help="record each job's start and end estimate at submit against the actual ones "
                   "(figures in the table, per job in --summary-json; slower)")  # fmt: skip
def sim(
    workloads: tuple[str, ...], policies: list[str], fmt: str, nodes: int | None, gpus_per_node: int | None,
    traces: str | None, limit: int, passes: int, seed: int, adaptive_fraction: float, adaptive_seed: int,
    summary_json: Path | None, series_points: int, plot: Path | None, html: Path | None,
    estimate_starts: bool,
) -> None:  # fmt: skip
    """Simulate WORKLOAD files (Pollux CSVs, philly.csv) or the EDL scenario (--format edl)."""
    from paddlecloud.sim.runner import DEFAULT_POLICY, RunSpec, run_report

    if adaptive_fraction > 0 and fmt != "pollux":
        raise click.BadParameter(
            f"adaptive batch sizes need --format pollux, not {fmt}", param_hint="--adaptive-fraction"
        )

    for w in workloads:
        if not Path(w).is_file():
            raise click.BadParameter(f"{w}: no such file", param_hint="WORKLOADS")
    try:
        spec = RunSpec(
            list(workloads),
            policies or [DEFAULT_POLICY],
            fmt,
            traces,
            nodes,
            gpus_per_node,
            limit,
            passes=passes,
            seed=seed,
            adaptive_fraction=adaptive_fraction,
            adaptive_seed=adaptive_seed,
            estimate_starts=estimate_starts,
        )
        report = run_report(spec)
    except (ValueError, KeyError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    _print_means(report)
    try:
        if summary_json:
            summary_json.write_text(json.dumps(report.to_json(series_points), indent=2) + "\n")
            click.echo(f"summary: {summary_json}")
        if html:
            from paddlecloud.console.report import render_report

            html.write_text(render_report(report), encoding="utf-8")
            click.echo(f"page: {html}")
        if plot:
            _plot(report, plot)
            click.echo(f"plot: {plot}")
    except OSError as exc:
        raise click.ClickException(str(exc)) from None


def _print_means(report: Report) -> None:
    from paddlecloud.sim.workload import EDL_WINDOW_AFTER_LAST_S

    rows = [[pol] + [format(per["mean"][key], spec) for _, key, spec in _COLUMNS]
            for pol, per in report.summaries.items()]  # fmt: skip
    unit = "GPUs" if report.util_unit == "gpu" else "CPU cores"
    click.echo(
        f"mean over {len(report.workloads)} workload(s); UTIL / USEFUL: share of {report.capacity} {unit}:"
    )
    print_table(["POLICY"] + [head for head, _, _ in _COLUMNS], rows)
    if report.spec.format == "edl":
        click.echo(
            f"\nas the EDL report measured them (mean of {len(report.workloads)} pass(es); up to "
            f"{EDL_WINDOW_AFTER_LAST_S:g} s after the last submission, when its script killed every job):"
        )
        print_table(
            ["POLICY", "AVG PENDING s", "CPU UTIL"],
            [[pol, f"{per['mean']['report_pending_s']:.0f}", f"{per['mean']['report_cpu_util']:.2f}"]
             for pol, per in report.summaries.items()],
        )  # fmt: skip
    if report.spec.estimate_starts:
        click.echo(
            "estimates at submit vs actual (median absolute error; share within 25 % of the wait / JCT):"
        )
        print_table(
            ["POLICY", "START ERR s", "START <=25%", "WAITED <=25%", "END ERR s", "END <=25%"],
            [[pol, f"{m['start_estimate_median_abs_error_s']:.0f}", f"{m['start_estimate_within_25pct']:.2f}",
              f"{m['start_estimate_within_25pct_waited']:.2f}", f"{m['end_estimate_median_abs_error_s']:.0f}",
              f"{m['end_estimate_within_25pct']:.2f}"]
             for pol, m in ((p, per["mean"]) for p, per in report.summaries.items())],
        )  # fmt: skip
    for pol, per in report.summaries.items():
        left = sum(s["unfinished"] for wl, s in per.items() if wl != "mean")
        if left:
            click.echo(
                f"note: {pol}: {left:.0f} job(s) unfinished at the 30-day horizon, not in the JCT figures"
            )


def _plot(report: Report, path: Path) -> None:
    from paddlecloud.sim.plot import PlotUnavailable, plot_series

    names = list(report.workloads)
    what = names[0] if len(names) == 1 else f"mean of {len(names)} workloads"
    c = report.cluster
    shape = (
        f"{c.nodes} nodes x {c.node.gpu} GPUs"
        if c.node.gpu
        else f"{c.nodes} nodes x {c.node.cpu_m // 1000} cores"
    )
    try:
        plot_series(report.policy_series(PLOT_BINS), report.capacity, path,
                    title=f"{report.spec.format}: {what}, {shape}",
                    unit="GPU" if report.util_unit == "gpu" else "CPU")  # fmt: skip
    except PlotUnavailable as exc:
        raise click.ClickException(str(exc)) from None
