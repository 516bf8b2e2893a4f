"""Benchmark: one scheduling round at scale (goal: 1,250 nodes x 8 GPUs, 5,000 jobs in <= 100 ms).

Builds a snapshot with half the jobs running (placed, 1-8 GPUs each, elastic 1..16) and half
waiting, then times ``policy.schedule`` (median of several rounds) for each policy, and shows how the
time grows with nodes and jobs.

    .venv/bin/python bench/sched_scale.py [--runs 5] [--sweep]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Snapshot, WorkerPlacement, policy


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


def timed(name: str, snap: Snapshot, runs: int) -> float:
    pol = policy(name)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        pol.schedule(snap)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


POLICIES = ("fifo", "fifo-backfill", "tiresias", "edl", "elastic")
#: nodes and jobs grow together (the goal is the last row)
TOGETHER = ((125, 500), (625, 2500), (1250, 5000))
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
    print(f"  {'nodes':>5} {'jobs':>5} {'running':>7}" + "".join(f"{name:>15}" for name in POLICIES))
    for nodes, jobs in TOGETHER + (SWEEP if args.sweep else ()):
        snap = build(nodes, jobs)
        cells = "".join(f"{timed(name, snap, args.runs) * 1000:15.1f}" for name in POLICIES)
        print(f"  {nodes:5d} {jobs:5d} {len(snap.running):7d}{cells}")


if __name__ == "__main__":
    main()
