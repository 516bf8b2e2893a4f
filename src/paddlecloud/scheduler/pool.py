"""Free capacity of every node for one scheduling cycle, indexed so that a query does not scan nodes.

Nodes are numbered in snapshot order and kept in *buckets* by their free vector (cpu millicores,
memory, GPUs, whether GPU indices are left): a query ("the first node where this worker fits", "how
many of these workers fit", "nodes ranked for a gang") looks at each bucket once, not at each node.
A cluster of identical nodes running jobs of a few shapes has a handful of buckets however many nodes
it has. Changes can be made inside a *trial* and rolled back whole (a journal of what each changed
node was), so a what-if admission costs what it touches, not a copy of the cluster.

*Hints* are nodes that got capacity back, newest last (``hints`` is the raw list, a node's newest
position is ``stamp[i]``; positions below ``cut`` were dropped): the elastic policies place a single
trainer on the newest hint with room first.

Shortcuts that give the same answers for less: :meth:`NodePool.first_fit` remembers its node per
worker shape until some node gains room (lower nodes still have none; the node itself is checked);
:meth:`NodePool.newest_hint` does not scan the buckets when the recent-hint look covered every live
hint; :meth:`NodePool.sole_fit` answers "the newest hint" when the free totals leave room for one
worker on one node at most (the top-up's moves: a donor frees exactly what the taker needs);
:meth:`NodePool.swap_one` is such a move, a worker given back and one of its shape taken there, in
one step; :meth:`NodePool.room` (how many nodes take how many workers of a shape) is kept per shape
until some node changes bucket.

Needs are passed as three ints ``(c, m, g)``: cpu millicores, memory bytes, GPUs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from heapq import merge

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.snapshot import NodeState

__all__ = ["ALL", "NodePool", "cache_first", "how_many"]

#: a bucket: free cpu, free memory, free GPUs, whether any GPU index is left
Key = tuple[int, int, int, bool]
#: what a node was before a change (for rollback): index, cpu, memory, GPUs, GPU indices, stamp
_Saved = tuple[int, int, int, int, list[int], int]
#: how a bucket ranks in :meth:`NodePool.gang`: its sort key and how many workers each of its nodes takes
Rank = Callable[[Key], tuple[tuple[int, ...], int]]
#: how many recent hints are checked one by one before asking the buckets
_HINT_SCAN = 16
#: a worker count no gang reaches: :meth:`NodePool.gang` lists every node with room
ALL = 1 << 30


def how_many(fc: int, fm: int, fg: int, c: int, m: int, g: int) -> int:
    """How many workers of ``(c, m, g)`` a free vector holds (dimensions the worker does not need
    are not looked at; a worker that needs nothing fits ``1 << 30`` times)."""
    if c:
        k = fc // c
        if m:
            k = min(k, fm // m)
        if g:
            k = min(k, fg // g)
    elif m:
        k = fm // m if not g else min(fm // m, fg // g)
    elif g:
        k = fg // g
    else:
        return 1 << 30
    return k if k > 0 else 0


@dataclass(slots=True)
class _Bucket:
    nodes: list[int]  # node indices, ascending
    stamps: list[int]  # hint positions of its nodes that have one, ascending


class NodePool:
    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self.names = [n.name for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.cpu = [n.capacity.cpu_m - n.allocated.cpu_m for n in nodes]
        self.mem = [n.capacity.memory - n.allocated.memory for n in nodes]
        self.gpu = [n.capacity.gpu - n.allocated.gpu for n in nodes]
        #: free GPU indices per node; lists are replaced, never changed in place (the journal keeps them)
        self.gpus = [list(n.free_gpus) for n in nodes]
        self.tcpu, self.tmem, self.tgpu = sum(self.cpu), sum(self.mem), sum(self.gpu)
        #: some node has less than nothing free (the totals then say less about single nodes)
        self.overdrawn = min((*self.cpu, *self.mem, *self.gpu), default=0) < 0
        self.hints: list[int] = []
        self.stamp = [-1] * len(nodes)
        self.cut = 0
        #: bumped whenever some node gains free capacity (a "nothing fits" answer is stale after it)
        self.roomier = 0
        #: the bucket each node is filed under and the stamp filed with it (both may lag behind the
        #: node's state until :meth:`sync`); nodes changed since the last sync
        self.keys: list[Key] = []
        self.filed = [-1] * len(nodes)
        self.buckets: dict[Key, _Bucket] = {}
        self._dirty: list[int] = []
        self._is_dirty = [False] * len(nodes)
        for i in range(len(nodes)):
            key = (self.cpu[i], self.mem[i], self.gpu[i], bool(self.gpus[i]))
            self.keys.append(key)
            self.buckets.setdefault(key, _Bucket([], [])).nodes.append(i)
        self._log: list[_Saved] | None = None
        #: :meth:`first_fit`'s last answer per worker shape, with ``roomier`` when it was found
        self._first: dict[tuple[int, int, int], tuple[int, int]] = {}
        self._hint_mark = 0
        #: bumped whenever a node changes bucket (:meth:`room`'s answers are stale after it)
        self.moves = 0
        self._room: dict[tuple[int, int, int], tuple[int, list[tuple[int, int]]]] = {}

    # ------------------------------------------------------------------------------------ reading

    def total(self) -> Resources:
        return Resources(self.tcpu, self.tmem, self.tgpu)

    def total_fits(self, c: int, m: int, g: int) -> bool:
        return c <= self.tcpu and m <= self.tmem and g <= self.tgpu

    def fits_at(self, i: int, c: int, m: int, g: int) -> bool:
        return c <= self.cpu[i] and m <= self.mem[i] and g <= self.gpu[i]

    def first_fit(self, c: int, m: int, g: int) -> int | None:
        """The lowest-numbered node where one worker of ``(c, m, g)`` fits."""
        seen = self._first.get((c, m, g))
        if seen is not None and seen[1] == self.roomier:  # no node got room since: the lower ones still
            i = seen[0]  # have none, and node i is still the first if it still has room
            if c <= self.cpu[i] and m <= self.mem[i] and g <= self.gpu[i]:
                return i
        self.sync()
        best = None
        for (fc, fm, fg, _), b in self.buckets.items():
            if c <= fc and m <= fm and g <= fg and (best is None or b.nodes[0] < best):
                best = b.nodes[0]
        if best is not None:
            self._first[c, m, g] = (best, self.roomier)
        return best

    def newest_hint(self, c: int, m: int, g: int) -> int | None:
        """The node with the newest hint among those where one worker fits."""
        recent = self._recent_fit(c, m, g)
        if recent is not None:
            return recent
        hints = self.hints
        if len(hints) - self.cut <= _HINT_SCAN:  # every live hint was just checked: none fits
            return None
        self.sync()
        best = -1
        for (fc, fm, fg, _), b in self.buckets.items():
            if c <= fc and m <= fm and g <= fg and b.stamps and b.stamps[-1] > best:
                best = b.stamps[-1]
        return hints[best] if best >= self.cut else None

    def sole_fit(self, c: int, m: int, g: int) -> int | None:
        """The newest hint's node if one worker of ``(c, m, g)`` fits there and the free totals leave
        room for it on one node at most (so no other node has room); None: not known so."""
        hints = self.hints
        if self.overdrawn or len(hints) <= self.cut:
            return None
        if (g and self.tgpu < 2 * g) or (c and self.tcpu < 2 * c) or (m and self.tmem < 2 * m):
            i = hints[-1]
            if c <= self.cpu[i] and m <= self.mem[i] and g <= self.gpu[i]:
                return i
        return None

    def _recent_fit(self, c: int, m: int, g: int) -> int | None:
        """The newest of the last few hints where one worker fits (most questions end here)."""
        hints, cpu, mem, gpu = self.hints, self.cpu, self.mem, self.gpu
        for pos in range(len(hints) - 1, max(self.cut, len(hints) - _HINT_SCAN) - 1, -1):
            i = hints[pos]
            if c <= cpu[i] and m <= mem[i] and g <= gpu[i]:
                return i
        return None

    def holds(self, c: int, m: int, g: int, n: int) -> bool:
        """Would ``n`` workers of ``(c, m, g)`` fit, node by node (ignoring which job)?"""
        if n <= 0 or (n == 1 and self._recent_fit(c, m, g) is not None):
            return True
        self.sync()
        total = 0
        for (fc, fm, fg, _), b in self.buckets.items():
            k = how_many(fc, fm, fg, c, m, g)
            if k > 0:
                total += k * len(b.nodes)
                if total >= n:
                    return True
        return False

    def room(self, c: int, m: int, g: int) -> list[tuple[int, int]]:
        """How many nodes take how many workers of ``(c, m, g)``: ``(workers, nodes)``, most workers
        first, over the nodes where one fits (those :meth:`gang` ranks). Kept per shape until some
        node changes bucket (most asks in a row find the pool as it was)."""
        self.sync()
        seen = self._room.get((c, m, g))
        if seen is not None and seen[0] == self.moves:
            return seen[1]
        counts: dict[int, int] = {}
        for (fc, fm, fg, _), b in self.buckets.items():
            if c <= fc and m <= fm and g <= fg:
                k = how_many(fc, fm, fg, c, m, g)
                counts[k] = counts.get(k, 0) + len(b.nodes)
        out = sorted(counts.items(), reverse=True)
        self._room[c, m, g] = (self.moves, out)
        return out

    def gang(
        self, c: int, m: int, g: int, n: int, order: Rank | None = None, skip: Container[int] = ()
    ) -> list[tuple[int, int]]:
        """Where ``n`` workers of ``(c, m, g)`` go: ``(node, workers)`` over the nodes where one fits
        (but ``skip``), best first by ``order(bucket key)`` (which also says how many workers a node
        of that bucket takes; None: the nodes that take the most first), then by node number; all of
        them if together they take fewer than ``n``. Nothing is changed."""
        self.sync()
        groups: dict[tuple[int, ...], tuple[int, list[list[int]]]] = {}
        for key, b in self.buckets.items():
            fc, fm, fg, _ = key
            if c > fc or m > fm or g > fg:
                continue
            if order is None:
                take = how_many(fc, fm, fg, c, m, g)
                rank: tuple[int, ...] = (-take,)
            else:
                rank, take = order(key)
            groups.setdefault(rank, (take, []))[1].append(b.nodes)
        return _fill(groups, n, skip)

    # ----------------------------------------------------------------------------------- changing

    def take(self, i: int, c: int, m: int, g: int, ngpus: int, k: int = 1) -> list[tuple[int, ...]]:
        """Subtract ``k`` workers from node ``i``; each gets the next ``ngpus`` free GPU indices."""
        held = self.gpus[i]
        if not ngpus:
            self._set(i, self.cpu[i] - c * k, self.mem[i] - m * k, self.gpu[i] - g * k, held, self.stamp[i])
            return [()] * k
        if k == 1:  # the common step
            self._set(i, self.cpu[i] - c, self.mem[i] - m, self.gpu[i] - g, held[ngpus:], self.stamp[i])
            return [(held[0],) if ngpus == 1 and held else tuple(held[:ngpus])]
        got = [tuple(held[j * ngpus : (j + 1) * ngpus]) for j in range(k)]
        self._set(
            i, self.cpu[i] - c * k, self.mem[i] - m * k, self.gpu[i] - g * k, held[k * ngpus :], self.stamp[i]
        )
        return got

    def take_one(self, i: int, c: int, m: int, g: int) -> tuple[int, ...]:
        """``take(i, c, m, g, g)[0]``: one worker, with the next ``g`` free GPU indices."""
        held = self.gpus[i]
        self._set(
            i, self.cpu[i] - c, self.mem[i] - m, self.gpu[i] - g, held[g:] if g else held, self.stamp[i]
        )
        return (held[0],) if g == 1 and held else tuple(held[:g])

    def take_exact(self, i: int, c: int, m: int, g: int, gpus: Sequence[int]) -> None:
        """Subtract what workers hold on node ``i``, with exactly those GPU indices."""
        left = list(self.gpus[i])
        for x in gpus:
            left.remove(x)
        self._set(i, self.cpu[i] - c, self.mem[i] - m, self.gpu[i] - g, left, self.stamp[i])

    def give(self, i: int, c: int, m: int, g: int, gpus: Sequence[Sequence[int]], hint: bool = False) -> None:
        """Give ``len(gpus)`` workers back to node ``i``, each with its GPU indices (they go last, in
        that order); ``hint`` marks the node as the newest one with capacity back, once per worker."""
        k, stamp = len(gpus), self.stamp[i]
        if hint and k:
            self.hints.extend([i] * k)
            stamp = len(self.hints) - 1
        held = self.gpus[i]
        if any(gpus):
            held = [*held, *(x for one in gpus for x in one)]
        self._set(i, self.cpu[i] + c * k, self.mem[i] + m * k, self.gpu[i] + g * k, held, stamp)

    def give_one(self, i: int, c: int, m: int, g: int, gpus: tuple[int, ...]) -> None:
        """``give(i, c, m, g, [gpus], hint=True)``: one worker back, the node the newest hint."""
        hints = self.hints
        hints.append(i)
        held = self.gpus[i]
        self._set(
            i,
            self.cpu[i] + c,
            self.mem[i] + m,
            self.gpu[i] + g,
            [*held, *gpus] if gpus else held,
            len(hints) - 1,
        )

    def swap_one(self, i: int, c: int, m: int, g: int, gpus: tuple[int, ...]) -> tuple[int, ...]:
        """``give_one(i, c, m, g, gpus)`` then ``take_one(i, c, m, g)`` in one step: a worker given
        back to node ``i`` (the newest hint) and one of the same shape taken there at once (the
        top-up's move from a donor to a taker); the GPU indices taken. Free capacity is unchanged,
        the node's GPU list and stamp change, ``roomier`` counts the give."""
        hints = self.hints
        hints.append(i)
        held = self.gpus[i]
        if gpus:
            held = [*held, *gpus]
        log = self._log
        if log is not None:  # the two steps' entries: a rollback passes through the same states
            cpu, mem, gpu = self.cpu[i], self.mem[i], self.gpu[i]
            log.append((i, cpu, mem, gpu, self.gpus[i], self.stamp[i]))
            log.append((i, cpu + c, mem + m, gpu + g, held, len(hints) - 1))
        if c > 0 or m > 0 or g > 0:
            self.roomier += 1
        self.gpus[i] = held[g:] if g else held
        self.stamp[i] = len(hints) - 1
        if not self._is_dirty[i]:
            self._is_dirty[i] = True
            self._dirty.append(i)
        return (held[0],) if g == 1 and held else tuple(held[:g])

    def bounce(self, i: int, ngpus: int, exact: Sequence[int] = ()) -> None:
        """What taking one worker from node ``i`` and giving it straight back leaves: its GPUs (the
        first ``ngpus``, or ``exact`` ones) move to the end of the node's list and the node becomes
        the newest hint."""
        held = self.gpus[i]
        kept, taken = (
            ([x for x in held if x not in exact], list(exact)) if exact else (held[ngpus:], held[:ngpus])
        )
        self.hints.append(i)
        self._set(i, self.cpu[i], self.mem[i], self.gpu[i], [*kept, *taken], len(self.hints) - 1)

    def hint(self, nodes: Sequence[int]) -> None:
        """Mark ``nodes``, in order, as the newest with capacity back (nothing else changes)."""
        newest: dict[int, int] = {}
        for i in nodes:
            newest[i] = len(self.hints)
            self.hints.append(i)
        for i, pos in newest.items():
            self._set(i, self.cpu[i], self.mem[i], self.gpu[i], self.gpus[i], pos)

    # ------------------------------------------------------------------------------------- trials

    def begin(self) -> None:
        """Start journaling changes (one trial at a time)."""
        assert self._log is None, "trials do not nest"
        self._log = []
        self._hint_mark = len(self.hints)

    def commit(self, keep_hints: int | None = None) -> None:
        """Keep the trial's changes; ``keep_hints`` drops all but that many hints from before it."""
        self._log = None
        if keep_hints is not None:
            self.cut = max(self.cut, self._hint_mark - keep_hints)

    def rollback(self) -> None:
        log, self._log = self._log or [], None
        for saved in reversed(log):
            self._set(*saved)
        del self.hints[self._hint_mark :]

    def _set(self, i: int, cpu: int, mem: int, gpu: int, gpus: list[int], stamp: int) -> None:
        if self._log is not None:
            self._log.append((i, self.cpu[i], self.mem[i], self.gpu[i], self.gpus[i], self.stamp[i]))
        oc, om, og = self.cpu[i], self.mem[i], self.gpu[i]
        if cpu > oc or mem > om or gpu > og:
            self.roomier += 1
        self.tcpu += cpu - oc
        self.tmem += mem - om
        self.tgpu += gpu - og
        self.cpu[i], self.mem[i], self.gpu[i], self.gpus[i], self.stamp[i] = cpu, mem, gpu, gpus, stamp
        if not self._is_dirty[i]:
            self._is_dirty[i] = True
            self._dirty.append(i)

    def sync(self) -> None:
        """File every changed node under its bucket (queries over buckets do this first)."""
        for i in self._dirty:
            self._is_dirty[i] = False
            key, stamp = (self.cpu[i], self.mem[i], self.gpu[i], bool(self.gpus[i])), self.stamp[i]
            old, filed = self.keys[i], self.filed[i]
            if key != old:
                self._move(i, old, key, filed, stamp)
            elif stamp != filed:
                stamps = self.buckets[key].stamps
                if filed >= 0:
                    del stamps[bisect_left(stamps, filed)]
                if stamp >= 0:
                    insort(stamps, stamp)
            self.filed[i] = stamp
        self._dirty.clear()

    def _move(self, i: int, old: Key, key: Key, old_stamp: int, stamp: int) -> None:
        self.moves += 1
        b = self.buckets[old]
        del b.nodes[bisect_left(b.nodes, i)]
        if old_stamp >= 0:
            del b.stamps[bisect_left(b.stamps, old_stamp)]
        if not b.nodes:
            del self.buckets[old]
        nb = self.buckets.get(key)
        if nb is None:
            nb = self.buckets[key] = _Bucket([], [])
        insort(nb.nodes, i)
        if stamp >= 0:
            insort(nb.stamps, stamp)
        self.keys[i] = key


def cache_first(
    order: list[tuple[int, int]], names: Sequence[str], cache: frozenset[str], n: int = ALL
) -> list[tuple[int, int]]:
    """``order`` (``(node, workers)``, best first) with the nodes named in ``cache`` moved to the front,
    each part keeping its order, cut where ``n`` workers are placed (cache-aware placement: the
    nodes holding a job's SampleSet cache come first among those with room)."""
    ranked = [x for x in order if names[x[0]] in cache] + [x for x in order if names[x[0]] not in cache]
    out: list[tuple[int, int]] = []
    for i, k in ranked:
        if n <= 0:
            break
        out.append((i, min(k, n)))
        n -= k
    return out


def _fill(
    groups: dict[tuple[int, ...], tuple[int, list[list[int]]]], n: int, skip: Container[int]
) -> list[tuple[int, int]]:
    """Nodes of the groups in rank order (nodes of one rank by number) until ``n`` workers are placed."""
    out: list[tuple[int, int]] = []
    for rank in sorted(groups):
        take, lists = groups[rank]
        for i in lists[0] if len(lists) == 1 else merge(*lists):
            if i in skip:
                continue
            k = min(take, n)
            out.append((i, k))
            n -= k
            if n <= 0:
                return out
    return out
