"""Working allocation for preemptive and elastic policies: what-if placement on the cycle's node pool.

:class:`Allocation` starts from the snapshot's free capacity (running jobs hold what they hold) and
lets a policy release a job's trainers, place new ones, and read back each job's final placement.
What-ifs run as trials (:meth:`Allocation.begin`, then :meth:`commit` or :meth:`rollback`) that
journal what they change instead of copying the cluster. Nothing here decides; policies do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import WorkerPlacement, trainer_at
from paddlecloud.scheduler.pool import ALL, NodePool, cache_first, how_many
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["Allocation", "Spot", "tiresias_queue"]

#: hints that survive a committed trial (what-if copies used to keep this many)
KEPT_HINTS = 64
#: where one more trainer goes: the node, and the earlier slot it returns to (if any)
Spot = tuple[int, WorkerPlacement | None]


def tiresias_queue(attained: float, thresholds: tuple[float, ...]) -> int:
    """Index of the discretized least-attained-service queue (0 = least served)."""
    for i, limit in enumerate(thresholds):
        if attained < limit:
            return i
    return len(thresholds)


@dataclass
class Allocation:
    pool: NodePool
    #: job key -> its trainers' placement (index order) in this what-if
    trainers: dict[str, list[WorkerPlacement]] = field(default_factory=dict)
    jobs: dict[str, JobRequest] = field(default_factory=dict)
    #: keys whose trainer count changed, while a policy asks for them (``None``: not tracked)
    changed: list[str] | None = None
    #: trainer shapes no node has room for, with the pool's ``roomier`` count when that was seen
    _full: dict[tuple[int, int, int], int] = field(default_factory=dict)
    #: running jobs' trainers at the snapshot, in index order
    _was: dict[str, list[WorkerPlacement]] = field(default_factory=dict)
    #: inside a trial: each changed key's trainer list from before it (None: there was none)
    _saved: dict[str, list[WorkerPlacement] | None] | None = None
    _added: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, snap: Snapshot) -> Allocation:
        alloc = cls(NodePool(snap.nodes))
        jobs, was, trainers = alloc.jobs, alloc._was, alloc.trainers
        for job in snap.running:
            key, placement = job.key, job.placement
            jobs[key] = job
            mine = [p for p in placement if p.role == "trainer"]
            was[key] = mine
            trainers[key] = mine.copy()
        return alloc

    @property
    def total(self) -> Resources:
        """Free capacity summed over nodes."""
        return self.pool.total()

    def count(self, key: str) -> int:
        return len(self.trainers.get(key, ()))

    # ------------------------------------------------------------------------------------- trials

    def begin(self) -> None:
        self.pool.begin()
        self._saved, self._added = {}, []

    def commit(self) -> None:
        self.pool.commit(keep_hints=KEPT_HINTS)
        self._saved = None

    def rollback(self) -> None:
        self.pool.rollback()
        for key, held in (self._saved or {}).items():
            if held is None:
                self.trainers.pop(key, None)
            else:
                self.trainers[key] = held
            self._changed(key)
        for key in self._added:
            self.jobs.pop(key, None)
        self._saved = None

    def _held(self, key: str) -> list[WorkerPlacement]:
        """The key's trainer list, to change (inside a trial, a private copy)."""
        saved = self._saved
        if saved is not None and key not in saved:
            old = self.trainers.get(key)
            saved[key] = old
            self.trainers[key] = [] if old is None else list(old)
        held = self.trainers.get(key)
        if held is None:
            held = self.trainers[key] = []
        return held

    def _joined(self, job: JobRequest) -> None:
        if job.key not in self.jobs:
            self.jobs[job.key] = job
            self._added.append(job.key)

    def _changed(self, key: str) -> None:
        if self.changed is not None:
            self.changed.append(key)

    # ----------------------------------------------------------------------------------- trainers

    def _give_back(self, job: JobRequest, placed: list[WorkerPlacement]) -> None:
        """Give trainers back in order, each node's run of them at once (the same as one by one)."""
        t, pool = job.trainer, self.pool
        start = 0
        for end in range(1, len(placed) + 1):
            if end == len(placed) or placed[end].node != placed[start].node:
                gpus = [p.gpus for p in placed[start:end]]
                pool.give(pool.index[placed[start].node], t.cpu_m, t.memory, t.gpu, gpus, hint=True)
                start = end

    def _take(self, job: JobRequest, i: int, first: int, k: int = 1) -> list[WorkerPlacement]:
        t, name = job.trainer, self.pool.names[i]
        gpus = self.pool.take(i, t.cpu_m, t.memory, t.gpu, t.gpu, k)
        return [trainer_at(first + j, name, got) for j, got in enumerate(gpus)]

    def shrink(self, job: JobRequest, to: int) -> None:
        """Release trainers above ``to`` (highest index first)."""
        key = job.key
        n = len(self.trainers.get(key, ()))
        if n <= to:
            return
        held = self.trainers[key] if self._saved is None else self._held(key)  # (it holds n > 0)
        if n == to + 1:  # the common step: one trainer
            p, t, pool = held.pop(), job.trainer, self.pool
            pool.give_one(pool.index[p.node], t.cpu_m, t.memory, t.gpu, p.gpus)
        else:
            gone = held[to:]
            del held[to:]
            self._give_back(job, gone[::-1])
        if self.changed is not None:
            self.changed.append(key)

    def _slot(self, job: JobRequest) -> WorkerPlacement | None:
        """The trainer ``job`` ran at the snapshot with its next index, if it is below that count: a
        resize keeps a job's lowest trainers in place, so that index can only come back there."""
        was = self._was.get(job.key)
        if was is None:
            return None
        n = len(self.trainers.get(job.key, ()))
        return was[n] if n < len(was) else None

    def _free(self, job: JobRequest, slot: WorkerPlacement) -> bool:
        t, i = job.trainer, self.pool.index[slot.node]
        return self.pool.fits_at(i, t.cpu_m, t.memory, t.gpu) and set(slot.gpus).issubset(self.pool.gpus[i])

    def blocked(self, job: JobRequest) -> bool:
        """``job`` cannot grow now because the place its next trainer must return to is taken."""
        slot = self._slot(job) if job.key in self._was else None
        return slot is not None and not self._free(job, slot)

    def spot(self, job: JobRequest) -> Spot | None:
        """Where one more trainer of ``job`` would go: back where it ran if the job is below its
        running count (else nowhere), beside its own trainers, else on the node that most recently
        got capacity back, else the first node with room. ``(node, the slot it returns to)``."""
        slot = self._slot(job)
        node = self._spot(job, slot)
        return None if node is None else (node, slot)

    def _spot(self, job: JobRequest, slot: WorkerPlacement | None) -> int | None:
        t = job.trainer
        if not self.pool.total_fits(t.cpu_m, t.memory, t.gpu):
            return None
        return self._where(job, slot, t.cpu_m, t.memory, t.gpu)

    def _where(self, job: JobRequest, slot: WorkerPlacement | None, c: int, m: int, g: int) -> int | None:
        """:meth:`_spot` once the free total is known to hold one trainer ``(c, m, g)`` of ``job``."""
        pool = self.pool
        if self._full.get((c, m, g)) == pool.roomier:
            return None
        if slot is not None:
            return pool.index[slot.node] if self._free(job, slot) else None
        hinted = len(pool.hints) > pool.cut  # (else no hint is live: neither look below finds one)
        sole = pool.sole_fit(c, m, g) if hinted else None  # the only node with room: every rule picks it
        if sole is not None:
            return sole
        if job.cache_nodes:
            cached = self._cache_spot(job, c, m, g)
            if cached is not None:
                return cached
        index, cpu, mem, gpu = pool.index, pool.cpu, pool.mem, pool.gpu
        last = None
        for p in self.trainers.get(job.key, ()):
            if p.node == last:  # trainers of a node mostly sit together: one look at it is enough
                continue
            last = p.node
            i = index[last]
            if c <= cpu[i] and m <= mem[i] and g <= gpu[i]:
                return i
        node = pool.newest_hint(c, m, g) if hinted else None
        if node is None:
            node = pool.first_fit(c, m, g)
        if node is None:
            self._full[c, m, g] = pool.roomier
        return node

    def _cache_spot(self, job: JobRequest, c: int, m: int, g: int) -> int | None:
        """The node holding ``job``'s SampleSet cache where one more trainer goes, in :meth:`spot`'s
        order among them: beside its own trainers, else the newest hint, else the lowest number."""
        pool = self.pool
        room = [
            i
            for i in (pool.index.get(n) for n in job.cache_nodes)
            if i is not None and pool.fits_at(i, c, m, g)
        ]
        if not room:
            return None
        for p in self.trainers.get(job.key, ()):
            i = pool.index[p.node]
            if i in room:
                return i
        return max(room, key=lambda i: (pool.stamp[i] if pool.stamp[i] >= pool.cut else -1, -i))

    def grow(self, job: JobRequest, n: int) -> bool:
        """Add ``n`` trainers, all or none; nodes the job already uses first, then the fullest fit."""
        if n <= 0:
            return True
        t, pool = job.trainer, self.pool
        c, m, g = t.cpu_m, t.memory, t.gpu
        if c * n > pool.tcpu or m * n > pool.tmem or g * n > pool.tgpu:  # not pool.total_fits
            return False
        if n == 1:  # the common elastic step
            slot = self._slot(job) if job.key in self._was else None
            node = self._where(job, slot, c, m, g)
            if node is None:
                return False
            self._add(job, node, slot)
            return True
        if self._slot(job) is not None:  # back to where it ran first, one at a time
            before = self.count(job.key)
            if all(self.grow(job, 1) for _ in range(n)):
                return True
            self.shrink(job, before)
            return False
        return self._grow_many(job, n)

    def place_at(self, job: JobRequest, spots: list[tuple[int, int]]) -> None:
        """Add ``k`` trainers of ``job`` on node ``i`` for each ``(i, k)`` of ``spots``, in order (the
        caller checked the room: ``consolidate.py`` after releasing the job's trainers)."""
        held = self._held(job.key)
        for i, k in spots:
            held += self._take(job, i, len(held), k)
        self._joined(job)
        self._changed(job.key)

    def add_at(self, job: JobRequest, spot: Spot) -> None:
        """One more trainer of ``job`` where :meth:`spot` said it goes."""
        self._add(job, *spot)

    def _add(self, job: JobRequest, node: int, slot: WorkerPlacement | None) -> None:
        held, t, pool = self._held(job.key), job.trainer, self.pool
        if slot is None:
            gpus = pool.take_one(node, t.cpu_m, t.memory, t.gpu)
            held.append(trainer_at(len(held), pool.names[node], gpus))
        else:
            pool.take_exact(node, t.cpu_m, t.memory, t.gpu, slot.gpus)
            held.append(slot)
        if job.key not in self.jobs:
            self._joined(job)
        if self.changed is not None:
            self.changed.append(job.key)

    def hand_over(self, donor: JobRequest, taker: JobRequest, k: int) -> bool:
        """Move ``k`` trainers from ``donor`` (its highest indices first) to ``taker``: what ``k``
        times ``shrink(donor, count - 1)`` then ``grow(taker, 1)`` leave, when that is known to be
        so; False (nothing done): do it that way. It is known when the two jobs' trainers are of one
        shape, the free total holds none of them, no node is overdrawn, the taker has no earlier slot
        to return to and no trial is open: each trainer given back is then the only one the free
        totals hold, on its node, the newest hint, where :meth:`_where` puts the taker's
        (``sole_fit``), with the first GPU indices of that node's list."""
        t, pool = taker.trainer, self.pool
        c, m, g = t.cpu_m, t.memory, t.gpu
        if (
            (c <= pool.tcpu and m <= pool.tmem and g <= pool.tgpu)
            or (donor.trainer is not t and donor.trainer != t)
            or pool.overdrawn
            or self._saved is not None
            or self.changed is not None
            or self._slot(taker) is not None
            or taker.key not in self.jobs
        ):
            return False
        gone, held = self.trainers[donor.key], self._held(taker.key)
        index, names, swap = pool.index, pool.names, pool.swap_one
        for _ in range(k):
            p = gone.pop()
            i = index[p.node]
            held.append(trainer_at(len(held), names[i], swap(i, c, m, g, p.gpus)))
        return True

    def _grow_many(self, job: JobRequest, n: int) -> bool:
        held = self._held(job.key)
        t = job.trainer
        c, m, g = t.cpu_m, t.memory, t.gpu
        order = self._own_nodes(held, c, m, g)  # nodes the job already uses first
        if job.cache_nodes:  # every node with room, those holding the job's SampleSet cache first
            order += self.pool.gang(c, m, g, ALL, skip={i for i, _ in order})
            order = cache_first(order, self.pool.names, job.cache_nodes)
        else:
            order += self.pool.gang(c, m, g, n, skip={i for i, _ in order})  # the fullest fit first
        added: list[WorkerPlacement] = []
        for i, can in order:
            added += self._take(job, i, len(held) + len(added), min(can, n - len(added)))
            if len(added) == n:
                held.extend(added)
                self._joined(job)
                self._changed(job.key)
                return True
        self._give_back(job, added)  # not all fit: undo
        return False

    def _own_nodes(self, held: list[WorkerPlacement], c: int, m: int, g: int) -> list[tuple[int, int]]:
        """``(node, workers it takes)`` for the nodes ``held`` uses that have room, fullest fit first."""
        if not held:
            return []
        index = self.pool.index
        used = list(dict.fromkeys(index[p.node] for p in held))  # ordered: never by hashing
        room = [(-self._how_many(i, c, m, g), i) for i in used if self.pool.fits_at(i, c, m, g)]
        return [(i, -k) for k, i in sorted(room)]

    def _how_many(self, i: int, c: int, m: int, g: int) -> int:
        return how_many(self.pool.cpu[i], self.pool.mem[i], self.pool.gpu[i], c, m, g)

    def bounce(self, job: JobRequest, spot: Spot) -> None:
        """What growing ``job`` by one trainer where :meth:`spot` said and shrinking it straight
        back leaves: the GPUs it took go to the end of the node's list, the node is the newest hint."""
        node, slot = spot
        if slot is None:
            self.pool.bounce(node, job.trainer.gpu)
        else:
            self.pool.bounce(node, 0, slot.gpus)

    def fits(self, need: Resources, n: int) -> bool:
        """Could ``n`` workers of ``need`` be placed now (ignoring which job)?"""
        if not self.pool.total_fits(need.cpu_m * n, need.memory * n, need.gpu * n):
            return False
        return self.pool.holds(need.cpu_m, need.memory, need.gpu, n)

    def restore(self, job: JobRequest) -> bool:
        """Give a released job exactly its old placement back, if all of it is still free."""
        pool = self.pool
        need: dict[int, tuple[list[int], list[int]]] = {}  # node -> ([cpu, memory, gpu], GPU indices)
        for p in job.placement:
            r = job.trainer if p.role == "trainer" else job.pserver
            acc, gpus = need.setdefault(pool.index[p.node], ([0, 0, 0], []))
            acc[0], acc[1], acc[2] = acc[0] + r.cpu_m, acc[1] + r.memory, acc[2] + r.gpu
            gpus += p.gpus
        for i, ((c, m, g), gpus) in need.items():
            if not pool.fits_at(i, c, m, g) or not set(gpus).issubset(pool.gpus[i]):
                return False
        for i, ((c, m, g), gpus) in need.items():
            pool.take_exact(i, c, m, g, gpus)
        self._held(job.key)
        self.trainers[job.key] = [p for p in job.placement if p.role == "trainer"]
        self._joined(job)
        self._changed(job.key)
        return True

    def as_it_ran(self, job: JobRequest) -> bool:
        """Whether ``job`` holds exactly the trainers it ran with at the snapshot."""
        held, was = self.trainers.get(job.key), self._was.get(job.key)
        return was is not None and held == was

    def release_again(self, job: JobRequest) -> None:
        """What restoring a job just released whole (:meth:`restore`) and releasing it again
        (``shrink(job, 0)``, :meth:`release_pservers`) leaves: the same nodes hinted once more."""
        trainers = [p.node for p in reversed(self._was[job.key])]
        pservers = [p.node for p in job.placement if p.role == "pserver"]
        self.pool.hint([self.pool.index[n] for n in (*trainers, *pservers)])
        self._changed(job.key)

    # ----------------------------------------------------------------------------------- pservers

    def release_pservers(self, job: JobRequest) -> None:
        ps = job.pserver
        for p in job.placement:
            if p.role == "pserver":
                self.pool.give(self.pool.index[p.node], ps.cpu_m, ps.memory, ps.gpu, [()], hint=True)

    def unplace_pservers(self, job: JobRequest, placed: list[WorkerPlacement]) -> None:
        ps = job.pserver
        for p in placed:
            self.pool.give(self.pool.index[p.node], ps.cpu_m, ps.memory, ps.gpu, [()])

    def place_pservers(self, job: JobRequest) -> list[WorkerPlacement] | None:
        """Each pserver on the first node with room (GPU indices are not assigned to pservers)."""
        out: list[WorkerPlacement] = []
        ps = job.pserver
        for n in range(job.pservers):
            node = self.pool.first_fit(ps.cpu_m, ps.memory, ps.gpu)
            if node is None:
                self.unplace_pservers(job, out)
                return None
            self.pool.take(node, ps.cpu_m, ps.memory, ps.gpu, 0)
            out.append(WorkerPlacement("pserver", n, self.pool.names[node]))
        return out
