"""``ElasticPolicy.pack`` (scheduler/consolidate.py): growing jobs on as few nodes as their count
needs, re-placed whole when that takes a move, not grown when nothing packed fits."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import ElasticPolicy, JobRequest, NodeState, Plan, Snapshot, WorkerPlacement
from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.consolidate import Packer, _fits_on, _own, consolidate, fewest_nodes, packs
from paddlecloud.scheduler.elastic import emit
from paddlecloud.scheduler.pool import NodePool, how_many

GI = 2**30
GPU = Resources(1000, GI, 1)


def job(key: str, trainers: int, attained: float = 0.0, lo: int = 1, hi: int = 4, **kw: object) -> JobRequest:
    rate = tuple(float(n) for n in range(1, hi + 1))
    return JobRequest(
        key=key, user="u", priority=0, submitted_at=0.0, pservers=0, pserver=Resources(),
        trainers=trainers, trainer=GPU, min_trainers=lo, max_trainers=hi, attained=attained,
        speedup=rate, resized_at=-1e9, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def cluster(*held: dict[str, int], now: float = 1e6) -> tuple[Snapshot, dict[str, list[WorkerPlacement]]]:
    """4-GPU nodes n0, n1, ...; ``held[i]`` maps job keys to the trainers they hold on node i (lowest
    GPUs first, in that order). Returns the nodes and each job's placement, node by node."""
    nodes, where = [], dict[str, list[WorkerPlacement]]()
    for i, jobs in enumerate(held):
        gpu = 0
        for key, n in jobs.items():
            mine = where.setdefault(key, [])
            mine += [WorkerPlacement("trainer", len(mine) + k, f"n{i}", (gpu + k,)) for k in range(n)]
            gpu += n
        used = Resources(1000 * gpu, gpu * GI, gpu)
        nodes.append(NodeState(f"n{i}", Resources(64000, 256 * GI, 4), used, tuple(range(gpu, 4))))
    return Snapshot(cycle=1, now=now, nodes=tuple(nodes), queue=()), where


def running(snap: Snapshot, where: dict[str, list[WorkerPlacement]], *jobs: JobRequest) -> Snapshot:
    placed = tuple(
        dataclasses.replace(j, running=len(where[j.key]), placement=tuple(where[j.key])) for j in jobs
    )
    return dataclasses.replace(snap, running=placed)


def nodes_of(plan: Plan, key: str) -> list[str]:
    return [p.node for r in plan.resize if r.job == key for p in r.placement]


PACK = ElasticPolicy(pack=True)


def test_fewest_nodes_takes_the_tightest_node_that_holds_them_all_else_the_roomiest_first() -> None:
    snap, _ = cluster({"x": 0}, {"x": 2}, {"x": 1})  # free: 4, 2, 3 GPUs
    pool = NodePool(snap.nodes)
    assert fewest_nodes(pool, 1000, GI, 1, 2) == [(1, 2)]
    assert fewest_nodes(pool, 1000, GI, 1, 3) == [(2, 3)]
    assert fewest_nodes(pool, 1000, GI, 1, 6) == [(0, 4), (2, 2)]
    assert fewest_nodes(pool, 1000, GI, 1, 10) is None


def test_a_growing_job_is_moved_whole_onto_one_node_instead_of_spreading() -> None:
    # A (asked 4) runs 1 trainer on n0, which B fills; n1 is free. The top-up grows A to 4: without
    # ``pack`` its new trainers go to n1 beside the one on n0 (2 nodes); with it A is re-placed whole
    # on n1 (it restarts anyway) and the live controller is told trainer-0 moves
    a, b = job("A", 4), job("B", 3, attained=1e6, lo=3, hi=3)
    snap, where = cluster({"A": 1, "B": 3}, {})
    snap = running(snap, where, a, b)
    assert sorted(set(nodes_of(ElasticPolicy().schedule(snap), "A"))) == ["n0", "n1"]
    plan = PACK.schedule(snap)
    assert [(r.job, r.trainers) for r in plan.resize] == [("A", 4)]
    assert nodes_of(plan, "A") == ["n1"] * 4
    assert [p.index for p in plan.resize[0].placement] == [0, 1, 2, 3]


def test_a_job_is_not_grown_onto_more_nodes_than_its_count_needs() -> None:
    # A runs 1 trainer on n0 (full); n1 and n2 have one GPU free each: 2 trainers need 1 node, and
    # none has room for 2, so with ``pack`` A stays at 1 (without it: 3 trainers on 3 nodes)
    a = job("A", 4)
    snap, where = cluster({"A": 1, "B": 3}, {"C": 3}, {"D": 3})
    others = [job(k, 3, attained=1e6, lo=3, hi=3) for k in "BCD"]
    snap = running(snap, where, a, *others)
    assert len(set(nodes_of(ElasticPolicy().schedule(snap), "A"))) == 3
    assert PACK.schedule(snap).resize == []


def test_no_donor_is_shrunk_for_a_grow_refused_for_its_placement() -> None:
    # as above, but D is elastic and served far more: the LAS top-up would take trainers from it for
    # A. With room free (n1, n2) but not packed, a donor's trainer is not what A lacks: D keeps 3
    a, d = job("A", 4), job("D", 3, attained=1e7, lo=1, hi=3)
    snap, where = cluster({"A": 1, "B": 3}, {"C": 3}, {"D": 3})
    fixed = [job(k, 3, attained=1e6, lo=3, hi=3) for k in "BC"]
    snap = running(snap, where, a, d, *fixed)
    assert {r.job: r.trainers for r in PACK.schedule(snap).resize} == {}


def test_consolidate_moves_a_restarting_job_onto_fewer_nodes_where_there_is_room() -> None:
    a = job("A", 2)
    snap, where = cluster({"A": 1, "B": 3}, {"A": 1, "C": 3}, {})
    snap = running(snap, where, a, job("B", 3, lo=3, hi=3), job("C", 3, lo=3, hi=3))
    alloc = Allocation.of(snap)
    assert consolidate(alloc, [a]) == ["A"]
    assert [p.node for p in alloc.trainers["A"]] == ["n2", "n2"]
    full, where = cluster({"A": 1, "B": 3}, {"A": 1, "C": 3})
    full = running(full, where, a, job("B", 3, lo=3, hi=3), job("C", 3, lo=3, hi=3))
    alloc = Allocation.of(full)
    assert consolidate(alloc, [a]) == []
    assert [p.node for p in alloc.trainers["A"]] == ["n0", "n1"]


def test_jobs_with_pservers_or_without_gpus_grow_as_before() -> None:
    # their trainers do not restart when one joins (pservers), or they have no GPU exchange to save
    assert packs(job("A", 2))
    assert not packs(dataclasses.replace(job("A", 2), pservers=1, pserver=Resources(1000, GI)))
    assert not packs(dataclasses.replace(job("A", 2), trainer=Resources(1000, GI)))
    snap, _ = cluster({})
    assert Packer(Allocation.of(snap), 4).bound(job("A", 2), 5) == 2


def test_pack_is_off_by_default() -> None:
    assert ElasticPolicy().pack is False


def test_a_job_moved_at_the_same_count_gets_a_resize_with_its_new_placement() -> None:
    # a re-placed job whose count ends where it began must still be told where its trainers are:
    # without the Resize it would stay where it was while others were given its GPUs
    a = job("A", 2)
    snap, where = cluster({"A": 1, "B": 3}, {"A": 1, "C": 3}, {})
    snap = running(snap, where, a, job("B", 3, lo=3, hi=3), job("C", 3, lo=3, hi=3))
    alloc = Allocation.of(snap)
    consolidate(alloc, [snap.running[0]])
    plan = Plan(1)
    emit(plan, snap, alloc, {}, set())
    assert [(r.job, r.trainers, [p.node for p in r.placement]) for r in plan.resize] == [
        ("A", 2, ["n2", "n2"])
    ]
    assert "moved to n2" in plan.resize[0].message


def _random_cluster(rng: random.Random) -> tuple[Snapshot, list[JobRequest]]:
    """4-GPU nodes, each holding trainers of up to three of jobs a, b, c, d at random."""
    held = []
    for _ in range(rng.randint(2, 9)):
        free, mine = 4, dict[str, int]()
        for key in rng.sample("abcd", rng.randint(0, 3)):
            mine[key] = rng.randint(0, free)
            free -= mine[key]
        held.append(mine)
    snap, where = cluster(*held)
    jobs = [job(key, len(where[key]), hi=8) for key in sorted(where) if where[key]]
    return running(snap, where, *jobs), jobs


def test_the_room_count_is_each_nodes_worker_count_and_follows_changes() -> None:
    rng = random.Random(5)
    for _ in range(200):
        snap, _ = _random_cluster(rng)
        pool = NodePool(snap.nodes)
        for _ in range(3):
            nodes = range(len(pool.cpu))
            brute = Counter(how_many(pool.cpu[i], pool.mem[i], pool.gpu[i], 1000, GI, 1) for i in nodes)
            assert pool.room(1000, GI, 1) == sorted(((k, n) for k, n in brute.items() if k > 0), reverse=True)
            i = rng.randrange(len(pool.cpu))
            if pool.gpu[i] > 0:
                pool.take(i, 1000, GI, 1, 1)
            else:
                pool.give(i, 1000, GI, 1, [()])


def test_the_re_place_pre_check_answers_what_the_trial_would() -> None:
    """``_fits_on`` (no trial) against releasing the job and asking :func:`fewest_nodes` (the trial
    it skips), over random clusters, counts and node bounds."""
    rng, answers = random.Random(7), Counter[bool]()
    for _ in range(300):
        snap, jobs = _random_cluster(rng)
        alloc = Allocation.of(snap)
        for j in jobs:
            for n in range(1, 10):
                for limit in (1, 2, 3):
                    alloc.begin()
                    alloc.shrink(j, 0)
                    spots = fewest_nodes(alloc.pool, 1000, GI, 1, n)
                    alloc.rollback()
                    trial = spots is not None and len(spots) <= limit
                    assert _fits_on(alloc, j, n, limit, _own(alloc, j.key)) == trial, (j.key, n, limit)
                    answers[trial] += 1
    assert answers[True] > 1000 and answers[False] > 1000  # both answers were put to the test
