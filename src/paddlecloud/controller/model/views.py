"""Turn database rows into API views (``paddlecloud.api.models``); no decisions here."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import PurePosixPath

from pydantic import ValidationError

from paddlecloud.api.errors import Conflict, ErrorCode
from paddlecloud.api.models import (
    EstimateView,
    EventView,
    Framework,
    JobDetail,
    JobSpec,
    JobView,
    RoleStatus,
    WorkerView,
)
from paddlecloud.controller.model.batches import state_view
from paddlecloud.controller.model.placement import trainers_of
from paddlecloud.controller.model.specs import listed_counts
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, WorkerReason, WorkerState
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = ["RoleTally", "detail_view", "job_view", "tally", "ts", "worker_view"]

#: (role, state) -> count, for one job
RoleTally = dict[tuple[str, str], int]

_FAILED = (WorkerState.FAILED, WorkerState.LOST)
_WORKER_REASONS = frozenset(r.value for r in WorkerReason)


def ts(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=UTC)


def tally(workers: Iterable[WorkerRow]) -> RoleTally:
    out: RoleTally = {}
    for w in workers:
        out[(w.role, w.state)] = out.get((w.role, w.state), 0) + 1
    return out


def _role(counts: RoleTally, role: str, desired: int) -> RoleStatus:
    return RoleStatus(
        desired=desired,
        running=counts.get((role, WorkerState.RUNNING), 0),
        succeeded=counts.get((role, WorkerState.SUCCEEDED), 0),
        failed=sum(counts.get((role, s), 0) for s in _FAILED),
    )


def _trainers(row: JobRow) -> int:
    """A placed job's current trainer count (an elastic job's changes), else the requested one."""
    if row.placement:
        return len(trainers_of(row))
    return listed_counts(row)[1]


def job_view(row: JobRow, counts: RoleTally, estimate: EstimateView | None = None) -> JobView:
    submitted = ts(row.submitted_at)
    assert submitted is not None
    return JobView(
        name=row.name,
        user=row.user,
        phase=JobPhase(row.phase),
        framework=Framework(row.framework),
        pservers=_role(counts, "pserver", listed_counts(row)[0]),
        trainers=_role(counts, "trainer", _trainers(row)),
        priority=row.priority,
        submitted_at=submitted,
        started_at=ts(row.started_at),
        finished_at=ts(row.finished_at),
        reason=row.reason,
        message=row.message,
        estimate=estimate if row.phase not in TERMINAL_PHASES else None,
    )


def worker_view(w: WorkerRow) -> WorkerView:
    return WorkerView(
        name=w.name,
        role=w.role,
        index=w.index,
        state=WorkerState(w.state),
        node=w.node,
        endpoint=w.endpoint,
        pid=w.pid,
        restarts=w.restarts,
        exit_code=w.exit_code,
        started_at=ts(w.started_at),
        finished_at=ts(w.finished_at),
        log=PurePosixPath(w.log_path).name,  # its name: users never see the server's paths
        reason=WorkerReason(w.reason) if w.reason in _WORKER_REASONS else WorkerReason.NONE,
        message=w.message or "",
    )


def detail_view(row: JobRow, spec: JobSpec | None = None, estimate: EstimateView | None = None) -> JobDetail:
    """The job in full; ``spec``: the row's spec already parsed (a submit has it), else read back
    (``Conflict`` with code ``spec_unreadable`` when the stored one no longer passes the rules)."""
    base = job_view(row, tally(row.workers), estimate)
    if spec is None:
        try:
            spec = JobSpec.from_stored(row.spec)
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
            raise Conflict(
                f"the stored spec of job {row.name!r} cannot be read ({first['msg']}); "
                f"`paddlecloud kill --rm {row.name}` removes it, then submit it again",
                code=ErrorCode.SPEC_UNREADABLE,
            ) from None
    return JobDetail(
        **base.model_dump(),
        spec=spec,
        output_dir=row.output_dir,
        events=[
            EventView(
                time=datetime.fromtimestamp(e.time, tz=UTC), type=e.type, reason=e.reason, message=e.message
            )
            for e in row.events
        ],
        workers=[worker_view(w) for w in row.workers],
        adaptive=state_view(spec, row.adaptive),
    )
