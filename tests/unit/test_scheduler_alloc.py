"""scheduler.alloc: :meth:`Allocation.hand_over` (the top-up's move of a donor's trainers to a
taker in one step) leaves exactly what moving them one at a time (``shrink`` the donor by one, then
``grow`` the taker by one) leaves, or does nothing and says so.

Random clusters with trainers of several shapes, filled up; random donor / taker pairs are moved
both ways on two allocations of one snapshot, and every field of the two (each node's free
capacity, GPU list and hint stamp, the hints, the counters, each job's trainers) compared after each.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.decisions import WorkerPlacement
from paddlecloud.scheduler.snapshot import JobRequest, NodeState, Snapshot

GI = 2**30
NODE = Resources(16000, 64 * GI, 8)
SHAPES = (Resources(2000, 8 * GI, 1), Resources(4000, 16 * GI, 2), Resources(1000, 4 * GI, 0))


def _snapshot(rng: random.Random) -> Snapshot:
    """A few nodes of 8 GPUs, running jobs of the three shapes placed on them at random."""
    names = [f"n{i}" for i in range(rng.choice((2, 4, 6)))]
    free = {n: [NODE.cpu_m, NODE.memory, list(range(8))] for n in names}
    running = []
    for k in range(rng.randrange(6, 16)):
        t = rng.choice(SHAPES)
        placement: list[WorkerPlacement] = []
        for _ in range(rng.randrange(1, 6)):
            room = [
                n
                for n in names
                if free[n][0] >= t.cpu_m and free[n][1] >= t.memory and len(free[n][2]) >= t.gpu
            ]
            if not room:
                break
            n = rng.choice(room)
            f = free[n]
            gpus, f[2] = tuple(f[2][: t.gpu]), f[2][t.gpu :]
            f[0], f[1] = f[0] - t.cpu_m, f[1] - t.memory
            placement.append(WorkerPlacement("trainer", len(placement), n, gpus))
        if placement:
            job = JobRequest(
                f"j{k}", "u", 0, float(k), 0, Resources(), len(placement), t, 1, 16,
                running=len(placement), placement=tuple(placement),
            )  # fmt: skip
            running.append(job)
    nodes = tuple(
        NodeState(n, NODE, Resources(NODE.cpu_m - f[0], NODE.memory - f[1], 8 - len(f[2])), tuple(f[2]))
        for n, f in free.items()
    )
    return Snapshot(1, 0.0, nodes, (), tuple(running))


def _state(alloc: Allocation) -> tuple[object, ...]:
    pool = alloc.pool
    pool.sync()
    buckets = {k: (list(b.nodes), list(b.stamps)) for k, b in pool.buckets.items()}
    free = (list(pool.cpu), list(pool.mem), list(pool.gpu), [list(g) for g in pool.gpus], list(pool.stamp))
    counters = (pool.tcpu, pool.tmem, pool.tgpu, pool.roomier, pool.cut, list(pool.hints))
    return (*free, *counters, buckets, {k: list(v) for k, v in alloc.trainers.items()})


def _one_at_a_time(alloc: Allocation, donor: JobRequest, taker: JobRequest, k: int) -> None:
    for _ in range(k):
        alloc.shrink(donor, alloc.count(donor.key) - 1)
        alloc.grow(taker, 1)


def _walk(seed: int) -> tuple[int, int]:
    """Random moves on two allocations of one snapshot, in one step where :meth:`hand_over` takes
    them, one at a time on the other, compared after each; how many it took and refused."""
    rng = random.Random(seed)
    snap = _snapshot(rng)
    quick, slow = Allocation.of(snap), Allocation.of(snap)
    for alloc in (quick, slow):  # nothing free: the top-up moves trainers then
        _fill(alloc, snap, True)
    assert _state(quick) == _state(slow)
    moved = refused = 0
    for _ in range(100):
        donor, taker = rng.sample(snap.running, 2)
        alike = [j for j in snap.running if j.trainer == donor.trainer and j is not donor]
        if alike and rng.random() < 0.7:  # mostly one shape: the case the top-up meets
            taker = rng.choice(alike)
        if quick.count(donor.key) < 2 or quick.count(taker.key) == 0:
            continue
        k = rng.randrange(1, quick.count(donor.key))
        if quick.hand_over(donor, taker, k):
            moved += 1
            _one_at_a_time(slow, donor, taker, k)
        else:
            refused += 1
            assert _state(quick) == _state(slow)  # nothing done
            for alloc in (quick, slow):
                _one_at_a_time(alloc, donor, taker, k)
        assert _state(quick) == _state(slow)
        full = rng.random() < 0.7  # mostly nothing free, as when the top-up moves trainers
        freed = rng.choice(snap.running)  # else a trainer freed: room on some node
        for alloc in (quick, slow):
            if full:
                _fill(alloc, snap, True)
            elif alloc.count(freed.key) > 1:
                alloc.shrink(freed, alloc.count(freed.key) - 1)
    return moved, refused


def _fill(alloc: Allocation, snap: Snapshot, full: bool) -> None:
    """Grow the jobs until nothing more fits (``full``), or one step."""
    for job in snap.running:
        while alloc.grow(job, 1) and full:
            pass


@pytest.mark.parametrize("seed", range(12))
def test_hand_over_is_moving_one_trainer_at_a_time(seed: int) -> None:
    _walk(seed)


def test_hand_over_covers_both_answers() -> None:
    """Over the seeds above, some moves are made in one step and some refused (other shapes, room
    free, a taker below its count at the snapshot, which must return to its old place)."""
    walks = [_walk(seed) for seed in range(12)]
    assert sum(m for m, _ in walks) >= 100 and sum(r for _, r in walks) >= 100


@pytest.mark.parametrize("case", ["trial", "overdrawn"])
def test_hand_over_refuses_inside_a_trial_or_with_a_node_overdrawn(case: str) -> None:
    """Inside a trial the journal must see each step; with a node holding less than nothing the free
    totals no longer say that one node at most has room. Refused, nothing done, where the same move
    is taken without the trial / with the node not counted as overdrawn."""
    snap = _snapshot(random.Random(3))
    if case == "overdrawn":
        n = snap.nodes[-1]
        over = dataclasses.replace(n, allocated=dataclasses.replace(n.allocated, cpu_m=NODE.cpu_m + 1000))
        snap = dataclasses.replace(snap, nodes=(*snap.nodes[:-1], over))

    def filled() -> Allocation:
        alloc = Allocation.of(snap)
        _fill(alloc, snap, True)
        return alloc

    def control(donor: JobRequest, taker: JobRequest) -> bool:
        alloc = filled()
        alloc.pool.overdrawn = False
        return alloc.hand_over(donor, taker, 1)

    pairs = [(d, t) for d in snap.running for t in snap.running if d is not t and d.trainer == t.trainer]
    donor, taker = next((d, t) for d, t in pairs if control(d, t))
    alloc = filled()
    assert alloc.pool.overdrawn == (case == "overdrawn")
    if case == "trial":
        alloc.begin()
    before = _state(alloc)
    assert not alloc.hand_over(donor, taker, 1)
    assert _state(alloc) == before
