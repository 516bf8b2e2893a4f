"""Benchmark: one scheduling round at scale (goal: 1,250 nodes x 8 GPUs, 5,000 jobs in <= 100 ms).

Builds a snapshot with half the jobs running (placed, 1-8 GPUs each, elastic 1..16) and half
waiting, then times ``policy.schedule`` (median of several rounds) for each policy, and shows how the
time grows with nodes and jobs. The last column is ``elastic`` on the same snapshot with half the
jobs (every other one) adaptive-batch: each carries a goodput table (``scheduler.goodput``, one of 8
noise scales, a fitted step-time model) and runs at a batch that is not its table's best, so the
round also considers every running one for a batch-only resize. The column after it is the same
with the opt-in goodput share, the adaptive jobs one claimant of the top-up
(``ElasticPolicy(fair_p=0.5, fair_group=True)``), and the last the ``goodput`` policy (that share,
restart-aware, with packed placement) on the same snapshot.

These are *cold* rounds: the snapshot's running jobs sit at random counts, so one round moves
thousands of trainers. The last lines are the *steady state* a live server sees (not the goal's
figure): the cold round's plan carried out on the snapshot's books (``scheduler.apply``, the
simulator's code), then ``--rounds`` rounds :data:`STEP_S` apart, ``--churn`` random running jobs
ending and as many new ones (attained 0, adaptive as above in the half-adaptive case) arriving
before each; each round is timed as the cold ones are, the median over rounds printed.

    .venv/bin/python bench/sched_scale.py [--runs 5] [--sweep] [--rounds 5] [--churn 20]
    .venv/bin/python bench/sched_scale.py --goal [--runs 9]

``--goal`` times only the goal's figure (the half-adaptive cold round at 1,250 x 8 / 5,000 jobs),
interleaved with ``fifo`` on the same snapshot as a control: fifo's own quiet figure (~37-42 ms
here) says whether the machine was quiet while it ran.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import random
import statistics
import time
from typing import Any

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import (
    ElasticPolicy,
    JobRequest,
    NodeState,
    Plan,
    Policy,
    Snapshot,
    WorkerPlacement,
    policy,
)
from paddlecloud.scheduler.apply import JobState, advance_states
from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, GoodputModel, GoodputTable

_GPU = Resources(4000, 32 << 30, 1)
_NODE = Resources(64000, 512 << 30, 8)
_STEP = FittedStepTime(base=0.05, per_sample=0.002, sync_local=0.03, sync_net=0.1)
_TABLES = GoodputModel(
    _STEP, AdaptiveBatch(init=128, lo=32, hi=4096, min_local=8), tuple((n + 7) // 8 for n in range(1, 17))
)


@functools.cache
def _tables() -> list[GoodputTable]:
    return [_TABLES.table(noise) for noise in (0.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)]


def adapt(job: JobRequest) -> JobRequest:
    """``job`` adaptive-batch if it is one of every other job (see the module docstring)."""
    k = int(job.key[1:])
    if k % 4 >= 2:  # every other job among the running (even k) and the waiting alike
        return job
    t = _tables()[k % 8]
    return dataclasses.replace(job, batches=t.batches, speedup=t.speedup, batch_size=64 if job.running else 0)


def adaptive_half(snap: Snapshot) -> Snapshot:
    """``snap`` with every other job adaptive-batch (see the module docstring)."""
    return dataclasses.replace(
        snap, queue=tuple(map(adapt, snap.queue)), running=tuple(map(adapt, snap.running))
    )


def _job(k: int, rng: random.Random) -> dict[str, Any]:
    """Job ``j{k}``'s fields (1-8 GPUs asked, elastic 1..16, 50 users), waiting."""
    want = rng.choice((1, 1, 2, 4, 8))
    return dict(key=f"j{k}", user=f"u{k % 50}", priority=0, submitted_at=float(k), pservers=0,
                pserver=Resources(), trainers=want, trainer=_GPU, min_trainers=1, max_trainers=16,
                attained=rng.uniform(0, 50_000))  # fmt: skip


def build(nodes: int, jobs: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    free = {f"n{i}": list(range(8)) for i in range(nodes)}
    names = list(free)
    running, queue = [], []
    for k in range(jobs):
        job = _job(k, rng)
        want = job["trainers"]
        if k % 2 == 0:
            placement: list[WorkerPlacement] = []
            for node in names[rng.randrange(len(names)) :] + names:
                while free[node] and len(placement) < want:
                    placement.append(WorkerPlacement("trainer", len(placement), node, (free[node].pop(),)))
                if len(placement) == want:
                    break
            if len(placement) == want:
                running.append(JobRequest(**job, running=want, placement=tuple(placement)))
                continue
        queue.append(JobRequest(**job))

    def node_state(name: str, gpus: list[int]) -> NodeState:
        used = 8 - len(gpus)
        return NodeState(name, _NODE, _GPU.times(used), tuple(gpus))

    node_states = tuple(node_state(n, g) for n, g in free.items())
    return Snapshot(1, 1e6, node_states, tuple(queue), tuple(running))


def after(snap: Snapshot, plan: Plan, rng: random.Random, churn: int) -> Snapshot:
    """The next round's snapshot, :data:`STEP_S` later: ``plan`` carried out on the snapshot's books
    (``scheduler.apply``, the simulator's code), ``churn`` random running jobs finished and as many
    new ones waiting (adaptive as :func:`adapt` says if the snapshot has adaptive jobs)."""
    old = {j.key: j for j in (*snap.queue, *snap.running)}
    books = {k: JobState() for k in old}
    for j in snap.running:
        books[j.key] = JobState(
            placement=tuple(p for p in j.placement if p.role == "trainer"),
            pservers=tuple(p for p in j.placement if p.role != "trainer"),
            resized_at=j.resized_at, rebatched_at=j.rebatched_at, batch=j.batch_size,
        )  # fmt: skip
    queue, running = [j.key for j in snap.queue], [j.key for j in snap.running]
    advance_states(plan, books, queue, running, snap.now, restart_s=0.0)
    for key in rng.sample(running, min(churn, len(running))):
        running.remove(key)
    adaptive = any(j.batches for j in old.values())
    first = 1 + max(int(k[1:]) for k in old)
    new = [JobRequest(**_job(k, rng) | {"attained": 0.0}) for k in range(first, first + churn)]
    queue += [j.key for j in new]
    books |= {j.key: JobState() for j in new}
    old |= {j.key: adapt(j) if adaptive else j for j in new}
    now = snap.now + STEP_S

    def request(key: str) -> JobRequest:
        j, b = old[key], books[key]
        n = len(b.placement)
        return dataclasses.replace(
            j, running=n, placement=(*b.pservers, *b.placement), resized_at=b.resized_at,
            rebatched_at=b.rebatched_at, batch_size=b.batch if j.batches and n else 0,
            attained=j.attained + n * STEP_S,
        )  # fmt: skip

    jobs = [request(k) for k in running]
    used: dict[str, list[int]] = {n.name: [] for n in snap.nodes}
    for j in jobs:
        for p in j.placement:
            used[p.node] += p.gpus
    nodes = tuple(
        NodeState(n.name, n.capacity, _GPU.times(len(used[n.name])),
                  tuple(g for g in range(8) if g not in used[n.name]))
        for n in snap.nodes
    )  # fmt: skip
    return Snapshot(snap.cycle + 1, now, nodes, tuple(request(k) for k in queue), tuple(jobs))


def steady(pol: Policy, snap: Snapshot, runs: int, rounds: int, churn: int) -> tuple[float, float, float]:
    """The steady state: the cold round's plan carried out, then ``rounds`` rounds (:func:`after`),
    each timed as in :func:`timed`: the median over rounds of that, and the mean admissions and
    resizes a round decides."""
    rng = random.Random(2)
    snap = after(snap, pol.schedule(snap), rng, churn)
    ts, admits, resizes = [], 0, 0
    for _ in range(rounds):
        ts.append(timed(pol, snap, runs))
        plan = pol.schedule(snap)
        admits, resizes = admits + len(plan.admit), resizes + len(plan.resize)
        snap = after(snap, plan, rng, churn)
    return statistics.median(ts), admits / rounds, resizes / rounds


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
#: the steady state: seconds between rounds
STEP_S = 60.0
#: --sweep: one grows while the other stays
SWEEP = ((1250, 500), (1250, 2500), (125, 5000), (625, 5000))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--sweep", action="store_true", help="also 1,250 nodes with fewer jobs, 5,000 jobs on fewer nodes"
    )
    ap.add_argument("--rounds", type=int, default=5, help="steady-state rounds timed after the cold one")
    ap.add_argument(
        "--churn", type=int, default=20, help="steady state: jobs finishing and arriving per round"
    )
    ap.add_argument("--goal", action="store_true", help="only the goal's figure, with fifo as a control")
    args = ap.parse_args()
    if args.goal:
        goal_only(args.runs)
        return
    print(f"one scheduling round, ms (median of {args.runs}; goal: 1,250 x 8 GPUs, 5,000 jobs <= 100 ms)")
    head = "".join(f"{name:>15}" for name in POLICIES)
    print(
        f"  {'nodes':>5} {'jobs':>5} {'running':>7}{head}{'elastic, half adaptive':>24}"
        f"{'group share':>13}{'goodput':>9}"
    )
    for nodes, jobs in TOGETHER + (SWEEP if args.sweep else ()):
        snap = build(nodes, jobs)
        cells = "".join(f"{timed(name, snap, args.runs) * 1000:15.1f}" for name in POLICIES)
        half = timed("elastic", adaptive_half(snap), args.runs) * 1000
        group = timed(GROUP_SHARE, adaptive_half(snap), args.runs) * 1000
        good = timed(policy("goodput"), adaptive_half(snap), args.runs) * 1000
        print(f"  {nodes:5d} {jobs:5d} {len(snap.running):7d}{cells}{half:24.1f}{group:13.1f}{good:9.1f}")
    snap = build(*TOGETHER[-1])
    cpu = {name: cpu_ms(policy(name), snap, args.runs) for name in POLICIES}
    cpu["elastic, half adaptive"] = cpu_ms(policy("elastic"), adaptive_half(snap), args.runs)
    cpu["group share, half adaptive"] = cpu_ms(GROUP_SHARE, adaptive_half(snap), args.runs)
    cpu["goodput, half adaptive"] = cpu_ms(policy("goodput"), adaptive_half(snap), args.runs)
    print(
        f"  cpu ms at {TOGETHER[-1][0]} x 8 / {TOGETHER[-1][1]} jobs (min of {args.runs}): "
        + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
    )
    goal = f"{TOGETHER[-1][0]} x 8 / {TOGETHER[-1][1]} jobs"
    print(f"  steady state at {goal}, ms (median over {args.rounds} rounds of the median of {args.runs}):")
    print(
        f"    the cold round's plan carried out, then rounds {STEP_S:.0f} s apart, {args.churn} jobs ending"
    )
    print(f"    and {args.churn} arriving before each (a live server's round; not the goal's figure)")
    half = adaptive_half(snap)
    for name, pol, s in (
        ("elastic", policy("elastic"), snap),
        ("elastic, half adaptive", policy("elastic"), half),
        ("goodput (opt-in), half adaptive", policy("goodput"), half),
    ):
        ms, admits, resizes = steady(pol, s, args.runs, args.rounds, args.churn)
        print(f"    {name}: {ms * 1000:.1f} ({admits:.0f} admissions, {resizes:.0f} resizes a round)")


def goal_only(runs: int) -> None:
    """The goal's round and fifo's, interleaved ``runs`` times: medians and minima, ms."""
    snap = build(*TOGETHER[-1])
    cases = {
        "fifo (control)": (policy("fifo"), snap),
        "elastic, half adaptive": (policy("elastic"), adaptive_half(snap)),
        "goodput, half adaptive": (policy("goodput"), adaptive_half(snap)),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (pol, s) in cases.items():
            t = time.perf_counter()
            pol.schedule(s)
            times[name].append((time.perf_counter() - t) * 1000)
    print(
        f"{TOGETHER[-1][0]} x 8 GPUs / {TOGETHER[-1][1]} jobs, cold round, "
        f"{runs} interleaved runs (goal <= 100 ms):"
    )
    for name, ts in times.items():
        print(f"  {name:<24} median {statistics.median(ts):6.1f} ms   min {min(ts):6.1f} ms")


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
