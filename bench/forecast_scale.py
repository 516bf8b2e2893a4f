"""Benchmark: what one live start-time forecast costs at 1,250 nodes x 8 GPUs and 5,000 jobs.

The snapshot is bench/sched_scale.py's (half the jobs running, 1-8 GPUs each, elastic 1..16, half
waiting); each job gets a declared duration of 10 min .. 8 h (seeded), as ``controller.loop.forecasts``
would from ``expected_duration_s``. For each policy it runs ``scheduler.forecast`` under the server's
default bounds (``ForecastSettings``: 400 rounds, 2 s of wall time) and without the time bound, and
prints the wall time, the rounds, how far ahead it reached and the share of waiting jobs given a
start. The server forecasts at most every ``up --forecast-interval`` (30 s) and only when the
cluster changed, in a thread of its own.

    .venv/bin/python bench/forecast_scale.py [--nodes 1250] [--jobs 5000] [--policies elastic fifo]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from paddlecloud.controller.model.config import ForecastSettings
from paddlecloud.scheduler import Snapshot, policy
from paddlecloud.scheduler.forecast import Basis, Work, forecast, seconds_work

sys.path.insert(0, str(Path(__file__).parent))
from sched_scale import build


def _work(snap: Snapshot, seed: int = 2) -> dict[str, Work]:
    rng = random.Random(seed)
    return {
        j.key: seconds_work(j, rng.uniform(600, 8 * 3600), Basis.DECLARED)
        for j in (*snap.running, *snap.queue)
    }


def _budget(started: float, seconds: float | None) -> Callable[[], bool] | None:
    if seconds is None:
        return None
    deadline = started + seconds
    return lambda: time.perf_counter() > deadline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--policies", nargs="+", default=["elastic", "tiresias", "fifo"])
    args = ap.parse_args()
    snap = build(args.nodes, args.jobs)
    work = _work(snap)
    live = ForecastSettings()
    print(f"{args.nodes} nodes x 8 GPUs, {len(snap.running)} running + {len(snap.queue)} waiting jobs")
    print(
        f"  {'policy':<10}{'bound':<16}{'wall s':>8}{'rounds':>8}{'ms/round':>10}{'ahead h':>9}{'starts':>8}"
    )
    for name in args.policies:
        pol = policy(name)
        t = time.perf_counter()
        pol.schedule(snap)
        print(f"  {name:<10}one scheduling round on the snapshot, for scale: {time.perf_counter() - t:.2f} s")
        for label, budget in (
            (f"{live.budget_s:g} s, {live.rounds.max_rounds} r", live.budget_s),
            ("400 rounds", None),
        ):
            t = time.perf_counter()
            fc = forecast(pol.schedule, snap, work, live.rounds, out_of_time=_budget(t, budget))
            wall = time.perf_counter() - t
            waiting = [j.key for j in snap.queue]
            started = sum(fc.estimates[k].start is not None for k in waiting) / len(waiting)
            print(f"  {name:<10}{label:<16}{wall:>8.2f}{fc.rounds:>8}{1000 * wall / fc.rounds:>10.0f}"
                  f"{(fc.horizon - snap.now) / 3600:>9.1f}{started:>8.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
