"""Benchmark: variants of the opt-in goodput share (``ElasticPolicy.fair_*``) on the Pollux workloads.

Runs ``elastic`` with the given ``fair_*`` fields (and, optionally, ``ADAPTIVE_SERVICE_SCALE`` /
``SERVICE_EXPONENT``) on the 8 Pollux workloads of one load with a share of the jobs adaptive, the
way ``sim.runner.run_report`` does (same jobs, same adaptive choice), and prints each workload's avg
JCT, the mean, and the mean JCT per application: the variant table of bench/README.md
("Goodput fairness among adaptive jobs").

    nice -n 10 .venv/bin/python bench/sim_fair_variants.py [--load 1.0] [--fraction 1] [--fair-p 0.5]
        [--fair-weight 2] [--fair-restart 0.9] [--fair-cooldown 0] [--fair-group]
        [--no-fair-free] [--fair-exchange] [--fair-restart-s 30 [--fair-restart-k 2]] [--pack] [--profile]
        [--workloads 1 2 ...]

With a fraction below 1 it also prints the fixed-batch jobs' summed JCT against the same jobs under
``elastic`` with no job adaptive (per workload, and the mean of those ratios: ``sim_adaptive.py``'s).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict

from _pollux_data import LOADS, TRACES, workload_files

from paddlecloud.scheduler import ElasticPolicy, Plan, Snapshot
from paddlecloud.scheduler import elastic as elastic_module
from paddlecloud.sim.engine import SimConfig, simulate
from paddlecloud.sim.runner import RunSpec, _inputs, _jobs_for, choose_adaptive

KINDS = ("grow", "shrink-to-admit", "shrink", "batch-only")


class Counted:
    """The policy, counting its resizes by kind (``--profile``): grows, shrinks in a round that
    admits a job (shrink-to-admit, mostly), other shrinks, batch-only (same trainers, new batch)."""

    def __init__(self, pol: ElasticPolicy) -> None:
        self.pol, self.kinds = pol, Counter[str]()

    @property
    def name(self) -> str:
        return self.pol.name

    def schedule(self, snap: Snapshot) -> Plan:
        plan = self.pol.schedule(snap)
        running = {j.key: j.running for j in snap.running}
        for z in plan.resize:
            d = z.trainers - running[z.job]
            self.kinds[
                "grow" if d > 0 else "batch-only" if d == 0 else "shrink-to-admit" if plan.admit else "shrink"
            ] += 1
        return plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=float, default=1.0, choices=LOADS)
    ap.add_argument("--fraction", type=float, default=1.0, help="share of jobs adaptive")
    ap.add_argument("--workloads", type=int, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--fair-p", default="0.5", help="a number, or 'none' for the LAS top-up")
    ap.add_argument("--fair-weight", type=float, default=2.0)
    ap.add_argument("--fair-restart", type=float, default=0.9)
    ap.add_argument("--fair-cooldown", type=float, default=0.0)
    ap.add_argument("--fair-group", action="store_true", help="the adaptive jobs one claimant of the top-up")
    ap.add_argument("--no-fair-free", action="store_true", help="the share hands out no free capacity")
    ap.add_argument("--fair-exchange", action="store_true", help="an exchange search from the current counts")
    ap.add_argument("--fair-restart-s", type=float, help="restart-aware share: a restart's seconds")
    ap.add_argument("--fair-restart-k", type=float, default=2.0, help="restarts a move must save")
    ap.add_argument("--pack", action="store_true", help="packed placement for growing jobs")
    ap.add_argument("--profile", action="store_true", help="resizes by kind, per workload")
    ap.add_argument("--service-scale", type=float, help="ADAPTIVE_SERVICE_SCALE")
    ap.add_argument("--service-exponent", type=float, help="SERVICE_EXPONENT")
    args = ap.parse_args()
    if args.service_scale is not None:
        elastic_module.ADAPTIVE_SERVICE_SCALE = args.service_scale
    if args.service_exponent is not None:
        elastic_module.SERVICE_EXPONENT = args.service_exponent
    pol = ElasticPolicy(
        fair_p=None if args.fair_p == "none" else float(args.fair_p), fair_weight=args.fair_weight,
        fair_restart=args.fair_restart, fair_cooldown=args.fair_cooldown, fair_group=args.fair_group,
        fair_free=not args.no_fair_free, fair_exchange=args.fair_exchange,
        fair_restart_s=args.fair_restart_s, fair_restart_k=args.fair_restart_k, pack=args.pack,
    )  # fmt: skip
    files = [str(p) for p in workload_files(args.load, args.workloads)]
    spec = RunSpec(files, ["elastic"], adaptive_fraction=args.fraction, traces=TRACES)
    loads, models, cluster = _inputs(spec)
    capacity = cluster.nodes * cluster.node.gpu
    avgs: list[float] = []
    ratios: list[float] = []
    apps: dict[str, list[float]] = defaultdict(list)
    kinds = Counter[str]()
    start = time.time()
    for wl, jobs in loads.items():
        chosen = choose_adaptive(jobs, args.fraction, 0, wl)
        counted = Counted(pol)
        res = simulate(
            _jobs_for("elastic", spec, jobs, models, cluster, chosen), models, counted, SimConfig(cluster)
        )
        kinds += counted.kinds
        s = res.summary(capacity)
        avgs.append(s["avg_jct_s"])
        for j in jobs:
            if j.name in res.jct:
                apps[j.app].append(res.jct[j.name])
        line = f"{wl}: avg JCT {s['avg_jct_s']:.0f} s, resizes {s['resizes']:.0f}"
        line += f", GPU util {s['gpu_util']:.2f}"
        if args.profile:
            line += " (" + ", ".join(f"{k} {counted.kinds[k]}" for k in KINDS) + ")"
        fixed = [j.name for j in jobs if j.name not in chosen]
        if fixed and chosen:  # the fixed-batch jobs against the same jobs under elastic, none adaptive
            none = _jobs_for("elastic", spec, jobs, models, cluster, set())
            base = simulate(none, models, ElasticPolicy(), SimConfig(cluster)).jct
            ratios.append(sum(res.jct[n] for n in fixed) / sum(base[n] for n in fixed))
            line += f", fixed-batch jobs x{ratios[-1]:.3f}"
        print(line)
    print(f"mean avg JCT {sum(avgs) / len(avgs):.0f} s ({time.time() - start:.0f} s wall)")
    if ratios:
        print(f"fixed-batch jobs vs elastic with none adaptive: x{sum(ratios) / len(ratios):.3f}")
    print("  ".join(f"{a} {sum(v) / len(v):.0f}" for a, v in sorted(apps.items())))
    if args.profile:
        n = len(avgs)
        print("resizes per workload: " + ", ".join(f"{k} {kinds[k] / n:.1f}" for k in KINDS))


if __name__ == "__main__":
    main()
