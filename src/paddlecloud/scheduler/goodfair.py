"""Goodput fairness: how many trainers each adaptive-batch job gets, by a power mean of speed-ups.

``elastic`` admits jobs in its least-attained-service order; among the adaptive-batch jobs that then
run, the trainers they hold above their minimum and the free capacity are shared out by
:func:`share`, which maximises the power mean (exponent ``p``) of the jobs' speed-ups, Pollux's
fairness objective::

    maximise  sum_j U(s_j(n_j)),  U(x) = x ** p / p  (p != 0),  log x  (p = 0)
    s_j(n)  = rate_j(n) / rate_j(1) x (restart factor if n differs from the count the job runs at)

``rate_j`` is the job's goodput table (``JobRequest.rate``): the best batch on n trainers, so a job
that a larger batch would not help gets little from more trainers. ``p = 1`` maximises the summed
speed-up (cluster goodput), ``p < 0`` favours the jobs furthest behind (``p = -1``: the harmonic
mean, Pollux's). Changing a running job's count costs a restart; ``restart`` (< 1) discounts its
speed-up at any other count, so a change is made only when it is worth it; a claim may carry its
own factor (``Claim.restart``: the restart-aware share of ``resizecost.py``, by the job's age).

Data flow: :class:`Claim` per job (its counts, bounds, per-trainer resources, speed-up table) and
the capacity to share -> :func:`share` -> each job's target count and the order the trainers were
handed out (the caller replays it with real placement). Greedy, one increment at a time, each the
largest utility gain per trainer over the next few counts (so a discount at counts near the one the
job holds does not stop it short); for a concave ``U o s`` and one resource it is optimal. With
``start`` (``ElasticPolicy.fair_exchange``) it starts from the counts the jobs hold, hands out only
what is free, then exchanges: the best step up of one job against the cheapest step down of another
(several trainers at once, so a donor pays its restart discount once), while the gain exceeds the
loss; from any start it reaches the same optimum on concave tables (unit tests).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Claim", "share", "utility"]

#: how many counts ahead an increment may look (a job jumps over a dip in its gains)
LOOKAHEAD = 8


def utility(x: float, p: float) -> float:
    """``x ** p / p`` (``log x`` at ``p = 0``): increasing in ``x``, concave for ``p <= 1``."""
    if x <= 0:
        return -math.inf
    if p == 0:
        return math.log(x)
    return float(x**p) / p


@dataclass(frozen=True)
class Claim:
    """One job's part in :func:`share`."""

    key: str
    #: the count it starts from (its minimum, or the count it must keep) and the most it may get
    lo: int
    hi: int
    #: the count at which it pays no restart (it runs at it now); 0: every count is free
    held: int
    #: per-trainer (cpu_m, memory, gpu)
    need: tuple[int, int, int]
    #: ``rate[n - 1]``: its speed-up on n trainers (any scale: normalised by ``rate[0]``)
    rate: tuple[float, ...]
    #: its utility counts this much
    weight: float = 1.0
    #: its own restart factor (:func:`share`'s ``restart`` when None)
    restart: float | None = None

    def value(self, n: int, p: float, restart: float) -> float:
        r = self.rate[min(n, len(self.rate)) - 1] / self.rate[0] if n > 0 and self.rate[0] > 0 else 0.0
        own = restart if self.restart is None else self.restart
        return self.weight * utility(r * (own if self.held and n != self.held else 1.0), p)


def _values(c: Claim, p: float, restart: float) -> list[float]:
    """``c.value(n)`` for ``n = 0 .. c.hi`` (index n; below ``c.lo`` never read), in one pass."""
    rate, top, base = c.rate, len(c.rate), c.rate[0]
    if base <= 0:
        return [-math.inf] * (c.hi + 1)
    speed = [r / base for r in rate[: c.hi]] + [rate[-1] / base] * (c.hi - top)
    if c.held:
        own = restart if c.restart is None else c.restart
        speed = [x if n == c.held else x * own for n, x in enumerate(speed, 1)]
    w = c.weight
    if p == 0:
        out = [w * math.log(x) if x > 0 else -math.inf for x in speed]
    else:
        out = [w * x**p / p if x > 0 else -math.inf for x in speed]
    return [-math.inf, *out]


def _best_step(values: list[float], n: int, hi: int) -> tuple[float, int]:
    """The largest utility gain per trainer from ``n`` to ``n + k`` (``k <= LOOKAHEAD``, ``n + k <=
    hi``), and ``k`` (0: none gains)."""
    base = values[n]
    best, steps = 0.0, 0
    for k, v in enumerate(values[n + 1 : n + 1 + min(LOOKAHEAD, hi - n)], 1):
        gain = (v - base) / k
        if gain > best:
            best, steps = gain, k
    return best, steps


class _Steps:
    """Each claim's best step up (:func:`_best_step` to its ``hi``) and down (:func:`_best_give` to
    its ``lo``) from a count, worked out once per claim and count (the exchange asks again and again
    as trainers move back and forth)."""

    def __init__(self, claims: Sequence[Claim], values: list[list[float]]) -> None:
        self.claims, self.values = claims, values
        self._up: dict[tuple[int, int], tuple[float, int]] = {}
        self._down: dict[tuple[int, int], tuple[float, int]] = {}

    def up(self, i: int, n: int) -> tuple[float, int]:
        got = self._up.get((i, n))
        if got is None:
            got = self._up[i, n] = _best_step(self.values[i], n, self.claims[i].hi)
        return got

    def down(self, i: int, n: int) -> tuple[float, int]:
        got = self._down.get((i, n))
        if got is None:
            got = self._down[i, n] = _best_give(self.values[i], n, self.claims[i].lo)
        return got


def share(
    claims: Sequence[Claim],
    room: tuple[int, int, int],
    p: float = -1.0,
    restart: float = 1.0,
    start: Sequence[int] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """Hand ``room`` (cpu_m, memory, gpu, beyond every claim's ``lo``) out to ``claims``: each one's
    count, and the keys in the order their trainers were given (one entry per trainer).

    ``start`` (an exchange search): each claim starts at that count (within ``lo .. hi``) instead of
    ``lo`` and ``room`` is what is free beyond them; after handing it out, trainers move one at a
    time from the claims that lose least by giving one (never below ``lo``) to the one that gains
    most, while the gain is larger than the losses (between claims of the same per-trainer need)."""
    counts = [c.lo for c in claims] if start is None else list(start)
    values = [_values(c, p, restart) if c.hi > c.lo else [] for c in claims]
    left = list(room)
    order: list[str] = []
    heap: list[tuple[float, int, int]] = []
    steps = _Steps(claims, values)
    for i, c in enumerate(claims):
        if c.hi > counts[i]:
            gain, k = steps.up(i, counts[i])
            if k:
                heap.append((-gain, i, k))
    heapq.heapify(heap)
    while heap:
        _, i, k = heapq.heappop(heap)
        c, n = claims[i], counts[i]
        fit = k
        for d, need in enumerate(c.need):
            if need > 0 and left[d] < need * fit:
                fit = left[d] // need
        if fit < k:  # room for fewer: the best step that fits, if any gains
            gain, k = _best_step(values[i], n, n + fit) if fit > 0 else (0.0, 0)
            if k:
                heapq.heappush(heap, (-gain, i, k))
            continue
        counts[i] = n = n + k
        order += [c.key] * k
        for d in range(3):
            left[d] -= c.need[d] * k
        gain, k = steps.up(i, n)
        if k:
            heapq.heappush(heap, (-gain, i, k))
    if start is not None:
        _exchange(claims, steps, counts, order)
    return {c.key: n for c, n in zip(claims, counts, strict=True)}, order


def _best_give(values: list[float], n: int, lo: int) -> tuple[float, int]:
    """The smallest utility loss per trainer from ``n`` down to ``n - k`` (``k <= LOOKAHEAD``,
    ``n - k >= lo``), and ``k`` (0: it can give none)."""
    best, steps, top = math.inf, 0, values[n]
    for k, v in enumerate(reversed(values[n - min(LOOKAHEAD, n - lo) : n]), 1):
        loss = (top - v) / k
        if loss < best:
            best, steps = loss, k
    return best, steps


def _exchange(claims: Sequence[Claim], steps: _Steps, counts: list[int], order: list[str]) -> None:
    """Move trainers between claims of one per-trainer need: the one that gains most per trainer
    (its best step up, ``_best_step``) from the one that loses least per trainer (its best step
    down: giving several trainers pays its restart once), ``min`` of the two steps at a time, while
    the gain is larger than the loss; a taker whose move is not worth it is dropped."""
    by_need: dict[tuple[int, int, int], list[int]] = {}
    for i, c in enumerate(claims):
        if c.hi > c.lo:
            by_need.setdefault(c.need, []).append(i)
    up, down, values = steps.up, steps.down, steps.values
    pop, push = heapq.heappop, heapq.heappush
    for members in by_need.values():
        takers: list[tuple[float, int]] = []
        givers: list[tuple[float, int, int]] = []
        for i in members:
            gain, k = up(i, counts[i])
            if k:
                takers.append((-gain, i))
            loss, k = down(i, counts[i])
            if k:
                givers.append((loss, i, counts[i]))
        heapq.heapify(takers)
        heapq.heapify(givers)
        while takers and givers:
            _, i = pop(takers)
            _, rise = up(i, counts[i])
            if not rise:
                continue
            j, own = -1, None
            while givers and j < 0:
                entry = pop(givers)
                if entry[2] != counts[entry[1]]:  # stale: it gave or took since
                    continue
                if entry[1] == i:  # the taker's own entry: put back afterwards
                    own = entry
                    continue
                j = entry[1]
            if own is not None:
                push(givers, own)
            if j < 0:
                continue
            _, fall = down(j, counts[j])
            m = min(rise, fall)
            gain = values[i][counts[i] + m] - values[i][counts[i]]
            loss = values[j][counts[j]] - values[j][counts[j] - m]
            if gain > loss:
                counts[i] += m
                counts[j] -= m
                order += [claims[i].key] * m
                gain, k = up(i, counts[i])
                if k:
                    push(takers, (-gain, i))
            for x in (i, j):
                loss, k = down(x, counts[x])
                if k:
                    push(givers, (loss, x, counts[x]))
