"""Benchmark: one scheduling round at scale (goal: 1,250 nodes x 8 GPUs, 5,000 jobs in <= 100 ms).

Builds a snapshot with half the jobs running (placed, 1-8 GPUs each, elastic 1..16) and half
waiting, then times ``policy.schedule`` (median of several rounds) for each policy, and shows how the
time grows with nodes and jobs. The last column is ``elastic`` on the same snapshot with half the
jobs (every other one) adaptive-batch: each carries a goodput table (``scheduler.goodput``, one of 8
noise scales, a fitted step-time model) and runs at a batch that is not its table's best, so the
round also considers every running one for a batch-only resize. The column after it is the same
with the opt-in goodput share, the adaptive jobs one claimant of the top-up
(``ElasticPolicy(fair_p=0.5, fair_group=True)``).

    .venv/bin/python bench/sched_scale.py [--runs 5] [--sweep]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import (
    ElasticPolicy,
    JobRequest,
    NodeState,
    Policy,
    Snapshot,
    WorkerPlacement,
    policy,
)
from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, GoodputModel

_STEP = FittedStepTime(base=0.05, per_sample=0.002, sync_local=0.03, sync_net=0.1)
_TABLES = GoodputModel(
    _STEP, AdaptiveBatch(init=128, lo=32, hi=4096, min_local=8), tuple((n + 7) // 8 for n in range(1, 17))
)


def adaptive_half(snap: Snapshot) -> Snapshot:
    """``snap`` with every other job adaptive-batch (see the module docstring)."""
    tables = [_TABLES.table(noise) for noise in (0.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)]

    def adapt(job: JobRequest) -> JobRequest:
        k = int(job.key[1:])
        if k % 4 >= 2:  # every other job among the running (even k) and the waiting alike
            return job
        t = tables[k % len(tables)]
        return dataclasses.replace(
            job, batches=t.batches, speedup=t.speedup, batch_size=64 if job.running else 0
        )

    return dataclasses.replace(
        snap, queue=tuple(map(adapt, snap.queue)), running=tuple(map(adapt, snap.running))
    )


def build(nodes: int, jobs: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    gpu = Resources(4000, 32 << 30, 1)
    free = {f"n{i}": list(range(8)) for i in range(nodes)}
    names = list(free)
    running, queue = [], []
    for k in range(jobs):
        want = rng.choice((1, 1, 2, 4, 8))
        job = dict(key=f"j{k}", user=f"u{k % 50}", priority=0, submitted_at=float(k), pservers=0,
                   pserver=Resources(), trainers=want, trainer=gpu, min_trainers=1, max_trainers=16,
                   attained=rng.uniform(0, 50_000))  # fmt: skip
        if k % 2 == 0:
            placement: list[WorkerPlacement] = []
            for node in names[rng.randrange(len(names)) :] + names:
                while free[node] and len(placement) < want:
                    placement.append(WorkerPlacement("trainer", len(placement), node, (free[node].pop(),)))
                if len(placement) == want:
                    break
            if len(placement) == want:
                running.append(JobRequest(**job, running=want, placement=tuple(placement)))  # type: ignore[arg-type]
                continue
        queue.append(JobRequest(**job))  # type: ignore[arg-type]

    def node_state(name: str, gpus: list[int]) -> NodeState:
        used = 8 - len(gpus)
        return NodeState(
            name, Resources(64000, 512 << 30, 8), Resources(4000 * used, (32 << 30) * used, used), tuple(gpus)
        )

    node_states = tuple(node_state(n, g) for n, g in free.items())
    return Snapshot(1, 1e6, node_states, tuple(queue), tuple(running))


def timed(name: str | Policy, snap: Snapshot, runs: int) -> float:
    pol = policy(name) if isinstance(name, str) else name
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        pol.schedule(snap)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


POLICIES = ("fifo", "fifo-backfill", "tiresias", "edl", "elastic")
#: nodes and jobs grow together (the goal is the last row)
TOGETHER = ((125, 500), (625, 2500), (1250, 5000))
#: the last column: ``elastic`` with the opt-in goodput share, the adaptive jobs one claimant
GROUP_SHARE = ElasticPolicy(fair_p=0.5, fair_group=True)
#: --sweep: one grows while the other stays
SWEEP = ((1250, 500), (1250, 2500), (125, 5000), (625, 5000))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--sweep", action="store_true", help="also 1,250 nodes with fewer jobs, 5,000 jobs on fewer nodes"
    )
    args = ap.parse_args()
    print(f"one scheduling round, ms (median of {args.runs}; goal: 1,250 x 8 GPUs, 5,000 jobs <= 100 ms)")
    head = "".join(f"{name:>15}" for name in POLICIES)
    print(f"  {'nodes':>5} {'jobs':>5} {'running':>7}{head}{'elastic, half adaptive':>24}{'group share':>13}")
    for nodes, jobs in TOGETHER + (SWEEP if args.sweep else ()):
        snap = build(nodes, jobs)
        cells = "".join(f"{timed(name, snap, args.runs) * 1000:15.1f}" for name in POLICIES)
        half = timed("elastic", adaptive_half(snap), args.runs) * 1000
        group = timed(GROUP_SHARE, adaptive_half(snap), args.runs) * 1000
        print(f"  {nodes:5d} {jobs:5d} {len(snap.running):7d}{cells}{half:24.1f}{group:13.1f}")
    snap = build(*TOGETHER[-1])
    cpu = {name: cpu_ms(policy(name), snap, args.runs) for name in POLICIES}
    cpu["elastic, half adaptive"] = cpu_ms(policy("elastic"), adaptive_half(snap), args.runs)
    cpu["group share, half adaptive"] = cpu_ms(GROUP_SHARE, adaptive_half(snap), args.runs)
    print(
        f"  cpu ms at {TOGETHER[-1][0]} x 8 / {TOGETHER[-1][1]} jobs (min of {args.runs}): "
        + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
    )


def cpu_ms(pol: Policy, snap: Snapshot, runs: int) -> float:
    """The least process CPU time of ``runs`` rounds, ms."""
    ts = []
    for _ in range(runs):
        t = time.process_time()
        pol.schedule(snap)
        ts.append(time.process_time() - t)
    return min(ts) * 1000


if __name__ == "__main__":
    main()
