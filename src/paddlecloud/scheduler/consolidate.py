"""Packed placement for growing jobs (``ElasticPolicy.pack``): never more nodes than the count needs.

A job's speed-up table (``JobRequest.speedup``, a goodput table for an adaptive job) is measured or
modelled on a packed placement, but a job grown one trainer at a time lands wherever a trainer fits
(beside its own, else the node that got room back last) and, on a busy cluster, ends up spread over
more nodes than its count needs; every node more costs it the gradient exchange between nodes (the
Pollux profiles: yolov3 on 2 GPUs runs 29 samples/s over 2 nodes against 47 on one). Growing a job
that trains as one group (no pservers: a DDP / torch elastic group) restarts all its trainers
anyway, so moving the ones it keeps costs nothing more. So with ``pack``:

* :class:`Packer`: one more trainer goes beside the job's own if the job then spans no more nodes
  than its new count needs (:meth:`Packer.bound`: ``ceil(n x GPUs per trainer / GPUs per node)``);
  else the whole job is re-placed on the fewest nodes (:func:`fewest_nodes`) if that is few enough;
  else it gets no trainer (the trainer stays free for another job). Jobs with pservers, whose
  trainers do not restart when one joins, and jobs without GPUs grow as before;
* :func:`consolidate`: after the cycle's steps, each job admitted or resized in it (it restarts
  anyway) is re-placed on fewer nodes if the free capacity allows it, the largest first.

A re-place that must fail is not tried: :func:`_fits_on` counts, from the pool's buckets
(:meth:`~paddlecloud.scheduler.pool.NodePool.room`), whether the ``limit`` roomiest nodes would take
the job once its trainers are given back, which is exactly when :func:`fewest_nodes` answers within
the bound (a trial then only runs where it succeeds); nor is a grow beside the job's own trainers
tried when none of its nodes has room for one more (the trial could only add a node).

The live controller carries a move out as a retire-and-add of the trainers from the lowest moved
index up (``controller/loop/effects.py``). Data flow: ``elastic._Cycle`` -> these, on the cycle's
:class:`~paddlecloud.scheduler.alloc.Allocation`, in trials (release the job's trainers, choose the
nodes, ``Allocation.place_at``; committed or rolled back). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.pool import NodePool, how_many
from paddlecloud.scheduler.snapshot import JobRequest

__all__ = ["Packer", "consolidate", "fewest_nodes", "packs", "spread"]


def packs(job: JobRequest) -> bool:
    """Whether ``job`` is placed packed when it grows: GPU trainers, no pservers."""
    return job.trainer.gpu > 0 and job.pservers == 0


def spread(alloc: Allocation, key: str) -> int:
    """How many nodes the trainers of ``key`` use in the allocation."""
    return len({p.node for p in alloc.trainers.get(key, ())})


def fewest_nodes(pool: NodePool, c: int, m: int, g: int, n: int) -> list[tuple[int, int]] | None:
    """Where ``n`` workers of ``(c, m, g)`` go on the fewest nodes of ``pool``: ``(node, workers)``;
    one node if one holds them all (the tightest such, then the lowest number), else the roomiest
    first (then by number). None if they do not fit. Reads the pool's buckets, not its nodes."""
    if not pool.total_fits(c * n, m * n, g * n):
        return None
    pool.sync()
    whole: tuple[int, int] | None = None
    for (fc, fm, fg, _), b in pool.buckets.items():
        k = how_many(fc, fm, fg, c, m, g)
        if k >= n and b.nodes and (whole is None or (k, b.nodes[0]) < whole):
            whole = (k, b.nodes[0])
    if whole is not None:
        return [(whole[1], n)]
    room = pool.gang(c, m, g, n)  # roomiest first, then by node number
    if sum(k for _, k in room) < n:
        return None
    out: list[tuple[int, int]] = []
    for i, k in room:
        out.append((i, min(k, n)))
        n -= out[-1][1]
        if n == 0:
            break
    return out


def _own(alloc: Allocation, key: str) -> dict[int, int]:
    """The nodes the trainers of ``key`` use (pool index, in order of first use) and how many each."""
    index, own = alloc.pool.index, dict[int, int]()
    last, i = None, -1
    for p in alloc.trainers.get(key, ()):
        if p.node != last:  # trainers of a node mostly sit together
            last, i = p.node, index[p.node]
        own[i] = own.get(i, 0) + 1
    return own


def _fits_on(alloc: Allocation, job: JobRequest, n: int, limit: int, own: dict[int, int]) -> bool:
    """Whether ``n`` trainers of ``job`` (on ``own``: :func:`_own`) go on at most ``limit`` nodes
    once its own are given back: what :func:`fewest_nodes` answers after ``shrink(job, 0)``, without
    that trial. Taking the roomiest nodes first uses the fewest, so they fit iff the free total holds
    them and the ``limit`` roomiest nodes take ``n`` (:meth:`NodePool.room`; a node of the job's
    takes what it takes now plus the trainers it gives back). An overdrawn pool (its bucket keys
    say less): True, the trial decides."""
    pool, t = alloc.pool, job.trainer
    c, m, g = t.cpu_m, t.memory, t.gpu
    k = n - sum(own.values())  # what the free total must hold beyond what the job gives back
    if pool.overdrawn:
        return True
    if c * k > pool.tcpu or m * k > pool.tmem or g * k > pool.tgpu:
        return False
    room, cpu, mem, gpu = pool.room(c, m, g), pool.cpu, pool.mem, pool.gpu
    if limit == 1:  # the roomiest node: another, or one of the job's with its trainers back
        best = room[0][0] if room else 0
        for i, j in own.items():
            best = max(best, how_many(cpu[i], mem[i], gpu[i], c, m, g) + j)
        return best >= n
    counts = dict(room)
    for i, j in own.items():
        now = how_many(cpu[i], mem[i], gpu[i], c, m, g)
        if now:
            counts[now] -= 1
        counts[now + j] = counts.get(now + j, 0) + 1
    for per in sorted(counts, reverse=True):
        nodes = min(counts[per], limit)
        n -= per * nodes
        limit -= nodes
        if n <= 0:
            return True
        if limit == 0:
            return False
    return False


def _replace(
    alloc: Allocation, job: JobRequest, n: int, limit: int, own: dict[int, int] | None = None
) -> bool:
    """Re-place ``job`` with ``n`` trainers on the fewest nodes if that is at most ``limit``."""
    t = job.trainer
    if not _fits_on(alloc, job, n, limit, _own(alloc, job.key) if own is None else own):
        return False
    alloc.begin()
    alloc.shrink(job, 0)
    spots = fewest_nodes(alloc.pool, t.cpu_m, t.memory, t.gpu, n)
    if spots is None or len(spots) > limit:
        alloc.rollback()
        return False
    alloc.place_at(job, spots)
    alloc.commit()
    return True


class Packer:
    """One more trainer for a job, never on more nodes than its new count needs (module doc)."""

    def __init__(self, alloc: Allocation, gpus_per_node: int) -> None:
        #: the most GPUs a node of the cluster has
        self.alloc, self.gpus_per_node = alloc, gpus_per_node

    def bound(self, job: JobRequest, n: int) -> int:
        """The fewest nodes ``n`` trainers of ``job`` need, packed."""
        per = self.gpus_per_node // job.trainer.gpu if job.trainer.gpu else 0
        return -(-n // per) if per > 0 else n

    def grow(self, job: JobRequest) -> bool:
        """Add one trainer to ``job`` (see the class); whether it got one."""
        alloc = self.alloc
        own = _own(alloc, job.key)
        n = sum(own.values())
        t = job.trainer
        per = self.gpus_per_node // t.gpu if t.gpu else 0
        limit = -(-(n + 1) // per) if per > 0 else n + 1  # self.bound(job, n + 1), inline
        if len(own) < limit:  # one node more is still within it: no trial needed
            return alloc.grow(job, 1) or _replace(alloc, job, n + 1, limit, own)
        cpu, mem, gpu, c, m, g = alloc.pool.cpu, alloc.pool.mem, alloc.pool.gpu, t.cpu_m, t.memory, t.gpu
        for i in own:
            if c <= cpu[i] and m <= mem[i] and g <= gpu[i]:  # one more may go beside its own: try it
                alloc.begin()
                if alloc.grow(job, 1) and spread(alloc, job.key) <= limit:
                    alloc.commit()
                    return True
                alloc.rollback()
                break
        return _replace(alloc, job, n + 1, limit, own)  # (none: one more would take a node more)


def consolidate(alloc: Allocation, jobs: Iterable[JobRequest]) -> list[str]:
    """Re-place each of ``jobs`` (those restarting this cycle) on fewer nodes where the free capacity
    allows it, the largest first; the keys of those moved."""
    moved: list[str] = []
    for job in sorted(jobs, key=lambda j: (-alloc.count(j.key), j.key)):
        n, before = alloc.count(job.key), spread(alloc, job.key)
        if n > 1 and before > 1 and _replace(alloc, job, n, before - 1):
            moved.append(job.key)
    return moved
