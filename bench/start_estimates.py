"""Benchmark: start (and end) estimates at submit against the actual ones, on the 8 Pollux workloads.

Each configuration simulates every workload (16 nodes x 4 GPUs) and, in the round each job
arrives, forecasts from that round's snapshot (``scheduler.forecast``, the policy run forward; no
later arrival is known) and records the job's estimated start and end; the figures compare them
with what then happened (``sim.estimates``: median absolute error, share within 25 % of the actual
wait / completion time; "waited": among the jobs that did not start the moment they arrived, which
is nearly all: a job arriving within a round waits for the next; "queued": the jobs that waited
longer than one round, i.e. behind other jobs, the estimates that take a forecast).

    ours             the default policy (elastic) simulated and forecast, durations from the profiles
    ours, declared   the same, but the forecast knows only what a Slurm user would declare: each
                     job's duration at its requested size rounded up to 15 min, 30 min, 1/2/4/8/12 h,
                     1/2/3/7 days (``sim.estimates.declared_limit``)
    slurm backfill   Slurm's way: fifo-backfill simulated, its estimates from a backfill forecast on
                     those declared time limits (what ``squeue --start`` reports)
    ours on fifo-bf  fifo-backfill simulated, forecast with the profiles: the same queue as Slurm's,
                     with our duration knowledge

    .venv/bin/python bench/start_estimates.py [--loads 1.0 1.5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _pollux_data import DATA, workload_files

from paddlecloud.scheduler import policy as make_policy
from paddlecloud.sim import POLLUX_CLUSTER, load_pollux, load_profiles
from paddlecloud.sim.engine import SimConfig, simulate, widen
from paddlecloud.sim.estimates import EstimateSpec

#: label -> (simulated policy, forecast policy, durations)
CONFIGS = {
    "ours (elastic, profiles)": ("elastic", "elastic", "profile"),
    "ours (elastic, declared)": ("elastic", "elastic", "limits"),
    "slurm backfill (limits)": ("fifo-backfill", "fifo-backfill", "limits"),
    "ours on fifo-backfill": ("fifo-backfill", "fifo-backfill", "profile"),
}
KEYS = (
    "start_estimate_median_abs_error_s",
    "start_estimate_within_25pct",
    "start_estimate_within_25pct_waited",
    "start_estimate_jobs_waited",
    "end_estimate_median_abs_error_s",
    "end_estimate_within_25pct",
)


#: the same figures among the jobs that waited longer than one round (queued behind others)
QUEUED = ("queued_jobs", "queued_start_median_abs_error_s", "queued_start_within_25pct")


def _queued(starts: dict[str, dict[str, float | None]], round_s: float) -> dict[str, float]:
    errs, hits = [], 0
    for r in starts.values():
        sub, est, act = r["submitted"], r["estimated_start"], r["actual_start"]
        if sub is None or act is None or act - sub <= round_s:
            continue
        err = abs(est - act) if est is not None else float("inf")
        errs.append(err)
        hits += err <= 0.25 * (act - sub)
    return {
        QUEUED[0]: float(len(errs)),
        QUEUED[1]: statistics.median(errs) if errs else 0.0,
        QUEUED[2]: hits / len(errs) if errs else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=float, nargs="+", default=[1.0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = load_profiles(DATA / "traces")
    cap = POLLUX_CLUSTER.nodes * POLLUX_CLUSTER.node.gpu
    out: dict[str, object] = {}
    for load in args.loads:
        files = workload_files(load)
        print(f"\nload {load}: {len(files)} workloads, estimate at submit vs actual, mean over the workloads")
        print(f"  {'':<28}{'start err s':>12}{'<=25%':>7}{'waited <=25%':>13}{'waited':>7}"
              f"{'end err s':>11}{'<=25%':>7}{'queued':>8}{'q err s':>10}{'<=25%':>7}{'s':>6}")  # fmt: skip
        per_load: dict[str, object] = {}
        for label, (sim_pol, fc_pol, durations) in CONFIGS.items():
            t = time.perf_counter()
            spec = EstimateSpec(policy=fc_pol, durations=durations)
            cfg = SimConfig(POLLUX_CLUSTER, estimates=spec)
            sums = []
            for f in files:
                jobs = load_pollux(f)
                if sim_pol == "elastic":
                    jobs = widen(jobs, models, cap)
                res = simulate(jobs, models, make_policy(sim_pol), cfg)
                sums.append(res.summary(cap) | _queued(res.starts, cfg.round_s))
            mean = {k: statistics.fmean(s[k] for s in sums) for k in (*KEYS, *QUEUED)}
            per_load[label] = {
                "mean": mean,
                "workloads": {f.stem: {k: s[k] for k in KEYS} for f, s in zip(files, sums, strict=True)},
            }
            print(f"  {label:<28}{mean[KEYS[0]]:>12.0f}{mean[KEYS[1]]:>7.2f}{mean[KEYS[2]]:>13.2f}"
                  f"{mean[KEYS[3]]:>7.0f}{mean[KEYS[4]]:>11.0f}{mean[KEYS[5]]:>7.2f}"
                  f"{mean[QUEUED[0]]:>8.1f}{mean[QUEUED[1]]:>10.0f}{mean[QUEUED[2]]:>7.2f}"
                  f"{time.perf_counter() - t:>6.0f}")  # fmt: skip
        out[str(load)] = per_load
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
