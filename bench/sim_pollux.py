"""Benchmark: the scheduler policies on the Pollux workloads, next to the paper's numbers.

Runs fifo / tiresias / edl / elastic through the simulator (the live scheduler package, unchanged)
on the 8 Pollux workloads at job load 1.0 and 1.5 (16 nodes x 4 GPUs) and prints the mean over the
workloads of avg JCT, p99 JCT, avg queueing delay and GPU utilisation, with the paper's mean avg
JCT for Pollux / Tiresias / Optimus; then the EDL report's experiment (static vs edl vs elastic: its
average pending and CPU utilisation, measured as the report did, beside its figures).

    .venv/bin/python bench/sim_pollux.py [--loads 1.0 1.5] [--passes 10] [--json FILE] [--plot PREFIX]

``--loads`` with no value runs the EDL experiment only.

``--plot PREFIX`` writes ``PREFIX-load<L>.png`` per load (utilisation and queue length over time,
one line per policy; needs matplotlib, ``pip install 'paddlecloud[plot]'``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _pollux_data import DATA, TRACES, workload_files

from paddlecloud.sim import load_result
from paddlecloud.sim.plot import plot_series
from paddlecloud.sim.runner import RunSpec, run, run_report

POLICIES = ("fifo", "tiresias", "edl", "elastic")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=float, nargs="*", default=[1.0, 1.5])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, metavar="PREFIX")
    ap.add_argument("--passes", type=int, default=10, help="EDL experiment: seeded passes")
    args = ap.parse_args()
    everything: dict[str, object] = {}
    for load in args.loads:
        files = [str(p) for p in workload_files(load)]
        t = time.perf_counter()
        report = run_report(RunSpec(files, list(POLICIES), traces=TRACES))
        res = report.summaries
        if args.plot:
            png = args.plot.with_name(f"{args.plot.name}-load{load}.png")
            title = f"Pollux workloads at load {load}: mean of {len(files)}, 16 nodes x 4 GPUs"
            plot_series(report.policy_series(), report.capacity, png, title=title)
        paper = {
            p: load_result(DATA / "results-jobload", p, load).mean_avg_jct
            for p in ("pollux", "tiresias", "optimus")
        }
        print(
            f"\nload {load}: mean over {len(files)} workloads ({time.perf_counter() - t:.0f} s to simulate)"
        )
        print(
            f"  {'policy':<10}{'avg JCT s':>11}{'p99 JCT s':>11}{'avg queue s':>13}"
            f"{'GPU util':>10}{'resizes':>9}{'preempt':>9}"
        )
        for pol, per in res.items():
            m = per["mean"]
            print(f"  {pol:<10}{m['avg_jct_s']:>11.0f}{m['p99_jct_s']:>11.0f}{m['avg_queue_s']:>13.0f}"
                  f"{m['gpu_util']:>10.2f}{m['resizes']:>9.0f}{m['preemptions']:>9.0f}")  # fmt: skip
        print("  paper (mean avg JCT): " + ", ".join(f"{p} {v:.0f} s" for p, v in paper.items()))
        tir = {w: res["tiresias"][w.replace(".csv", "")]["avg_jct_s"] for w in res["tiresias"] if w != "mean"}
        ref = load_result(DATA / "results-jobload", "tiresias", load).avg_jct
        gaps = ", ".join(f"{w.split('-')[-1]} {100 * (tir[w] / ref[w] - 1):+.0f}%" for w in sorted(tir))
        print(f"  tiresias calibration vs paper, per workload: {gaps}")
        everything[str(load)] = {"ours": res, "paper_mean_avg_jct": paper}
    edl = run(RunSpec([], ["pods", "fifo", "edl", "elastic"], format="edl", passes=args.passes))
    print(f"\nEDL report's experiment (mean of {args.passes} seeded passes; 20 jobs ~10 s apart, "
          "10 pservers + 5-CPU trainers, OFF: static at a fixed 60 trainers, ON: 2..60; "
          "133 x 17.5-CPU nodes):")  # fmt: skip
    report = {
        "pods": "report OFF: pending 280 s (308 s over its 10 passes), CPU 76.2 %",
        "fifo": "",
        "edl": "report ON:  pending  43 s (47 s over its 10 passes), CPU 76.3 %",
        "elastic": "",
    }
    labels = {"pods": "static, pods one by one (the report's OFF)", "fifo": "static, whole jobs (fifo)"}
    for pol, per in edl.items():
        m = per["mean"]
        print(f"  {labels.get(pol, pol):<44} pending {m['report_pending_s']:5.1f} s   CPU util "
              f"{m['report_cpu_util']:.2f}   (to the end: avg JCT {m['avg_jct_s']:5.0f} s, resizes "
              f"{m['resizes']:3.0f}, preemptions {m['preemptions']:.0f})   {report[pol]}")  # fmt: skip
    base, ours = edl["pods"]["mean"], edl["edl"]["mean"]
    ratio = ours["report_pending_s"] / base["report_pending_s"]
    points = 100 * (ours["report_cpu_util"] - base["report_cpu_util"])
    print(f"  edl pending / static's: {ratio:.3f} (goal <= 0.2, report 0.15); "
          f"CPU util edl - static: {points:+.1f} points (goal: within 5)")  # fmt: skip
    everything["edl"] = edl
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()
