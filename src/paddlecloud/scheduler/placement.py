"""Gang placement of one job's workers on the cycle's :class:`NodePool`: all workers or none.

Trainers are packed on as few nodes as possible (largest free node first); GPUs are never split
across nodes and specific GPU indices are assigned. :func:`never_placeable` asks whether a job could
be placed at all, on the nodes as they are when idle (a fixed-capacity cluster refuses it at submit
otherwise).

Cache-aware placement: a job whose ``cache_nodes`` (the nodes holding its SampleSet cache) is not
empty gets its trainers on those nodes first, among the nodes with room, in the order above;
:func:`cache_note` says in the decision's message where they went and whether the cache nodes had
room. A job without cache nodes is placed exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import WorkerPlacement
from paddlecloud.scheduler.pool import ALL, Key, NodePool, cache_first
from paddlecloud.scheduler.snapshot import JobRequest, NodeState

__all__ = ["NeverFits", "cache_note", "never_placeable", "place_job"]


def _fifo_rank(key: Key, c: int, m: int, g: int, count: int) -> tuple[tuple[int, ...], int]:
    """Fill one node before opening another: the one that fits the most of these workers first, then
    the one with the most cpu and memory free. Workers without GPUs go to nodes without GPUs first, so
    they do not fragment the GPU nodes."""
    fc, fm, fg, has_gpus = key
    fits = min(fc // c if c else count, fm // m if m else count, fg // g if g else count, count)
    on_gpu_node = 1 if (g == 0 and has_gpus) else 0
    return (on_gpu_node, -fits, -fc, -fm), fits


def _place_role(
    pool: NodePool, role: str, count: int, need: Resources, cache: frozenset[str] = frozenset()
) -> list[WorkerPlacement] | None:
    if count == 0:
        return []
    c, m, g = need.cpu_m, need.memory, need.gpu
    if cache:  # every node with room, the cache nodes first
        order = pool.gang(c, m, g, ALL, lambda key: _fifo_rank(key, c, m, g, count))
        order = cache_first(order, pool.names, cache, count)
    else:
        order = pool.gang(c, m, g, count, lambda key: _fifo_rank(key, c, m, g, count))
    if sum(k for _, k in order) < count:
        return None
    out: list[WorkerPlacement] = []
    for i, k in order:
        for gpus in pool.take(i, c, m, g, g, k):
            out.append(WorkerPlacement(role, len(out), pool.names[i], gpus))
    return out


def place_job(pool: NodePool, job: JobRequest) -> tuple[WorkerPlacement, ...] | None:
    """Place every worker of ``job`` on ``pool`` (changing it) or return ``None`` leaving it unchanged."""
    pool.begin()
    pservers = _place_role(pool, "pserver", job.pservers, job.pserver)
    trainers = (
        None if pservers is None else _place_role(pool, "trainer", job.trainers, job.trainer, job.cache_nodes)
    )
    if pservers is None or trainers is None:
        pool.rollback()
        return None
    pool.commit()
    return (*pservers, *trainers)


def cache_note(cache: frozenset[str], placement: Iterable[WorkerPlacement]) -> str:
    """Where the workers of a job with a SampleSet cache went, for its decision's message ("" for
    a job without cache nodes): ``placed on node-1 (holds the SampleSet cache)``, ``no node holding
    the SampleSet cache had room: placed on node-2``. The trainers count (they read the data); a
    job without trainers counts all its workers."""
    if not cache:
        return ""
    workers = list(placement)
    readers = [p for p in workers if p.role == "trainer"] or workers
    nodes = sorted({p.node for p in readers})
    held, other = [n for n in nodes if n in cache], [n for n in nodes if n not in cache]
    if not held:
        return f"no node holding the SampleSet cache had room: placed on {', '.join(other)}"
    verb = "holds" if len(held) == 1 else "hold"
    note = f"placed on {', '.join(held)} ({verb} the SampleSet cache)"
    if other:
        note += f" and, no other node holding it having room, on {', '.join(other)}"
    return note


class NeverFits:
    """Why some worker of a job exceeds the capacity of every node (``None``: each fits somewhere);
    answers are remembered per worker shape, so a cycle scans the nodes once per shape."""

    def __init__(self, nodes: tuple[NodeState, ...]) -> None:
        self.nodes = nodes
        self._seen: dict[tuple[Resources | None, Resources | None], str | None] = {}
        #: the same answers by the identity of the jobs' resource objects (all alive for the cycle),
        #: which is cheaper to look up than their value
        self._by_id: dict[tuple[int, int, bool, bool], str | None] = {}

    def __call__(self, job: JobRequest) -> str | None:
        ident = (id(job.pserver), id(job.trainer), job.pservers > 0, job.trainers > 0)
        if ident in self._by_id:
            return self._by_id[ident]
        shape = (job.pserver if job.pservers else None, job.trainer if job.trainers else None)
        if shape not in self._seen:
            self._seen[shape] = self._why(shape)
        self._by_id[ident] = self._seen[shape]
        return self._seen[shape]

    def _why(self, shape: tuple[Resources | None, Resources | None]) -> str | None:
        for role, need in zip(("pserver", "trainer"), shape, strict=True):
            if need is not None and not any(need.fits_in(n.capacity) for n in self.nodes):
                caps = (n.capacity for n in self.nodes)
                largest = max(caps, key=lambda r: (r.gpu, r.cpu_m, r.memory), default=None)
                has = largest.describe() if largest else "no nodes"
                return f"a {role} needs {need.describe()}, but the largest node has {has}"
        return None


def _workers(n: int, role: str, need: Resources) -> str:
    """``3 trainers (cpu 1, memory 1Gi each)``, ``1 trainer (cpu 1, memory 1Gi)``."""
    return f"{n} {role}{'s' if n != 1 else ''} ({need.describe()}{' each' if n != 1 else ''})"


def never_placeable(idle: Sequence[NodeState], job: JobRequest) -> tuple[str, str] | None:
    """Why ``job`` could never be placed, even with every node ``idle`` (nothing allocated, every GPU
    free): ``(role, message)``, the message naming the capacity; None if it can be, at its fewest
    trainers. Either one of its workers fits no node, or its gang fits no idle cluster."""
    nodes = tuple(idle)
    why = NeverFits(nodes)(job)
    if why is not None:
        return ("pserver" if why.startswith("a pserver") else "trainer"), why
    gang = replace(job, trainers=job.lo)
    if place_job(NodePool(nodes), gang) is not None:
        return None
    total = sum((n.capacity for n in nodes), Resources())
    parts = [_workers(gang.trainers, "trainer", gang.trainer)]
    if gang.pservers:
        parts.insert(0, _workers(gang.pservers, "pserver", gang.pserver))
    return "trainer", (
        f"{' and '.join(parts)} do not fit on the cluster even when it is idle: {len(nodes)} "
        f"node{'s' if len(nodes) != 1 else ''}, {total.describe()} in all"
    )
