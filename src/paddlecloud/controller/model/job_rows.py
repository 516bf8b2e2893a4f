"""Small translations shared by the reconciler, the plan's effects and the job service.

``job_request``: a job row as the scheduler sees it (elastic bounds only where the backend can
resize; an adaptive-batch job's best batch and goodput per trainer count, ``controller.model.batches``).
(A job's placement: ``controller.model.placement``.) ``record_workers``: write what
the backend observed (worker states, backend events) onto a job row, counting the restarts
among the events (``paddlecloud_worker_restarts_total``). ``account``: add the
service a started job received since it was last accounted (trainer-seconds; GPU-seconds for GPU
jobs), which the least-attained-service policies order by.
"""

from __future__ import annotations

from typing import TypedDict

from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import JobStatus
from paddlecloud.controller.model.batches import BatchPlans
from paddlecloud.controller.model.context import Context, EngineUnits, job_key
from paddlecloud.controller.model.metrics import RESTART_EVENTS
from paddlecloud.controller.model.placement import placed, trainer_names
from paddlecloud.controller.model.specs import SpecCache
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = [
    "PLAIN",
    "account",
    "fixed_workers",
    "job_request",
    "record_workers",
]

#: an engine that allocates what is asked (millicores, no store worker)
PLAIN = EngineUnits()


def job_request(
    row: JobRow,
    elastic: bool = True,
    *,
    specs: SpecCache,
    plans: BatchPlans | None = None,
    cache_nodes: frozenset[str] = frozenset(),
    engine: EngineUnits = PLAIN,
) -> JobRequest:
    """The scheduler's view of a job; a started job's ``running`` and ``placement`` are what it holds.

    ``elastic=False`` (a backend without the resize capability) pins min and max to the requested
    count so no policy plans a resize the backend cannot do. ``specs``: the controller's cache of
    parsed specs (each parsed once per job). ``plans``: an adaptive-batch job's
    ``batches`` and goodput ``speedup`` (the controller's cache; without it, none: views that do
    not schedule). ``cache_nodes``: the nodes holding the cache of the job's SampleSet.
    ``engine``: what the engine really allocates (``Context.engine_units``: whole CPUs, the
    rendezvous store as a worker), so each worker is planned at what it will hold.
    """
    spec = specs.get(row)
    placement = placed(row)
    hi = (
        max(spec.trainers.max or spec.trainers.count, spec.trainers.count) if elastic else spec.trainers.count
    )
    plan = plans.table(row, spec, hi) if plans is not None else None
    running = sum(1 for p in placement if p.role == "trainer")
    adaptive = plan is not None and bool(plan.batches) and running > 0 and row.adaptive is not None
    return JobRequest(
        key=job_key(row.user, row.name),
        user=row.user,
        priority=row.priority,
        submitted_at=row.submitted_at,
        **fixed_workers(spec, engine),
        min_trainers=(spec.trainers.min or 0) if elastic else 0,
        max_trainers=(spec.trainers.max or 0) if elastic else 0,
        attained=row.attained,
        running=running,
        placement=placement,
        resized_at=row.resized_at if row.resized_at is not None else float("-inf"),
        rebatched_at=_rebatched_at(row),
        batches=plan.batches if plan is not None else (),
        speedup=plan.speedup if plan is not None else (),
        # the batch it runs at: elastic's batch-only resize compares it with the table's
        batch_size=row.adaptive.batch_size if adaptive and row.adaptive is not None else 0,
        cache_nodes=cache_nodes,
    )


class FixedWorkers(TypedDict):
    pservers: int
    pserver: Resources
    trainers: int
    trainer: Resources


def fixed_workers(spec: JobSpec, engine: EngineUnits) -> FixedWorkers:
    """A job's pservers and trainers as the engine allocates them: each at its CPU in the engine's
    unit, and an elastic torch job's rendezvous store (``EngineUnits.store``) as its one pserver."""
    store = engine.store(spec)
    return FixedWorkers(
        pservers=1 if store is not None else spec.pservers.count,
        pserver=store if store is not None else spec.pservers.resources().cpus_in_units(engine.cpu_unit_m),
        trainers=spec.trainers.count,
        trainer=spec.trainers.resources().cpus_in_units(engine.cpu_unit_m),
    )


def _rebatched_at(row: JobRow) -> float:
    """When a resize last set an adaptive job's batch (-inf: never, or a fixed-batch job)."""
    at = row.adaptive.rebatched_at if row.adaptive is not None else None
    return at if at is not None else float("-inf")


def account(row: JobRow, now: float, specs: SpecCache) -> None:
    if row.accounted_at is not None and row.placement:
        spec = specs.get(row)
        units = max(spec.trainers.resources().gpu, 1) * len(trainer_names(row))
        row.attained += units * max(now - row.accounted_at, 0.0)
    row.accounted_at = now


def record_workers(ctx: Context, row: JobRow, status: JobStatus) -> None:
    by_name = {w.name: w for w in row.workers}
    for ws in status.workers:
        w = by_name.get(ws.name)
        if w is None:
            w = WorkerRow(name=ws.name, role=ws.role, index=ws.index, state=ws.state)
            row.workers.append(w)
            by_name[ws.name] = w
        w.state, w.node, w.endpoint, w.pid = ws.state, ws.node, ws.endpoint, ws.pid
        w.restarts, w.exit_code, w.log_path = ws.restarts, ws.exit_code, ws.log_path
        w.started_at, w.finished_at = ws.started_at, ws.finished_at
        w.reason, w.message = str(ws.reason), ws.message[:2000]
    for ev in status.events:
        ctx.event(row, ev.type, ev.reason, ev.message)
        if ev.reason in RESTART_EVENTS:
            ctx.metrics.restarts.labels(row.user).inc()
