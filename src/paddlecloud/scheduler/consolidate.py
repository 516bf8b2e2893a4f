"""Consolidation: an adaptive job that restarts anyway this cycle is placed on the fewest nodes.

A job's goodput table (``JobRequest.speedup``) is measured or modelled on a packed placement, but a
job grown one trainer at a time lands wherever a trainer fits (beside its own, else the node that got
room back last) and, after shrinks and grows of its neighbours, ends up spread over more nodes than
its count needs; every node more costs it the gradient exchange between nodes (the Pollux profiles:
yolov3 on 4 GPUs runs 41 samples/s over 2 nodes against 72 on one). A resize restarts every trainer
of the job anyway (the simulator's and the live DDP group's restart), so moving the trainers it keeps
costs nothing more: :func:`consolidate` re-places each such job whose count changed this cycle (or
that was admitted in it) on the fewest nodes the free capacity allows, if that is fewer than where it
ended up. One node that holds every trainer: the one that fits them most tightly (it leaves the
roomier nodes whole for others); else the nodes with the most room first.

Data flow: ``elastic._Cycle`` after its steps (``ElasticPolicy.fair_pack``) -> :func:`consolidate`
(the cycle's :class:`~paddlecloud.scheduler.alloc.Allocation`, the jobs to look at) -> trials on the
allocation: release the job's trainers, choose the nodes (:func:`fewest_nodes`), place them there
(``Allocation.place_at``); committed if the job spans fewer nodes, else rolled back. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.pool import ALL, NodePool
from paddlecloud.scheduler.snapshot import JobRequest

MOVE = True
SMALL_ONLY = False
__all__ = ["Packer", "consolidate", "fewest_nodes", "spread"]


def spread(alloc: Allocation, key: str) -> int:
    """How many nodes the trainers of ``key`` use in the allocation."""
    return len({p.node for p in alloc.trainers.get(key, ())})


def fewest_nodes(pool: NodePool, c: int, m: int, g: int, n: int) -> list[tuple[int, int]] | None:
    """Where ``n`` workers of ``(c, m, g)`` go on the fewest nodes of ``pool``: ``(node, workers)``;
    one node if one holds them all (the tightest such, then the lowest number), else the roomiest
    first. None if they do not fit."""
    room = pool.gang(c, m, g, ALL)  # roomiest first, then by node number
    if sum(k for _, k in room) < n:
        return None
    whole = [(k, i) for i, k in room if k >= n]
    if whole:
        return [(min(whole)[1], n)]
    out: list[tuple[int, int]] = []
    for i, k in room:
        out.append((i, min(k, n)))
        n -= out[-1][1]
        if n == 0:
            break
    return out


def consolidate(alloc: Allocation, jobs: Iterable[JobRequest]) -> list[str]:
    """Re-place each of ``jobs`` (those restarting this cycle) on fewer nodes where the free capacity
    allows it, the largest first; the keys of those moved."""
    moved: list[str] = []
    for job in sorted(jobs, key=lambda j: (-alloc.count(j.key), j.key)):
        n, before = alloc.count(job.key), spread(alloc, job.key)
        if n <= 1 or before <= 1:
            continue
        t = job.trainer
        alloc.begin()
        alloc.shrink(job, 0)
        spots = fewest_nodes(alloc.pool, t.cpu_m, t.memory, t.gpu, n)
        if spots is None or len(spots) >= before:
            alloc.rollback()
            continue
        alloc.place_at(job, spots)
        alloc.commit()
        moved.append(job.key)
    return moved


class Packer:
    """One more trainer for an adaptive job, never on more nodes than its new count needs: beside
    its own trainers where there is room, else the whole job re-placed on the fewest nodes (it
    restarts anyway when it grows); neither: no trainer (it stays for another job)."""

    def __init__(self, alloc: Allocation, gpus_per_node: int) -> None:
        #: the most GPUs a node has (0: no GPU nodes, no bound)
        self.alloc, self.gpus_per_node = alloc, gpus_per_node

    def bound(self, job: JobRequest, n: int) -> int:
        """The fewest nodes ``n`` trainers of ``job`` need, packed (``n`` for a job without GPUs)."""
        per = self.gpus_per_node // job.trainer.gpu if job.trainer.gpu else 0
        return -(-n // per) if per > 0 else n

    def grow(self, job: JobRequest) -> bool:
        alloc = self.alloc
        n = alloc.count(job.key)
        limit = self.bound(job, n + 1)
        if SMALL_ONLY and limit > 1:
            return alloc.grow(job, 1)
        alloc.begin()
        if alloc.grow(job, 1) and spread(alloc, job.key) <= limit:
            alloc.commit()
            return True
        alloc.rollback()
        if not MOVE:
            return False
        t = job.trainer
        alloc.begin()
        alloc.shrink(job, 0)
        spots = fewest_nodes(alloc.pool, t.cpu_m, t.memory, t.gpu, n + 1)
        if spots is None or len(spots) > limit:
            alloc.rollback()
            return False
        alloc.place_at(job, spots)
        alloc.commit()
        return True
