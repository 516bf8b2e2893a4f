"""Adaptive-batch jobs in the simulator: exact progress at any batch, and their goodput tables.

A :class:`~paddlecloud.sim.workload.SimJob` with ``adaptive = (lo, hi)`` lets the scheduler pick its
global batch in ``[lo, hi]``; ``global_bsz`` is where it starts (``M0``, the unit of its progress).

Progress (the paper's model, counted in examples at ``M0``)
    The job is done when the paper's progress reaches ``completion_progress``; during 0-based epoch
    ``e`` one optimizer step at batch ``B`` earns ``gain(B, e)`` progress (``AppProfile.gain``, the
    AdaScale gain with the traces' ``grad_sqr`` / ``grad_var`` at ``B``). Counted in examples at
    ``M0``, epoch ``e`` is worth ``M0 x (P(e + 1) - P(e)) / gain(M0, e)`` examples, so the whole job
    is ``AppProfile.work(M0)`` examples, exactly the fixed-batch job's work, and a second of training
    at ``B`` on a placement earns
    ``throughput(B) x efficiency`` examples, ``efficiency = M0 gain(B, e) / (B gain(M0, e))``.
    A job at ``B = M0`` therefore progresses exactly as the fixed-batch job; at a larger batch it
    needs fewer steps, and sooner if its noise scale is large. Epochs are crossed exactly inside a
    round (a round can span several epochs).

What the scheduler sees (:meth:`AdaptiveModel.table`)
    ``goodput.goodput_table`` over the application's profile (step time per placement, gradient
    accumulation above its largest measured local batch) with the gradient noise scale the job would
    report now: ``B_noise = init_batch_size x grad_var / grad_sqr`` of the traces at its initial
    batch in the epoch it is in (the traces measure ``grad_var`` at the application's smallest
    validated batch's scale). Tables are cached by (job shape, epoch): a workload has a few hundred.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

from paddlecloud.scheduler.goodput import AdaptiveBatch, GoodputModel, GoodputTable
from paddlecloud.sim.profiles import AppProfile, packed_nodes

__all__ = ["AdaptiveModel", "Tables"]


@dataclass(frozen=True, eq=False)
class AdaptiveModel:
    """One application at one initial batch: epoch boundaries in examples at ``init``, rates."""

    profile: AppProfile
    init: int
    #: examples at ``init`` done at the end of each epoch (``bounds[0] = 0``, ``bounds[-1]`` = work)
    bounds: tuple[float, ...]

    @classmethod
    def of(cls, profile: AppProfile, init: int) -> AdaptiveModel:
        steps, prev, out = 0.0, 0.0, [0.0]
        for e in range(profile.epoch_limit):  # the same sum, in the same order, as AppProfile.work
            nxt = profile.epoch_progress(e + 1)
            steps += (nxt - prev) / profile.gain(init, e)
            prev = nxt
            out.append(init * steps)
        return cls(profile, init, tuple(out))

    @property
    def work(self) -> float:
        return self.bounds[-1]

    def epoch(self, done: float) -> int:
        """The 0-based epoch a job that has done ``done`` examples (at ``init``) is in."""
        return min(max(bisect_right(self.bounds, done) - 1, 0), self.profile.epoch_limit - 1)

    def efficiency(self, batch: float, epoch: int) -> float:
        """Examples at ``init`` earned per example processed at ``batch`` during ``epoch``."""
        if batch == self.init:
            return 1.0
        p = self.profile
        return self.init * p.gain(batch, epoch) / (batch * p.gain(self.init, epoch))

    def noise(self, epoch: int) -> float:
        """The gradient noise scale (samples) the job reports during ``epoch``: the traces' at its
        initial batch (one measure whatever batch it runs at, as the live runtime reports it at the
        ``M0`` scale; the traces' statistics at other batches come from other training runs, and
        reading them at the batch it runs made jobs flip between two batches)."""
        sqr, var = self.profile.grad_stats(self.init, epoch)
        return self.profile.init_batch_size * var / sqr if sqr > 0 else 0.0

    def advance(self, done: float, seconds: float, throughput: float, batch: float) -> tuple[float, float]:
        """Train ``seconds`` at ``throughput`` samples/s and ``batch`` from ``done``: ``(done, used)``,
        ``used`` < ``seconds`` when the job finished after ``used`` seconds."""
        used = 0.0
        while used < seconds and done < self.work:
            e = self.epoch(done)
            rate = throughput * self.efficiency(batch, e)
            need = self.bounds[e + 1] - done
            if rate * (seconds - used) >= need:
                done, used = self.bounds[e + 1], used + need / rate
            else:
                done, used = done + rate * (seconds - used), seconds
        return done, used


@dataclass
class Tables:
    """The goodput tables of a run's adaptive jobs, cached (see the module docstring)."""

    gpus_per_node: int
    cache: dict[tuple[int, int, int, int, int], GoodputTable] = field(default_factory=dict)
    models: dict[tuple[int, int, int, int], GoodputModel] = field(default_factory=dict)

    def table(self, model: AdaptiveModel, bounds: tuple[int, int], replicas: int, epoch: int) -> GoodputTable:
        key = (id(model), bounds[0], bounds[1], replicas, epoch)
        hit = self.cache.get(key)
        if hit is None:
            gm = self.models.get(key[:4])
            if gm is None:
                p = model.profile
                lo, hi = min(bounds[0], model.init), max(bounds[1], model.init)
                spec = AdaptiveBatch(model.init, lo, hi, max_local=math.inf, min_local=p.min_local_bsz)
                nodes = tuple(packed_nodes(n, self.gpus_per_node) for n in range(1, replicas + 1))
                gm = self.models[key[:4]] = GoodputModel(p, spec, nodes)
            hit = self.cache[key] = gm.table(model.noise(epoch))
        return hit
