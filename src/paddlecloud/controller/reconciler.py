"""The reconcile loop: observe started jobs, decide phases, schedule queued jobs, apply the plan.

One cycle (``tick``), numbered, under the context mutex:

  1. sync every Starting/Running job with the backend; write worker states and backend events;
     decide the phase with ``core.phases.next_phase`` (a terminal phase waits until the backend
     reports every process ended);
  2. build a frozen ``scheduler.Snapshot`` (nodes, what admitted jobs hold, the queue, the clock);
  3. ask the policy for a ``Plan``;
  4. apply it: admitted jobs become Starting (worker rows, event) and are committed *before* the
     backend is asked to start them; waiting jobs get their reason and message (an event only when
     the reason changes).

The loop runs in a thread, every ``tick_seconds`` or at once when something calls ``Context.wake``.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from paddlecloud.backends.base import JobStatus
from paddlecloud.controller.context import Context, job_key
from paddlecloud.controller.quotas import compute_quotas
from paddlecloud.controller.records import job_request, record_workers, running_request
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, RoleCounts, WorkerState, next_phase
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import Admit, NodeState, Policy, Snapshot, Wait
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = ["Reconciler"]

log = logging.getLogger("paddlecloud.reconciler")

ACTIVE = (JobPhase.STARTING, JobPhase.RUNNING)


def _counts(status: JobStatus, role: str, desired: int) -> RoleCounts:
    ws = [w for w in status.workers if w.role == role]
    return RoleCounts(
        desired=desired,
        running=sum(w.state == WorkerState.RUNNING for w in ws),
        succeeded=sum(w.state == WorkerState.SUCCEEDED for w in ws),
        failed=sum(w.state in (WorkerState.FAILED, WorkerState.LOST) for w in ws),
    )


class Reconciler:
    def __init__(self, ctx: Context, policy: Policy) -> None:
        self.ctx = ctx
        self.policy = policy
        self.cycle = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.adopt_all()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.wake()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ctx.wake_event.clear()
            try:
                self.tick()
            except Exception:  # keep the loop alive; the failure is logged with its traceback
                log.exception("reconcile cycle %d failed", self.cycle)
            self.ctx.wake_event.wait(self.ctx.config.tick_seconds)

    def adopt_all(self) -> None:
        """After a restart: hand every started job back to the backend; finish interrupted kills."""
        with self.ctx.mutex, self.ctx.session() as s:
            rows = s.scalars(
                select(JobRow)
                .where(JobRow.phase.in_((*ACTIVE, JobPhase.QUEUED)))
                .options(selectinload(JobRow.workers), selectinload(JobRow.events))
            ).all()
            for row in rows:
                if row.phase != JobPhase.QUEUED:
                    self.ctx.backend.adopt(self.ctx.launch(row))
                    self.ctx.event(row, "Normal", "Adopted", "server restarted; job re-adopted")
                if row.stop_requested:  # the server stopped in the middle of a kill: finish it
                    self._finish_kill(row)
                s.commit()

    def _finish_kill(self, row: JobRow) -> None:
        key = job_key(row.user, row.name)
        if row.phase != JobPhase.QUEUED:
            self.ctx.backend.stop(key, self.ctx.config.kill_grace)
            record_workers(self.ctx, row, self.ctx.backend.sync(key))
        row.phase, row.reason = JobPhase.KILLED, "Killed"
        row.message = "kill completed after a server restart"
        row.finished_at = self.ctx.clock.now()
        self.ctx.event(row, "Normal", "Killed", row.message)

    # -- one cycle ------------------------------------------------------------------------------

    def tick(self) -> None:
        with self.ctx.mutex, self.ctx.session() as s:
            self.cycle += 1
            self._observe(s)
            self._schedule(s)

    def _observe(self, s: Session) -> None:
        rows = s.scalars(
            select(JobRow)
            .where(JobRow.phase.in_(ACTIVE), JobRow.stop_requested.is_(False))
            .options(selectinload(JobRow.workers), selectinload(JobRow.events))
        ).all()
        for row in rows:
            status = self.ctx.backend.sync(job_key(row.user, row.name))
            self.apply_status(row, status)
            s.commit()

    def apply_status(self, row: JobRow, status: JobStatus) -> None:
        record_workers(self.ctx, row, status)
        if row.phase == JobPhase.STARTING and status.events:  # say what the start is waiting on
            row.reason, row.message = status.events[-1].reason, status.events[-1].message
        spec = row.spec
        change = next_phase(
            JobPhase(row.phase),
            _counts(status, "pserver", int(spec["pservers"]["count"])),
            _counts(status, "trainer", int(spec["trainers"]["count"])),
            status.failure,
        )
        if change is None and status.finished and JobPhase(row.phase) not in TERMINAL_PHASES:
            change_phase, reason, message = JobPhase.FAILED, "Ended", "every process ended without success"
        elif change is None:
            return
        else:
            change_phase, reason, message = change.phase, change.reason, change.message
        if change_phase in TERMINAL_PHASES and not status.finished:
            if row.reason != "Stopping":  # outcome known, remaining processes still being stopped
                row.reason, row.message = "Stopping", f"{message}; stopping the remaining workers"
            return
        row.phase, row.reason, row.message = change_phase, reason, message
        if change_phase in TERMINAL_PHASES:
            row.finished_at = self.ctx.clock.now()
        self.ctx.event(row, "Warning" if change_phase == JobPhase.FAILED else "Normal", reason, message)

    def _schedule(self, s: Session) -> None:
        queued = s.scalars(
            select(JobRow).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
        ).all()
        if not queued:
            return
        active = s.scalars(select(JobRow).where(JobRow.phase.in_(ACTIVE))).all()
        snap = Snapshot(
            cycle=self.cycle,
            now=self.ctx.clock.now(),
            nodes=self._nodes(s),
            queue=tuple(map(job_request, queued)),
            running=tuple(running_request(r) for r in active),
            quotas=compute_quotas(s),
        )
        plan = self.policy.schedule(snap)
        rows = {job_key(r.user, r.name): r for r in queued}
        for wait in plan.wait:
            self._wait(rows[wait.job], wait)
        s.commit()
        for admit in plan.admit:
            self._admit(s, rows[admit.job], admit)

    def _nodes(self, s: Session) -> tuple[NodeState, ...]:
        used: dict[str, Resources] = {}
        gpus_used: dict[str, set[int]] = {}
        active = s.scalars(select(JobRow).where(JobRow.phase.in_(ACTIVE))).all()
        for row in active:
            req = job_request(row)
            for p in row.placement or []:
                need = req.pserver if p["role"] == "pserver" else req.trainer
                used[p["node"]] = used.get(p["node"], Resources()) + need
                gpus_used.setdefault(p["node"], set()).update(p.get("gpus", []))
        return tuple(
            NodeState(
                name=n.name,
                capacity=n.capacity,
                allocated=used.get(n.name, Resources()),
                free_gpus=tuple(g for g in n.gpus if g not in gpus_used.get(n.name, set())),
            )
            for n in self.ctx.backend.nodes()
        )

    def _wait(self, row: JobRow, wait: Wait) -> None:
        if row.reason != wait.reason:
            self.ctx.event(row, "Normal", str(wait.reason), wait.message)
        row.reason, row.message = str(wait.reason), wait.message

    def _admit(self, s: Session, row: JobRow, admit: Admit) -> None:
        row.phase = JobPhase.STARTING
        row.reason, row.message = "Admitted", admit.message
        row.started_at = self.ctx.clock.now()
        row.placement = [
            {"role": p.role, "index": p.index, "node": p.node, "gpus": list(p.gpus)} for p in admit.placement
        ]
        for p in admit.placement:
            row.workers.append(
                WorkerRow(
                    name=f"{p.role}-{p.index}",
                    role=p.role,
                    index=p.index,
                    state=WorkerState.PENDING,
                    node=p.node,
                )
            )
        self.ctx.event(row, "Normal", "Admitted", admit.message)
        s.commit()  # the decision is durable before any process starts
        try:
            self.ctx.backend.start(self.ctx.launch(row))
        except Exception as exc:  # the backend could not even begin: the job fails with its reason
            log.exception("starting %s failed", admit.job)
            row.phase, row.reason = JobPhase.FAILED, "StartFailed"
            row.message = f"the backend could not start the job: {exc}"
            row.finished_at = self.ctx.clock.now()
            self.ctx.event(row, "Warning", "StartFailed", row.message)
            s.commit()
