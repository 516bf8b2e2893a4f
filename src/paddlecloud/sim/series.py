"""The cluster over time: what the engine records each round, and how it is shrunk for output.

engine.simulate ─▶ :class:`Series` (one row per 60 s round, plus one row per idle gap)
    ─▶ :meth:`Series.resample` (equal-width bins, time-weighted means)  ─▶ JSON ``series`` / the plot
    ─▶ :func:`combine` (several workloads on one time axis, averaged)   ─▶ one line per policy

Row ``i`` covers ``[t[i], t[i] + dt[i])`` of virtual time. ``allocated`` and ``useful`` are
utilisation units (GPUs, or CPU cores on a CPU cluster) held on average over the row: ``allocated``
what running jobs hold, ``useful`` the part of it that made progress at full single-replica speed
(see :mod:`paddlecloud.sim.engine`). ``queued`` is the number of jobs waiting after the round's
plan was applied, ``running`` the number holding resources. ``goodput`` is the progress made, in
units training at single-replica speed at each job's initial batch (fixed-batch jobs: ``useful``
without its cap at 1); ``adaptive`` the units held by adaptive-batch jobs while training and
``efficient`` the same weighted by their statistical efficiency (``efficient / adaptive`` is their
mean statistical efficiency, see ``sim.adaptive``).

Resampled series start at 0 (seconds since the first submission) and cover a fixed span with bins of
equal width; time a workload did not cover (it had finished) counts as an empty cluster, so averages
over workloads of different lengths stay honest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["COLUMNS", "Series", "combine"]

#: the value columns, in order
COLUMNS: tuple[str, ...] = ("allocated", "useful", "queued", "running", "goodput", "adaptive", "efficient")


@dataclass
class Series:
    t: list[float] = field(default_factory=list)
    dt: list[float] = field(default_factory=list)
    allocated: list[float] = field(default_factory=list)
    useful: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    goodput: list[float] = field(default_factory=list)
    adaptive: list[float] = field(default_factory=list)
    efficient: list[float] = field(default_factory=list)

    def add(self, t: float, dt: float, allocated: float, useful: float, queued: int, running: int,
            extra: tuple[float, float, float] | None = None) -> None:  # fmt: skip
        """One row; ``extra`` is ``(goodput, adaptive, efficient)``, default ``(useful, 0, 0)``."""
        self.t.append(t)
        self.dt.append(dt)
        self.allocated.append(allocated)
        self.useful.append(useful)
        self.queued.append(float(queued))
        self.running.append(float(running))
        goodput, adaptive, efficient = extra if extra is not None else (useful, 0.0, 0.0)
        self.goodput.append(goodput)
        self.adaptive.append(adaptive)
        self.efficient.append(efficient)

    def __len__(self) -> int:
        return len(self.t)

    @property
    def start(self) -> float:
        return self.t[0] if self.t else 0.0

    @property
    def span(self) -> float:
        """Seconds from the first row's start to the last row's end."""
        return self.t[-1] + self.dt[-1] - self.t[0] if self.t else 0.0

    def column(self, name: str) -> list[float]:
        if name not in COLUMNS:
            raise KeyError(name)
        values: list[float] = getattr(self, name)
        return values

    def resample(self, bins: int, span: float | None = None) -> Series:
        """``bins`` equal-width rows over ``[0, span)`` seconds after :attr:`start` (default: the whole
        series), each the time-weighted mean of the rows it overlaps (0 where there are none)."""
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        total = self.span if span is None else span
        width = total / bins if total > 0 else 1.0
        sums = {c: [0.0] * bins for c in COLUMNS}
        for i in range(len(self)):
            a, b = self.t[i] - self.start, self.t[i] - self.start + self.dt[i]
            k = max(0, int(a // width))
            while k < bins and k * width < b:
                overlap = min(b, (k + 1) * width) - max(a, k * width)
                for c in COLUMNS:
                    sums[c][k] += self.column(c)[i] * overlap
                k += 1
        out = Series()
        for k in range(bins):
            row = [sums[c][k] / width for c in COLUMNS]
            out.t.append(k * width)
            out.dt.append(width)
            for c, v in zip(COLUMNS, row, strict=True):
                out.column(c).append(v)
        return out

    def to_json(self, capacity: float) -> dict[str, list[float | None]]:
        """Columns for the JSON summary: utilisation and goodput as a fraction of ``capacity``, counts
        as they are, adaptive jobs' mean statistical efficiency (None where none trained)."""
        cap = capacity or 1.0
        return {
            "t_s": [round(x, 1) for x in self.t],
            "gpu_util": [round(a / cap, 4) for a in self.allocated],
            "useful_gpu_util": [round(u / cap, 4) for u in self.useful],
            "goodput_util": [round(g / cap, 4) for g in self.goodput],
            "adaptive_stat_eff": [
                round(e / a, 4) if a > 0 else None for a, e in zip(self.adaptive, self.efficient, strict=True)
            ],
            "queued": [round(q, 2) for q in self.queued],
            "running": [round(r, 2) for r in self.running],
        }


def combine(series: Sequence[Series], bins: int, span: float | None = None) -> Series:
    """Workloads on one time axis (seconds since each one's first submission), averaged bin by bin
    over ``[0, span)`` (default: the longest of them)."""
    if not series:
        return Series()
    span = max(s.span for s in series) if span is None else span
    parts = [s.resample(bins, span) for s in series]
    out = Series(t=list(parts[0].t), dt=list(parts[0].dt))
    for c in COLUMNS:
        cols = [p.column(c) for p in parts]
        out.column(c).extend(sum(vals) / len(parts) for vals in zip(*cols, strict=True))
    return out
