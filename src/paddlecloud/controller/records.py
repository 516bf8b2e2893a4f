"""Small translations shared by the reconciler and the job service.

``job_request``: a job row as the scheduler sees it. ``record_workers``: write what the backend
observed (worker states, backend events) onto a job row.
"""

from __future__ import annotations

import dataclasses

from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import JobStatus
from paddlecloud.controller.context import Context, job_key
from paddlecloud.scheduler import JobRequest, WorkerPlacement
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = ["job_request", "record_workers", "running_request"]


def job_request(row: JobRow) -> JobRequest:
    spec = JobSpec.model_validate(row.spec)
    return JobRequest(
        key=job_key(row.user, row.name),
        user=row.user,
        priority=row.priority,
        submitted_at=row.submitted_at,
        pservers=spec.pservers.count,
        pserver=spec.pservers.resources(),
        trainers=spec.trainers.count,
        trainer=spec.trainers.resources(),
    )


def running_request(row: JobRow) -> JobRequest:
    """A started job as the scheduler sees it: what it holds (its placement) and its trainer count."""
    placement = tuple(
        WorkerPlacement(p["role"], int(p["index"]), p["node"], tuple(p.get("gpus", ())))
        for p in (row.placement or [])
    )
    trainers = sum(1 for p in placement if p.role == "trainer")
    return dataclasses.replace(job_request(row), running=trainers, placement=placement)


def record_workers(ctx: Context, row: JobRow, status: JobStatus) -> None:
    by_name = {w.name: w for w in row.workers}
    for ws in status.workers:
        w = by_name.get(ws.name)
        if w is None:
            w = WorkerRow(name=ws.name, role=ws.role, index=ws.index, state=ws.state)
            row.workers.append(w)
        w.state, w.node, w.endpoint, w.pid = ws.state, ws.node, ws.endpoint, ws.pid
        w.restarts, w.exit_code, w.log_path = ws.restarts, ws.exit_code, ws.log_path
        w.started_at, w.finished_at = ws.started_at, ws.finished_at
    for ev in status.events:
        ctx.event(row, ev.type, ev.reason, ev.message)
