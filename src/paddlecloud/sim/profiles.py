"""Measured application profiles: how fast a job runs on a placement, and how much it must do.

Source data (``pollux/traces/<app>/`` in the shared data folder, from the Pollux OSDI'21 artifact):

``placements.csv``  ``placement, local_bsz, step_time, sync_time``
    One row per measured (placement, per-GPU batch). ``placement`` lists GPUs per node and is
    stored as its lexicographically smallest rotation (``'1242'``, never ``'2421'``): 108 placements
    over 1-4 nodes. ``step_time`` is seconds per optimizer step, ``sync_time`` the part of it spent
    in gradient all-reduce (``step_time - sync_time`` is the compute part of one micro-step).
``scalability.csv``  ``num_nodes, num_replicas, local_bsz, step_time, sync_time``
    Larger allocations, no per-node breakdown: 6, 8, 12 and 16 nodes, 1-4 GPUs per node.
``validation-<B>.csv``  ``progress, iteration, metric, grad_sqr, grad_var``
    One row per epoch (row ``e`` = end of epoch ``e``) of a real run at global batch ``B``. Every
    file has exactly the paper's epoch limit in rows (bert 2, cifar10 100, ncf 10, imagenet 90,
    deepspeech2 80, yolov3 50). ``iteration`` is optimizer steps taken so far at batch ``B``.
    ``progress`` is *not* samples: it is AdaScale "scale-invariant iterations" measured in steps of
    the smallest validated batch (``init_batch_size``): in the smallest-batch file
    ``progress == iteration`` (within 1), and each epoch is worth ~``dataset / init_batch_size``
    progress in every file (cifar10: 391 = 50,000 / 128). Reaching a given progress takes more
    samples at a larger batch; that gap is the statistical efficiency.

Step time for (``replicas`` GPUs over ``nodes`` nodes, per-GPU micro-batch ``b``)
    Piecewise-linear interpolation of the measurements, never a fitted curve (the paper's own
    simulator interpolates too):

    1. *Along the local batch*, per measured configuration: linear between measured batches;
       below the smallest measured batch the smallest one's times are used (small batches do not get
       faster); above the largest, the sync part is kept and the compute part grows in proportion to
       the batch (``sync + (step - sync) * b / b_max``).
    2. :meth:`AppProfile.placement_step_time` with an exact per-node placement that was measured
       uses that placement's curve (rotations are normalized like the CSV's).
    3. Otherwise, by ``(nodes, replicas)``: the mean of every measured curve with that node and GPU
       count (placements with the same counts, e.g. ``'13'`` and ``'22'``, plus scalability.csv
       rows). A count pair that was not measured is interpolated linearly in GPUs-per-node
       ``g = replicas / nodes`` within each measured node count (1, 2, 3, 4, 6, 8, 12, 16), then
       linearly in the node count between the two measured node counts around it. Outside the
       measured ranges the nearest edge is used (more than 16 nodes: the 16-node values at the same
       ``g``; the paper's simulator also caps at 16 nodes).

Batch, accumulation and throughput
    ``min_local_bsz``/``max_local_bsz`` are the smallest and largest per-GPU batch in placements.csv
    (yolov3: at most 8, as in the paper). A global batch ``B`` on ``R`` replicas gives local batch
    ``B / R``; above ``max_local_bsz`` the step is split into ``k = ceil(B / (R * max_local_bsz))``
    micro-steps of ``B / (R * k)`` each, one all-reduce at the end, so the global batch (the
    training semantics) never changes. An accumulated step takes
    ``step(micro) + (k - 1) * (step(micro) - sync(micro))``. ``throughput = B / step_time``
    samples per second. Local batches are real numbers here (no rounding to whole samples);
    :meth:`AppProfile.artifact_plan` reproduces the paper simulator's integer rule instead.

Work to completion (:meth:`AppProfile.work`)
    The paper's progress model: training is done when progress reaches the target
    ``P(limit)``, where ``P(e)`` is the smallest ``progress`` at row ``e`` over all of the app's
    validation files (row ``limit`` = the last row; all files have exactly that many). During epoch
    ``e`` (0-based) one optimizer step at global batch ``B`` earns
    ``gain(B, e) = (var + sqr) / (var / s + sqr)`` progress, with ``s = B / init_batch_size`` and
    ``sqr, var`` the ``grad_sqr, grad_var`` of row ``e``; for a batch size without its own file they
    are interpolated linearly between the validated batch sizes around it (clamped to the nearest
    file outside the validated range). Steps to finish at a fixed batch are
    ``sum over e < limit of (P(e + 1) - P(e)) / gain(B, e)``, and work in samples is ``B`` times
    that. For a validated batch this lands within a few percent of the file's own ``iteration`` at
    the last row (:meth:`AppProfile.measured_steps`).

:class:`ElasticCpuModel` is the synthetic near-linear model used for the EDL (CPU) scenario.
"""

from __future__ import annotations

import csv
import math
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "APPLICATIONS",
    "EPOCH_LIMITS",
    "AppProfile",
    "BatchPlan",
    "ElasticCpuModel",
    "ThroughputModel",
    "load_profiles",
    "packed_nodes",
]

#: The six measured Pollux applications.
APPLICATIONS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

#: Epochs to completion used by the paper (and the number of rows in every validation file).
EPOCH_LIMITS: Mapping[str, int] = {
    "bert": 2,
    "cifar10": 100,
    "deepspeech2": 80,
    "imagenet": 90,
    "ncf": 10,
    "yolov3": 50,
}

#: Per-GPU batch caps that are stricter than the profile's largest measured batch.
MAX_LOCAL_BSZ_OVERRIDES: Mapping[str, float] = {"yolov3": 8.0}

_EPS = 1e-9
_VALIDATION_RE = re.compile(r"^validation-(\d+)\.csv$")


class ThroughputModel(Protocol):
    """What the simulator needs from an application model (measured or synthetic)."""

    @property
    def name(self) -> str: ...

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        """Samples per second of ``replicas`` workers over ``nodes`` nodes at global batch ``global_bsz``."""
        ...

    def work(self, global_bsz: float) -> float:
        """Samples to process until the job is done, at a fixed global batch."""
        ...

    def max_replicas(self, global_bsz: float) -> int:
        """The most replicas that make sense at this global batch."""
        ...


def packed_nodes(replicas: int, gpus_per_node: int = 4) -> int:
    """Nodes used when ``replicas`` GPUs are packed onto as few nodes as possible."""
    if replicas < 1 or gpus_per_node < 1:
        raise ValueError(f"replicas and gpus_per_node must be >= 1, got {replicas}, {gpus_per_node}")
    return -(-replicas // gpus_per_node)


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How one optimizer step at a global batch is executed on ``replicas`` GPUs."""

    replicas: int
    #: samples per GPU per micro-step
    micro_bsz: float
    #: micro-steps per optimizer step (1 = no gradient accumulation)
    accum_steps: int

    @property
    def local_bsz(self) -> float:
        return self.micro_bsz * self.accum_steps

    @property
    def global_bsz(self) -> float:
        return self.replicas * self.micro_bsz * self.accum_steps


@dataclass(frozen=True, slots=True)
class _Curve:
    """Step and sync time against per-GPU batch for one measured configuration."""

    bsz: tuple[float, ...]
    step: tuple[float, ...]
    sync: tuple[float, ...]

    @staticmethod
    def of(points: Iterable[tuple[float, float, float]]) -> _Curve:
        """Build from ``(local_bsz, step, sync)`` points; repeated batches are averaged."""
        groups: dict[float, list[tuple[float, float]]] = defaultdict(list)
        for b, step, sync in points:
            groups[b].append((step, sync))
        if not groups:
            raise ValueError("a curve needs at least one measurement")
        keys = sorted(groups)
        steps = tuple(sum(s for s, _ in groups[b]) / len(groups[b]) for b in keys)
        syncs = tuple(sum(y for _, y in groups[b]) / len(groups[b]) for b in keys)
        return _Curve(tuple(keys), steps, syncs)

    def at(self, b: float) -> tuple[float, float]:
        """(step, sync) at per-GPU batch ``b`` (see the module docstring for the edges)."""
        if b <= self.bsz[0]:
            return self.step[0], self.sync[0]
        if b > self.bsz[-1]:
            step, sync = self.step[-1], self.sync[-1]
            return sync + (step - sync) * b / self.bsz[-1], sync
        i = bisect_left(self.bsz, b)
        if self.bsz[i] == b:
            return self.step[i], self.sync[i]
        w = (b - self.bsz[i - 1]) / (self.bsz[i] - self.bsz[i - 1])
        return (
            _lerp(self.step[i - 1], self.step[i], w),
            _lerp(self.sync[i - 1], self.sync[i], w),
        )


def _lerp(a: float, b: float, w: float) -> float:
    return a + (b - a) * w


def _accumulated(step: float, sync: float, k: int) -> float:
    """Seconds of an optimizer step of ``k`` micro-steps: every one computes, only the last syncs."""
    return step + (k - 1) * (step - sync)


def _bracket(xs: Sequence[float], x: float) -> tuple[int, int, float]:
    """Indices ``(lo, hi)`` of sorted ``xs`` around ``x`` and the weight of ``hi``; clamped at the ends."""
    if x <= xs[0]:
        return 0, 0, 0.0
    if x >= xs[-1]:
        return len(xs) - 1, len(xs) - 1, 0.0
    i = bisect_left(xs, x)
    if xs[i] == x:
        return i, i, 0.0
    return i - 1, i, (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def _placement_key(placement: Sequence[int]) -> str | None:
    """The CSV spelling of a placement (smallest rotation, empty nodes dropped); None if unspellable."""
    counts = tuple(int(c) for c in placement if c)
    if not counts or any(c < 0 or c > 9 for c in counts):
        return None
    best = min(counts[i:] + counts[:i] for i in range(len(counts)))
    return "".join(str(c) for c in best)


@dataclass(frozen=True, slots=True)
class _Validation:
    """One ``validation-<B>.csv``: per-epoch rows at global batch ``batch_size``."""

    batch_size: int
    progress: tuple[float, ...]
    iteration: tuple[int, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True, eq=False)
class AppProfile:
    """The measured speed and work of one application. Build with :meth:`load`."""

    name: str
    epoch_limit: int
    min_local_bsz: float
    max_local_bsz: float
    _placements: Mapping[str, _Curve] = field(repr=False)
    #: (nodes, replicas) -> mean curve of every measurement with those counts
    _grid: Mapping[tuple[int, int], _Curve] = field(repr=False)
    #: nodes -> sorted replica counts measured at that node count
    _grid_replicas: Mapping[int, tuple[int, ...]] = field(repr=False)
    _grid_nodes: tuple[int, ...] = field(repr=False)
    _validation: Mapping[int, _Validation] = field(repr=False)
    _work_cache: dict[float, float] = field(default_factory=dict, repr=False, compare=False)

    # ----------------------------------------------------------------------------------- loading

    @classmethod
    def load(cls, trace_dir: str | Path, epoch_limit: int | None = None) -> AppProfile:
        """Read ``placements.csv``, ``scalability.csv`` and ``validation-*.csv`` from ``trace_dir``.

        The application is named after the folder; ``epoch_limit`` defaults to :data:`EPOCH_LIMITS`.
        """
        root = Path(trace_dir)
        name = root.name
        limit = epoch_limit if epoch_limit is not None else EPOCH_LIMITS.get(name)
        if limit is None:
            raise ValueError(f"no epoch limit known for application {name!r}; pass epoch_limit")
        if limit < 1:
            raise ValueError(f"epoch_limit must be >= 1, got {limit}")

        by_placement: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        by_counts: dict[tuple[int, int], list[tuple[float, float, float]]] = defaultdict(list)
        for row in _read_rows(root / "placements.csv"):
            spelled = row["placement"].strip()
            counts = [int(c) for c in spelled]
            key = _placement_key(counts)
            if key is None:
                raise ValueError(f"{root / 'placements.csv'}: bad placement {spelled!r}")
            point = (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
            by_placement[key].append(point)
            by_counts[len(key), sum(counts)].append(point)
        for row in _read_rows(root / "scalability.csv"):
            nodes, replicas = int(row["num_nodes"]), int(row["num_replicas"])
            point = (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
            by_counts[nodes, replicas].append(point)
        if not by_placement:
            raise ValueError(f"{root / 'placements.csv'} has no rows")

        grid = {k: _Curve.of(v) for k, v in by_counts.items()}
        grid_replicas: dict[int, list[int]] = defaultdict(list)
        for nodes, replicas in grid:
            grid_replicas[nodes].append(replicas)

        validation: dict[int, _Validation] = {}
        for path in sorted(root.glob("validation-*.csv")):
            m = _VALIDATION_RE.match(path.name)
            if m is None:
                continue
            bsz = int(m.group(1))
            rows = _read_rows(path)
            if len(rows) < limit:
                raise ValueError(f"{path} has {len(rows)} epochs, fewer than the limit {limit}")
            validation[bsz] = _Validation(
                batch_size=bsz,
                progress=tuple(float(r["progress"]) for r in rows),
                iteration=tuple(int(float(r["iteration"])) for r in rows),
                grad_sqr=tuple(float(r["grad_sqr"]) for r in rows),
                grad_var=tuple(float(r["grad_var"]) for r in rows),
            )
        if not validation:
            raise ValueError(f"{root} has no validation-<batch size>.csv files")

        all_bsz = [b for pts in by_placement.values() for b, _, _ in pts]
        max_local = max(all_bsz)
        if name in MAX_LOCAL_BSZ_OVERRIDES:
            max_local = min(max_local, MAX_LOCAL_BSZ_OVERRIDES[name])
        return cls(
            name=name,
            epoch_limit=limit,
            min_local_bsz=min(all_bsz),
            max_local_bsz=max_local,
            _placements={k: _Curve.of(v) for k, v in by_placement.items()},
            _grid=grid,
            _grid_replicas={n: tuple(sorted(rs)) for n, rs in grid_replicas.items()},
            _grid_nodes=tuple(sorted(grid_replicas)),
            _validation=dict(sorted(validation.items())),
        )

    # ------------------------------------------------------------------------------ batch sizes

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Global batch sizes with a validation file, ascending."""
        return tuple(self._validation)

    @property
    def init_batch_size(self) -> int:
        """The smallest validated global batch: the unit of ``progress``."""
        return self.batch_sizes[0]

    @property
    def max_batch_size(self) -> int:
        """The largest validated global batch."""
        return self.batch_sizes[-1]

    def max_replicas(self, global_bsz: float) -> int:
        """The most replicas that still give every replica at least ``min_local_bsz`` (at least 1)."""
        return max(1, math.floor(global_bsz / self.min_local_bsz + _EPS))

    def plan(self, replicas: int, global_bsz: float) -> BatchPlan:
        """Split ``global_bsz`` over ``replicas``, accumulating gradients above ``max_local_bsz``."""
        _check_counts(replicas, 1)
        if global_bsz <= 0:
            raise ValueError(f"global_bsz must be > 0, got {global_bsz}")
        micro, k = self._split(global_bsz / replicas)
        return BatchPlan(replicas=replicas, micro_bsz=micro, accum_steps=k)

    def _split(self, local_bsz: float) -> tuple[float, int]:
        """(micro-batch, micro-steps) for a per-GPU batch: ``k = ceil(local / max_local_bsz)``."""
        if local_bsz <= 0:
            raise ValueError(f"local_bsz must be > 0, got {local_bsz}")
        k = max(1, math.ceil(local_bsz / self.max_local_bsz - _EPS))
        return local_bsz / k, k

    def artifact_plan(self, replicas: int, global_bsz: int) -> BatchPlan:
        """The Pollux artifact simulator's integer plan, for reproducing its numbers exactly.

        Local batch rounded up to whole samples, at least two micro-steps on a single replica when the
        batch exceeds ``init_batch_size``, and the micro-batch capped so that
        ``replicas * micro * k <= max_batch_size``. The resulting global batch may differ from the
        requested one by rounding.
        """
        _check_counts(replicas, 1)
        local = math.ceil(global_bsz / replicas - 1e-8)
        extra = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if replicas == 1 and global_bsz > self.init_batch_size:
            extra = max(1, extra)
        micro = math.ceil(local / (extra + 1) - 1e-8)
        micro = min(micro, int(self.max_batch_size / (replicas * (extra + 1))))
        return BatchPlan(replicas=replicas, micro_bsz=float(micro), accum_steps=extra + 1)

    # ------------------------------------------------------------------------------ step time

    def _raw(self, nodes: int, replicas: int, micro_bsz: float) -> tuple[float, float]:
        """(step, sync) of one micro-step-plus-sync by ``(nodes, replicas)``, no accumulation."""
        curve = self._grid.get((nodes, replicas))
        if curve is not None:
            return curve.at(micro_bsz)
        g = replicas / nodes
        lo, hi, w = _bracket(self._grid_nodes, nodes)
        step_lo, sync_lo = self._along_g(self._grid_nodes[lo], g, micro_bsz)
        if w == 0.0:
            return step_lo, sync_lo
        step_hi, sync_hi = self._along_g(self._grid_nodes[hi], g, micro_bsz)
        return _lerp(step_lo, step_hi, w), _lerp(sync_lo, sync_hi, w)

    def _along_g(self, nodes: int, g: float, micro_bsz: float) -> tuple[float, float]:
        """Interpolate in GPUs-per-node within one measured node count."""
        reps = self._grid_replicas[nodes]
        lo, hi, w = _bracket([r / nodes for r in reps], g)
        step_lo, sync_lo = self._grid[nodes, reps[lo]].at(micro_bsz)
        if w == 0.0:
            return step_lo, sync_lo
        step_hi, sync_hi = self._grid[nodes, reps[hi]].at(micro_bsz)
        return _lerp(step_lo, step_hi, w), _lerp(sync_lo, sync_hi, w)

    def step_and_sync(self, replicas: int, nodes: int, micro_bsz: float) -> tuple[float, float]:
        """Interpolated (step, sync) seconds of one micro-step and its all-reduce, no accumulation."""
        _check_counts(replicas, nodes)
        return self._raw(nodes, replicas, micro_bsz)

    def step_time(self, replicas: int, nodes: int, local_bsz: float) -> float:
        """Seconds per optimizer step of ``replicas`` GPUs over ``nodes`` nodes at per-GPU ``local_bsz``.

        Above ``max_local_bsz`` the step accumulates gradients over ``k`` micro-steps.
        """
        _check_counts(replicas, nodes)
        micro, k = self._split(local_bsz)
        step, sync = self._raw(nodes, replicas, micro)
        return _accumulated(step, sync, k)

    def placement_step_time(self, placement: Sequence[int], local_bsz: float) -> float:
        """Like :meth:`step_time` for an exact per-node GPU placement, e.g. ``(2, 2)``.

        A measured placement (any rotation) uses its own curve; otherwise the ``(nodes, replicas)``
        interpolation of :meth:`step_time`.
        """
        counts = [c for c in placement if c]
        if not counts:
            raise ValueError("placement has no GPUs")
        replicas, nodes = sum(counts), len(counts)
        key = _placement_key(counts)
        curve = self._placements.get(key) if key is not None else None
        if curve is None:
            return self.step_time(replicas, nodes, local_bsz)
        micro, k = self._split(local_bsz)
        step, sync = curve.at(micro)
        return _accumulated(step, sync, k)

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        """Samples per second at a fixed global batch (accumulating when needed)."""
        return global_bsz / self.step_time(replicas, nodes, global_bsz / replicas)

    # ----------------------------------------------------------------------------------- work

    def epoch_progress(self, epoch: int) -> float:
        """Progress at the end of ``epoch`` epochs (0 -> 0): the smallest over the validation files."""
        if not 0 <= epoch <= self.epoch_limit:
            raise ValueError(f"epoch must be in [0, {self.epoch_limit}], got {epoch}")
        if epoch == 0:
            return 0.0
        return min(v.progress[epoch - 1] for v in self._validation.values())

    @property
    def completion_progress(self) -> float:
        """Progress at which the job is done: :meth:`epoch_progress` of the epoch limit."""
        return self.epoch_progress(self.epoch_limit)

    def grad_stats(self, global_bsz: float, epoch: int) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` during 0-based ``epoch``, interpolated between validated batches."""
        if not 0 <= epoch < self.epoch_limit:
            raise ValueError(f"epoch must be in [0, {self.epoch_limit}), got {epoch}")
        sizes = self.batch_sizes
        lo, hi, w = _bracket(sizes, global_bsz)
        a, b = self._validation[sizes[lo]], self._validation[sizes[hi]]
        return (
            _lerp(a.grad_sqr[epoch], b.grad_sqr[epoch], w),
            _lerp(a.grad_var[epoch], b.grad_var[epoch], w),
        )

    def gain(self, global_bsz: float, epoch: int) -> float:
        """Progress earned by one optimizer step at ``global_bsz`` during 0-based ``epoch``."""
        sqr, var = self.grad_stats(global_bsz, epoch)
        scale = global_bsz / self.init_batch_size
        den = var / scale + sqr
        if den <= 0.0:
            return 1.0
        return (var + sqr) / den

    def steps_to_complete(self, global_bsz: float) -> float:
        """Optimizer steps at a fixed ``global_bsz`` from zero progress to :attr:`completion_progress`."""
        if global_bsz <= 0:
            raise ValueError(f"global_bsz must be > 0, got {global_bsz}")
        total = 0.0
        prev = 0.0
        for e in range(self.epoch_limit):
            nxt = self.epoch_progress(e + 1)
            total += (nxt - prev) / self.gain(global_bsz, e)
            prev = nxt
        return total

    def work(self, global_bsz: float) -> float:
        """Samples processed from start to completion at a fixed ``global_bsz``."""
        cached = self._work_cache.get(global_bsz)
        if cached is None:
            cached = global_bsz * self.steps_to_complete(global_bsz)
            self._work_cache[global_bsz] = cached
        return cached

    def measured_steps(self, global_bsz: int) -> int | None:
        """The real run's ``iteration`` at the epoch limit, if ``global_bsz`` has a validation file."""
        v = self._validation.get(global_bsz)
        return None if v is None else v.iteration[self.epoch_limit - 1]


def _check_counts(replicas: int, nodes: int) -> None:
    if nodes < 1 or replicas < nodes:
        raise ValueError(f"need 1 <= nodes <= replicas, got replicas={replicas}, nodes={nodes}")


def load_profiles(traces_dir: str | Path, names: Iterable[str] = APPLICATIONS) -> dict[str, AppProfile]:
    """:meth:`AppProfile.load` for each application folder under ``traces_dir``."""
    root = Path(traces_dir)
    return {name: AppProfile.load(root / name) for name in names}


@dataclass(frozen=True)
class ElasticCpuModel:
    """A synthetic, near-linear CPU training job (the EDL scenario has no measured profile).

    ``n`` trainers process ``n * per_trainer / (1 + contention * (n - 1))`` samples per second: each
    trainer keeps its own batch and pulls data chunks from the master's task queue, so the only loss
    is a small, growing share of time spent on parameter-server contention. With the defaults that
    is 99.6% efficiency on 2 trainers, 93% on 20 and 81% on 60. The global batch is not used and
    nodes do not matter (parameter-server traffic crosses the network either way). Every job has
    the same fixed ``work_samples``: 4,000,000 samples, about 5.6 h on 2 trainers and 14 min on 60.
    """

    name: str = "edl"
    per_trainer: float = 100.0
    contention: float = 0.004
    work_samples: float = 4_000_000.0
    trainer_cap: int = 60

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        if replicas <= 0:
            return 0.0
        return replicas * self.per_trainer / (1.0 + self.contention * (replicas - 1))

    def work(self, global_bsz: float) -> float:
        return self.work_samples

    def max_replicas(self, global_bsz: float) -> int:
        return self.trainer_cap
