"""The adaptive-batch endpoints behind ``/api/v1/jobs/{name}/adaptive``: a job's assignment, its reports.

    trainer (job token) ── POST .../adaptive/report ──▶ AdaptiveService.report:
        at most one report per job per REPORT_INTERVAL_S is stored (a guarded UPDATE claims the
        slot, so concurrent reports and server processes agree); gradient statistics smoothed
        (EMA, weight EMA_WEIGHT for the new one); the report's step time kept among the job's
        last KEEP_REPORTS (the older ones deleted) if its ``replicas`` are the trainers the job
        holds now (else it is not fitted: a worker group still at its old size during a resize,
        or a job claiming more replicas than it runs to inflate its speed-up; its gradient
        statistics, measured at the initial batch, count all the same);
        ``adaptive_states.reports`` counted, which makes the scheduler's cached goodput table
        (``controller.model.batches.BatchPlans``) stale
        ──▶ AdaptiveState: the assignment now (stored or not), so a reporter learns of a change
    trainer, owner, admin (?user=) ── GET .../adaptive ──▶ AdaptiveService.state

Who may call: a job token for its own job only (any other name is ``job_not_found``: a job token
does not reveal which jobs exist); a user token for the user's own jobs, admins for anyone's
(``?user=``); another user's job is ``job_not_found``. Reports come from the job's workers; its
owner may report too (the owner's code holds the job token anyway). A job submitted without
``batch.adaptive`` is ``not_adaptive`` (409). Time is ``ctx.clock``; no reconciler mutex is taken.
"""

from __future__ import annotations

import logging

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from paddlecloud.api.adaptive import AdaptiveReport, AdaptiveState
from paddlecloud.api.errors import Conflict, ErrorCode, NotFound
from paddlecloud.api.models import JobSpec
from paddlecloud.controller.model.batches import adaptive_spec, state_view
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.jobtokens import JobIdentity
from paddlecloud.controller.model.placement import trainers_of
from paddlecloud.store.tables import AdaptiveReportRow, AdaptiveRow, JobRow

__all__ = ["EMA_WEIGHT", "KEEP_REPORTS", "REPORT_INTERVAL_S", "AdaptiveService"]

log = logging.getLogger("paddlecloud.adaptive")

#: at most one stored report per job in this many seconds (later ones are answered, not stored)
REPORT_INTERVAL_S = 5.0
#: step-time reports kept per job (the fit of its step time uses them)
KEEP_REPORTS = 64
#: the weight of a new report's gradient statistics in their moving average
EMA_WEIGHT = 0.2


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - EMA_WEIGHT) * old + EMA_WEIGHT * new


def _trainers(row: JobRow) -> int:
    """The trainers the job runs with now (its placement; 0 while it holds none)."""
    return len(trainers_of(row))


def _trainer_nodes(row: JobRow, replicas: int) -> int:
    nodes = {p.node for p in trainers_of(row)}
    return min(max(len(nodes), 1), replicas)


class AdaptiveService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def _job(
        self, s: Session, who: Identity | JobIdentity, name: str, user: str | None
    ) -> tuple[JobRow, JobSpec]:
        """The caller's job ``name`` and its spec, if it is an adaptive job."""
        missing = NotFound(
            f"job {name!r} not found (see: paddlecloud get jobs -a)", code=ErrorCode.JOB_NOT_FOUND
        )
        if isinstance(who, JobIdentity):
            if name != who.name or (user and user != who.user):
                raise missing  # a job token knows of its own job only
            row = s.get(JobRow, who.job_id)
        else:
            owner = who.name
            if user and user != who.name:
                require_admin(who, "reading another user's jobs")
                owner = user
            row = s.scalar(select(JobRow).where(JobRow.user == owner, JobRow.name == name))
        if row is None:
            raise missing
        spec = self.ctx.specs.get(row)
        if adaptive_spec(spec) is None:
            raise Conflict(
                f"job {name!r} has a fixed batch size: submit it with --batch-size and "
                "--adaptive-batch-size MIN:MAX for the scheduler to adapt it",
                code=ErrorCode.NOT_ADAPTIVE,
            )
        return row, spec

    @staticmethod
    def _view(spec: JobSpec, state: AdaptiveRow | None) -> AdaptiveState:
        view = state_view(spec, state)
        assert view is not None  # _job refused non-adaptive jobs
        return view

    def state(self, who: Identity | JobIdentity, name: str, user: str | None = None) -> AdaptiveState:
        with self.ctx.session() as s:
            row, spec = self._job(s, who, name, user)
            return self._view(spec, row.adaptive)

    def report(
        self, who: Identity | JobIdentity, name: str, body: AdaptiveReport, user: str | None = None
    ) -> AdaptiveState:
        """Store the report (at most one per job per ``REPORT_INTERVAL_S``); the assignment now."""
        with self.ctx.session() as s:
            row, spec = self._job(s, who, name, user)
            state = row.adaptive
            if state is None:  # pragma: no cover - made at submit for every adaptive job
                state = row.adaptive = AdaptiveRow(batch_size=spec.batch.size if spec.batch else 1)
                s.flush()
            now = self.ctx.clock.now()
            if not self._claim(s, row.id, now):
                s.rollback()
                return self._view(spec, row.adaptive)
            s.refresh(state)
            if body.grad_sqr is not None and body.grad_var is not None:  # both, or neither is used
                state.grad_sqr = _ema(state.grad_sqr, body.grad_sqr)
                state.grad_var = _ema(state.grad_var, body.grad_var)
            state.lr_gain = body.lr_gain if body.lr_gain is not None else state.lr_gain
            state.reports += 1
            trainers = _trainers(row)
            if body.replicas == trainers:
                state.step_time_s = body.step_time_s
                s.add(
                    AdaptiveReportRow(
                        job_id=row.id, time=now, replicas=body.replicas,
                        nodes=_trainer_nodes(row, body.replicas), local_bsz=body.local_bsz,
                        step_time_s=body.step_time_s,
                    )
                )  # fmt: skip
                s.flush()
                self._prune(s, row.id)
            else:
                log.info("job %s/%s reports %d replicas on %d trainers: its step time is not fitted",
                         row.user, row.name, body.replicas, trainers)  # fmt: skip
            s.commit()
            return self._view(spec, state)

    @staticmethod
    def _claim(s: Session, job_id: int, now: float) -> bool:
        """Take this interval's report slot: True for the first report in ``REPORT_INTERVAL_S``."""
        done = s.execute(
            update(AdaptiveRow)
            .where(
                AdaptiveRow.job_id == job_id,
                (AdaptiveRow.last_report_at.is_(None))
                | (AdaptiveRow.last_report_at <= now - REPORT_INTERVAL_S),
            )
            .values(last_report_at=now)
            .execution_options(synchronize_session=False)
        )
        return bool(done.rowcount)  # type: ignore[attr-defined]

    @staticmethod
    def _prune(s: Session, job_id: int) -> None:
        """Keep the job's last ``KEEP_REPORTS`` reports."""
        ids = s.scalars(
            select(AdaptiveReportRow.id)
            .where(AdaptiveReportRow.job_id == job_id)
            .order_by(AdaptiveReportRow.id.desc())
            .offset(KEEP_REPORTS)
            .limit(1)
        ).all()
        if ids:
            s.execute(
                delete(AdaptiveReportRow).where(
                    AdaptiveReportRow.job_id == job_id, AdaptiveReportRow.id <= ids[0]
                )
            )
