"""Goodput: how fast an adaptive-batch job makes progress on n replicas at global batch M.

One place for the model, pure, used unchanged by the live server and the simulator:

    step time      StepTime.step_time(replicas, nodes, local_bsz): seconds per optimizer step
                   (the simulator: a measured application profile; live: :class:`FittedStepTime`,
                   fitted from the step times the job reports)
    throughput     M / step_time(n, nodes, M / n)                    samples per second
    efficiency     (B_noise + M0) / (B_noise + M)                    statistical efficiency
    goodput        throughput x efficiency                           M0-equivalent samples / s

``M0`` is the batch the job started with (the user's ``--batch-size``): progress is measured in
examples at ``M0``, so a job's length does not depend on the batch it is given. ``B_noise`` is the
gradient noise scale in samples (``tr(Sigma) / |G|^2``, as Pollux and McCandlish et al. define it):
a step at batch ``M = S x M0`` earns the AdaScale gain ``r = (B_noise + M0) S / (B_noise + M)`` of
``M0``-steps, so examples at ``M`` are worth ``r / S`` examples at ``M0``. With ``B_noise`` unknown
(0 reported yet) the efficiency of any ``M > M0`` is taken as ``M0 / M`` (no gain from a larger
batch): an adaptive job with no measurement yet is planned as if it kept its batch.

:func:`goodput_table` turns this into what the policies consume: per replica count n, the batch
with the best goodput and that goodput relative to one replica at ``M0`` (``JobRequest.speedup``),
so the policies' marginal-gain rules allocate goodput, not raw throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "AdaptiveBatch",
    "FittedStepTime",
    "GoodputModel",
    "GoodputTable",
    "StepTime",
    "efficiency",
    "goodput",
    "goodput_table",
    "throughput",
]


class StepTime(Protocol):
    def step_time(self, replicas: int, nodes: int, local_bsz: float) -> float:
        """Seconds per optimizer step of ``replicas`` over ``nodes`` at per-replica batch ``local_bsz``."""
        ...


@dataclass(frozen=True)
class AdaptiveBatch:
    """A job's opt-in: global batch bounds and where it starts (``init``, the unit of progress)."""

    init: int
    lo: int
    hi: int
    #: the largest per-replica batch that fits one replica (above it: gradient accumulation)
    max_local: float = math.inf
    #: the smallest per-replica batch worth running (fewer samples per replica: no more replicas)
    min_local: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.lo <= self.init <= self.hi:
            raise ValueError(f"need 1 <= lo <= init <= hi, got {self.lo} <= {self.init} <= {self.hi}")


def efficiency(noise: float, init: float, batch: float) -> float:
    """Examples at ``batch`` worth this many examples at ``init`` (1 at ``batch == init``); a noise
    scale that is not a positive finite number counts as unknown."""
    if not noise < math.inf:  # inf or NaN: unknown, as 0
        noise = 0.0
    if batch <= init:
        return 1.0 if noise <= 0 else (noise + init) / (noise + batch)
    if noise <= 0:
        return init / batch
    return (noise + init) / (noise + batch)


def throughput(model: StepTime, spec: AdaptiveBatch, alloc: tuple[int, int], batch: float) -> float:
    """Samples per second of ``alloc = (replicas, nodes)`` at global ``batch`` (accumulating above
    ``spec.max_local`` per replica)."""
    replicas, nodes = alloc
    local = batch / replicas
    k = max(1, math.ceil(local / spec.max_local - 1e-9))  # micro-steps per optimizer step
    step = model.step_time(replicas, nodes, local) if k == 1 else _accumulated(model, alloc, local, k)
    return batch / step if step > 0 else 0.0


def goodput(
    model: StepTime, spec: AdaptiveBatch, noise: float, alloc: tuple[int, int], batch: float
) -> float:
    """``init``-equivalent samples per second of ``alloc = (replicas, nodes)`` at global ``batch``."""
    return throughput(model, spec, alloc, batch) * efficiency(noise, spec.init, batch)


def _accumulated(model: StepTime, alloc: tuple[int, int], local: float, k: int) -> float:
    """A step of ``k`` micro-steps: ``k`` compute passes, one all-reduce (the last micro-step's)."""
    replicas, nodes = alloc
    micro = local / k
    one = model.step_time(replicas, nodes, micro)
    compute = model.step_time(1, 1, micro)
    return one + (k - 1) * min(one, compute)


@dataclass(frozen=True)
class GoodputTable:
    """Per replica count ``n`` (index ``n - 1``): the best global batch and its relative goodput."""

    batches: tuple[int, ...]
    speedup: tuple[float, ...]

    def batch(self, n: int) -> int:
        return self.batches[min(max(n, 1), len(self.batches)) - 1]


def _candidates(spec: AdaptiveBatch, replicas: int, steps: int = 24) -> list[int]:
    """Global batches to try on ``replicas``: geometric over ``[lo, hi]``, each replica >= min_local."""
    lo = max(spec.lo, math.ceil(replicas * spec.min_local))
    hi = spec.hi
    if lo > hi:
        return [hi]
    ratio = (hi / lo) ** (1 / steps) if hi > lo else 1.0
    out = {lo, hi, spec.init} if lo <= spec.init <= hi else {lo, hi}
    b = float(lo)
    for _ in range(steps):
        b *= ratio
        out.add(min(hi, round(b)))
    return sorted(out)


def goodput_table(
    model: StepTime, spec: AdaptiveBatch, noise: float, nodes_for: Sequence[int]
) -> GoodputTable:
    """Best batch and goodput for ``n = 1 .. len(nodes_for)`` replicas on ``nodes_for[n - 1]`` nodes,
    relative to one replica at ``spec.init``."""
    return GoodputModel(model, spec, tuple(nodes_for)).table(noise)


class GoodputModel:
    """:func:`goodput_table` for one step-time model and spec, for many noise scales: throughput does
    not depend on the noise scale, so each (replicas, batch) candidate's is computed once."""

    def __init__(self, model: StepTime, spec: AdaptiveBatch, nodes_for: tuple[int, ...]) -> None:
        self.model, self.spec, self.nodes_for = model, spec, nodes_for
        # per replica count: the candidate batches and their throughput (samples / s)
        self._rows: list[tuple[list[int], list[float]]] = []
        self._base = throughput(model, spec, (1, 1), spec.init)  # efficiency 1 at init

    def _row(self, n: int) -> tuple[list[int], list[float]]:
        while len(self._rows) < n:
            k = len(self._rows) + 1
            alloc = (k, min(self.nodes_for[k - 1], k))
            batches = _candidates(self.spec, k)
            self._rows.append((batches, [throughput(self.model, self.spec, alloc, b) for b in batches]))
        return self._rows[n - 1]

    def table(self, noise: float) -> GoodputTable:
        """The :class:`GoodputTable` at gradient noise scale ``noise`` (samples)."""
        init, base = self.spec.init, self._base
        batches: list[int] = []
        speedup: list[float] = []
        for n in range(1, len(self.nodes_for) + 1):
            cands, rates = self._row(n)
            best_b, best_g = init, -1.0
            for b, r in zip(cands, rates, strict=True):
                g = r * efficiency(noise, init, b)
                if g > best_g:
                    best_b, best_g = b, g
            batches.append(best_b)
            speedup.append(max(best_g, 0.0) / base if base > 0 else float(n))
        return GoodputTable(tuple(batches), tuple(speedup))


@dataclass(frozen=True)
class FittedStepTime:
    """A step-time model fitted from a live job's reports (what the server knows of it).

    ``step = base + per_sample x local_bsz + sync(replicas, nodes)`` with
    ``sync = 0`` on one replica, ``sync_local`` on one node, ``sync_net`` across nodes: the compute
    part is linear in the per-replica batch (Pollux's model too), the all-reduce costs a constant
    per step that is larger across the network.
    """

    base: float
    per_sample: float
    sync_local: float = 0.0
    sync_net: float = 0.0

    def step_time(self, replicas: int, nodes: int, local_bsz: float) -> float:
        sync = 0.0 if replicas <= 1 else (self.sync_local if nodes <= 1 else self.sync_net)
        return self.base + self.per_sample * local_bsz + sync

    @classmethod
    def fit(cls, reports: Sequence[tuple[int, int, float, float]]) -> FittedStepTime | None:
        """From ``(replicas, nodes, local_bsz, step_time)`` reports; None with nothing to fit.

        Compute: least squares of ``step`` on ``local_bsz`` over the single-replica reports, or, if
        there are none, over all with a common sync; a single batch size gives half its time to
        the constant and half to the per-sample part (AdaptDL's rule: optimistic about a larger
        batch, so that the job gets to try one; its reports there correct the line). Sync: the
        mean excess over the compute line of the multi-replica reports on one node and across
        nodes (a missing one borrows the other)."""
        if not reports:
            return None
        single = [(b, t) for r, _, b, t in reports if r <= 1] or [(b, t) for _, _, b, t in reports]
        base, per = _line(single)
        excess = {True: [], False: []}  # type: dict[bool, list[float]]
        for r, n, b, t in reports:
            if r > 1:
                excess[n <= 1].append(max(0.0, t - (base + per * b)))
        local = sum(excess[True]) / len(excess[True]) if excess[True] else None
        net = sum(excess[False]) / len(excess[False]) if excess[False] else None
        local = local if local is not None else (net or 0.0)
        net = net if net is not None else local
        return cls(base, per, local, max(net, local))


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``t = a + c x`` (a >= 0, c >= 0); one distinct x: ``a = c x`` (half each)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(t for _, t in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 1e-12 * max(1.0, mx * mx):
        return (my / 2, my / 2 / mx) if mx > 0 else (my, 0.0)
    c = sum((x - mx) * (t - my) for x, t in points) / sxx
    if c <= 0:
        return my, 0.0
    a = my - c * mx
    if a < 0:
        return 0.0, sum(x * t for x, t in points) / sum(x * x for x, _ in points)
    return a, c
