"""Benchmark: adaptive-batch jobs on the Pollux workloads (issue 14), next to the paper's Pollux.

Runs the server's default policy (``elastic``) on the 8 Pollux workloads (16 nodes x 4 GPUs) with
every job's batch fixed, half the jobs adaptive-batch and every job adaptive
(``RunSpec.adaptive_fraction``; which half: the seeded rule of ``sim.runner.choose_adaptive``), at
each load, and prints the mean over the workloads of avg JCT, the adaptive and fixed jobs' own means,
the adaptive jobs' statistical efficiency, and, for the half-adaptive runs, how the fixed-batch jobs
fared against the same jobs when no job is adaptive (the mean over workloads of
sum of their JCTs / sum under all-fixed: < 1 is faster).

    .venv/bin/python bench/sim_adaptive.py [--loads 1.0 1.5] [--fractions 0 0.5 1] [--procs 2] [--json FILE]

``--fractions 1`` runs only the all-adaptive case (the half-adaptive comparison needs 0 and 0.5).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _pollux_data import DATA, TRACES, workload_files

from paddlecloud.sim import load_result
from paddlecloud.sim.runner import DEFAULT_POLICY, Report, RunSpec, run_report

FRACTIONS = (0.0, 0.5, 1.0)


def one(load: float, fraction: float) -> Report:
    files = [str(p) for p in workload_files(load)]
    return run_report(RunSpec(files, [DEFAULT_POLICY], adaptive_fraction=fraction, traces=TRACES))


def fixed_ratio(half: Report, fixed: Report) -> float:
    """Mean over workloads of (the fixed-batch jobs' summed JCT) / (the same jobs' with none adaptive)."""
    ratios = []
    for wl, adaptive in half.adaptive.items():
        mine, base = half.job_jcts[DEFAULT_POLICY][wl], fixed.job_jcts[DEFAULT_POLICY][wl]
        keep = [n for n in mine if n not in set(adaptive)]
        ratios.append(sum(mine[n] for n in keep) / sum(base[n] for n in keep))
    return sum(ratios) / len(ratios)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=float, nargs="+", default=[1.0, 1.5])
    ap.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS),
                    help="adaptive fractions to run (0, 0.5, 1)")  # fmt: skip
    ap.add_argument("--procs", type=int, default=2, help="simulations run in this many processes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    fractions = sorted(set(args.fractions))
    runs = [(load, f) for load in args.loads for f in fractions]
    with ProcessPoolExecutor(args.procs) as pool:
        reports = dict(zip(runs, pool.map(one, *zip(*runs, strict=True)), strict=True))
    out: dict[str, object] = {}
    for load in args.loads:
        pollux = load_result(DATA / "results-jobload", "pollux", load).mean_avg_jct
        print(f"\nload {load}: {DEFAULT_POLICY}, mean over 8 workloads (paper: pollux {pollux:.0f} s)")
        print(f"  {'adaptive':<10}{'avg JCT s':>11}{'adaptive s':>12}{'fixed s':>9}{'stat eff':>10}"
              f"{'GPU util':>10}{'goodput':>9}{'resizes':>9}")  # fmt: skip
        for f in fractions:
            m = reports[load, f].summaries[DEFAULT_POLICY]["mean"]
            print(f"  {f:<10.1f}{m['avg_jct_s']:>11.0f}{m.get('adaptive_avg_jct_s', 0):>12.0f}"
                  f"{m.get('fixed_avg_jct_s', m['avg_jct_s']):>9.0f}{m['adaptive_stat_eff']:>10.2f}"
                  f"{m['gpu_util']:>10.2f}{m['goodput_util']:>9.2f}{m['resizes']:>9.0f}")  # fmt: skip
        ratio = None
        if (load, 0.5) in reports and (load, 0.0) in reports:
            ratio = fixed_ratio(reports[load, 0.5], reports[load, 0.0])
            print(f"  half adaptive: the fixed-batch jobs' JCT vs the same jobs, none adaptive: x{ratio:.3f}")
        out[str(load)] = {
            "pollux_mean_avg_jct": pollux,
            "fixed_jobs_ratio_half": ratio,
            **{str(f): reports[load, f].summaries[DEFAULT_POLICY]["mean"] for f in fractions},
        }
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
