"""Adaptive batch size on the controller's side: what the scheduler is told, what its decisions store.

    submit ── new_state(spec) ──▶ adaptive_states row (batch_size = the spec's initial batch)
    reports (controller/services/adaptive.py) ──▶ adaptive_states (EMA of |G|^2, tr(Sigma)), adaptive_reports
    job_rows.job_request ── BatchPlans.table(row, spec, hi) ──▶ JobRequest.batches / .speedup:
        goodput_table(FittedStepTime.fit(the job's reports), AdaptiveBatch(init, min, max),
                      noise scale, nodes for n trainers), cached per job until its next report
    effects (Admit / Resize with batch_size > 0) ── assign() ──▶ adaptive_states.batch_size, an event
    Context.launch ── batch_env() ──▶ PADDLECLOUD_BATCH_SIZE/_MIN/_MAX/_INIT, PADDLECLOUD_LR_RULE

An adaptive job with no report yet keeps its batch: ``batches = (init,) x hi`` and no speedup (the
policies then treat it as linear, like a fixed-batch job). The noise scale is ``init x grad_var /
grad_sqr`` in samples (``scheduler.goodput``). How many nodes n trainers span is estimated from the
reports: the most replicas a node held in one of them (all on one node until one says otherwise).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import object_session

from paddlecloud.api.adaptive import AdaptiveState, BatchSpec
from paddlecloud.api.models import JobSpec
from paddlecloud.core.envcontract import batch_vars
from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, GoodputTable, goodput_table
from paddlecloud.store.tables import AdaptiveReportRow, AdaptiveRow, JobRow

__all__ = [
    "BatchPlan",
    "BatchPlans",
    "adaptive_spec",
    "batch_env",
    "new_state",
    "noise_scale",
    "state_view",
]


def adaptive_spec(spec: JobSpec) -> BatchSpec | None:
    """The spec's batch settings if the job opted in to adaptive batch size, else None."""
    return spec.batch if spec.batch is not None and spec.batch.adaptive is not None else None


def new_state(spec: JobSpec) -> AdaptiveRow | None:
    """The state row an adaptive job is submitted with (None: not an adaptive job)."""
    batch = adaptive_spec(spec)
    return AdaptiveRow(batch_size=batch.size, trainers=0, reports=0) if batch is not None else None


def noise_scale(state: AdaptiveRow, init: int) -> float | None:
    """The gradient noise scale in samples from the smoothed statistics (None: not measured, or
    not a finite number: a report of |G|^2 near 0 and a large variance says nothing usable)."""
    if state.grad_sqr is None or state.grad_var is None or state.grad_sqr <= 0:
        return None
    noise = init * state.grad_var / state.grad_sqr
    return noise if math.isfinite(noise) and noise <= 1e15 else None


def state_view(spec: JobSpec, state: AdaptiveRow | None) -> AdaptiveState | None:
    """``GET .../adaptive`` and ``describe``: the settings and what the server knows (None: not adaptive)."""
    batch = adaptive_spec(spec)
    if batch is None or batch.adaptive is None:
        return None
    return AdaptiveState(
        batch_size=state.batch_size if state is not None else batch.size,
        init=batch.size,
        min=batch.adaptive.min,
        max=batch.adaptive.max,
        lr_rule=batch.lr_rule,
        trainers=state.trainers if state is not None else 0,
        noise_scale=noise_scale(state, batch.size) if state is not None else None,
        lr_gain=state.lr_gain if state is not None else None,
        step_time_s=state.step_time_s if state is not None else None,
        reports=state.reports if state is not None else 0,
    )


def batch_env(spec: JobSpec, state: AdaptiveRow | None) -> dict[str, str]:
    """The variables an adaptive job's workers are started with (empty for other jobs)."""
    view = state_view(spec, state)
    if view is None:
        return {}
    return batch_vars(view.batch_size, (view.min, view.max), view.init, str(view.lr_rule))


@dataclass(frozen=True)
class BatchPlan:
    """What ``JobRequest`` gets: best global batch per trainer count, goodput speedup (may be empty)."""

    batches: tuple[int, ...]
    speedup: tuple[float, ...] = ()

    def batch(self, n: int) -> int:
        return self.batches[min(max(n, 1), len(self.batches)) - 1] if self.batches else 0


def _nodes_for(reports: list[AdaptiveReportRow], hi: int) -> list[int]:
    per_node = max((math.ceil(r.replicas / max(r.nodes, 1)) for r in reports), default=hi)
    per_node = max(per_node, 1)
    return [math.ceil(n / per_node) for n in range(1, hi + 1)]


def _plan(s_reports: list[AdaptiveReportRow], batch: BatchSpec, state: AdaptiveRow, hi: int) -> BatchPlan:
    assert batch.adaptive is not None
    fitted = FittedStepTime.fit([(r.replicas, r.nodes, r.local_bsz, r.step_time_s) for r in s_reports])
    if fitted is None:
        return BatchPlan((batch.size,) * hi)
    spec = AdaptiveBatch(batch.size, batch.adaptive.min, batch.adaptive.max)
    noise = noise_scale(state, batch.size) or 0.0
    table: GoodputTable = goodput_table(fitted, spec, noise, _nodes_for(s_reports, hi))
    return BatchPlan(table.batches, table.speedup)


class BatchPlans:
    """Each adaptive job's ``BatchPlan``, computed once per (job, reports stored, trainer bound): a new
    report (``AdaptiveRow.reports`` counts them, in the database, so every server process sees it)
    makes the next ``table`` compute it again. An LRU bounded to ``size`` jobs; thread-safe."""

    def __init__(self, size: int = 20_000) -> None:
        self._size = size
        self._plans: OrderedDict[tuple[int, float, int, int], BatchPlan] = OrderedDict()
        self._last: dict[int, tuple[int, float, int, int]] = {}
        self._lock = threading.Lock()

    def table(self, row: JobRow, spec: JobSpec, hi: int) -> BatchPlan | None:
        """The job's plan for 1..``hi`` trainers (None: not an adaptive job)."""
        batch = adaptive_spec(spec)
        state = row.adaptive
        if batch is None or state is None or hi < 1:
            return None
        if not state.reports:
            return BatchPlan((batch.size,) * hi)
        key = (row.id, row.submitted_at, state.reports, hi)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        s = object_session(row)
        if s is None:  # a detached row: only what the cache knows
            return BatchPlan((state.batch_size,) * hi)
        reports = list(s.scalars(select(AdaptiveReportRow).where(AdaptiveReportRow.job_id == row.id)))
        plan = _plan(reports, batch, state, hi)
        with self._lock:
            old = self._last.pop(row.id, None)
            if old is not None and old != key:
                self._plans.pop(old, None)
            self._plans[key] = plan
            self._last[row.id] = key
            while len(self._plans) > self._size:
                gone, _ = self._plans.popitem(last=False)
                if self._last.get(gone[0]) == gone:
                    del self._last[gone[0]]
        return plan

    def last(self, row: JobRow) -> BatchPlan | None:
        """The plan last computed for the job (None: none yet)."""
        with self._lock:
            key = self._last.get(row.id)
            return self._plans.get(key) if key is not None else None

    def __len__(self) -> int:
        return len(self._plans)
