"""The data task master behind ``/api/v1/jobs/{name}/tasks``: one durable task queue per job.

    submit ──plan_tasks (input's files or the spec's items; core.tasks.split_files)──▶
             add_queue: task_queues row + one tasks row per task, in the submit's transaction
    reconciler ──release_ended (worker runs that ended; ``model.task_queue``)──▶ their leases
             abandoned at once
    trainer (job token) ──lease──▶ TaskService.lease: a run already seen ended gets lease_lost;
             reclaim expired leases, pass_step →
             grant the first todo task | wait (retry_after) | next pass | finished
             ──done / fail / renew (lease id)──▶ core.tasks.complete / fail / renew
    owner (user token) ──GET tasks──▶ TaskService.status: summary (counts) + one page of tasks

Every decision is a pure function of ``core.tasks``; this module loads rows, asks, writes them
back and commits before it answers, so an acknowledged ``done`` survives a server restart and a
lease survives it too (it simply expires if its trainer is gone). Time is ``ctx.clock``. Leases
granted and how they end (done, failed, expired, released, lost) are counted once committed
(``paddlecloud_task_leases_total``).

Concurrency: the operations of one job (lease, done, fail, renew) are serialised per job, those of
different jobs run concurrently. In the process by a lock per job (:class:`JobLocks`); across server
processes sharing one PostgreSQL database by the row lock of the job's ``task_queues`` row, taken
first in every operation (``SELECT ... FOR UPDATE``; it is held until the commit, so two servers
never hand one todo task out twice, nor start a pass twice). SQLite has no row locks and serves one
server process. ``release_ended`` (the reconciler) writes with guarded UPDATEs instead (the lease it
saw must still be the task's). None of them takes the reconciler's mutex.

Who may call: a job token only for its own job (``forbidden`` otherwise); a user token for the
user's own jobs, admins for anyone's (``?user=``); another user's job is ``job_not_found``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, InvalidInput, NotFound
from paddlecloud.api.models import JobSpec
from paddlecloud.api.tasks import (
    MAX_TASKS,
    PAGE,
    AckRequest,
    LeaseRequest,
    TaskLease,
    TaskList,
    TaskSpec,
    TaskSummary,
    TaskView,
)
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.jobtokens import JobIdentity, authenticate_job
from paddlecloud.controller.model.task_queue import limits_of, slot_of, store_slot
from paddlecloud.controller.model.views import ts
from paddlecloud.controller.services.files import FileService
from paddlecloud.core import tasks as logic
from paddlecloud.core.phases import ENDED_WORKER_STATES
from paddlecloud.core.quantity import parse_memory
from paddlecloud.core.tasks import LeaseError, PassStep, TaskDef, TaskKind, TaskSlot, TaskState
from paddlecloud.store.tables import JobRow, TaskQueueRow, TaskRow, WorkerRow

__all__ = ["Caller", "JobLocks", "TaskPage", "TaskService", "add_queue", "plan_tasks"]

#: who calls a task route: a user (owner or admin) or a job's own workers
Caller = Identity | JobIdentity


@dataclass(frozen=True)
class TaskPage:
    """Which tasks a status lists: at most ``limit`` (0: the summary only), in index order, with an
    index above ``after`` (None: from the first), only those in ``state`` if given."""

    limit: int = PAGE
    after: int | None = None
    state: str | None = None


# -- at submit ------------------------------------------------------------------------------------


def plan_tasks(files: FileService, who: Identity, spec: JobSpec) -> list[TaskDef] | None:
    """The job's tasks (None: the job has no task master). Bad specs raise ``InvalidInput``."""
    ts_ = spec.tasks
    if ts_ is None:
        return None
    if ts_.items is not None:
        return logic.item_tasks(ts_.items)
    if not spec.input:
        raise InvalidInput("tasks from the input need an input (--input)", field="tasks")
    top = spec.input.rstrip("/")
    info = files.stat(who, top)
    if info.type == "file":  # the input is one file: its tasks' path is "" (the input itself)
        found = [("", info.size)]
    else:
        listing = files.listdir(who, top, recursive=True)
        found = [(f.path[len(top) + 1 :], f.size) for f in listing if f.type == "file"]
    chunk = parse_memory(ts_.chunk_size) if ts_.chunk_size else None
    defs = logic.split_files(found, chunk, ts_.pattern)
    if not defs:
        raise InvalidInput(
            f"input {spec.input} has no file matching {ts_.pattern!r}: no tasks", field="tasks"
        )
    if len(defs) > MAX_TASKS:
        raise InvalidInput(
            f"the input makes {len(defs)} tasks, more than {MAX_TASKS}: use a larger chunk_size",
            field="tasks",
        )
    return defs


def add_queue(s: Session, job_id: int, spec: TaskSpec, defs: list[TaskDef], now: float) -> None:
    """The job's task queue and its tasks, all todo, added to the caller's transaction."""
    q = TaskQueueRow(
        job_id=job_id, pass_no=0, num_passes=spec.num_passes, lease_seconds=spec.lease_timeout,
        max_failures=spec.max_failures, created_at=now,
    )  # fmt: skip
    s.add(q)
    s.flush()
    s.execute(
        insert(TaskRow),
        [
            {
                "queue_id": q.id,
                "index": i,
                "kind": str(d.kind),
                "path": d.path,
                "offset": d.offset,
                "length": d.length,
                "state": str(TaskState.TODO),
                "lease": "",
                "holder": "",
                "failures": 0,
                "leases": 0,
                "done_passes": 0,
                "done_lease": "",
                "error": "",
            }
            for i, d in enumerate(defs)
        ],
    )


def _view(q: TaskQueueRow, t: TaskRow) -> TaskView:
    return TaskView(
        index=t.index, kind=TaskKind(t.kind), path=t.path, offset=t.offset, length=t.length,
        state=TaskState(t.state), pass_no=q.pass_no, holder=t.holder, expires_at=ts(t.lease_expires),
        failures=t.failures, leases=t.leases, done_passes=t.done_passes, error=t.error,
    )  # fmt: skip


def _counts(s: Session, q: TaskQueueRow) -> Counter[TaskState]:
    rows = s.execute(
        select(TaskRow.state, func.count()).where(TaskRow.queue_id == q.id).group_by(TaskRow.state)
    )
    return Counter({TaskState(state): n for state, n in rows})


def _lost(exc: LeaseError) -> Conflict:
    return Conflict(str(exc), code=ErrorCode.LEASE_LOST)


class JobLocks:
    """One lock per job id, made on first use and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, job_id: int) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(job_id, (threading.Lock(), 0))
            self._locks[job_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users = self._locks[job_id][1] - 1
                if users:
                    self._locks[job_id] = (lock, users)
                else:
                    del self._locks[job_id]

    def __len__(self) -> int:
        return len(self._locks)


class TaskService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._locks = JobLocks()

    def authenticate(self, token: str) -> JobIdentity:
        with self.ctx.session() as s:
            return authenticate_job(s, token)

    # -- whose queue ------------------------------------------------------------------------------

    @staticmethod
    def _job_id(s: Session, who: Caller, name: str, user: str | None) -> int:
        if isinstance(who, JobIdentity):
            if name != who.name or (user and user != who.user):
                raise Forbidden(
                    f"a job token acts only on its own job's tasks ({who.name!r}), not {name!r}",
                    code=ErrorCode.FORBIDDEN,
                )
            return who.job_id
        owner = who.name
        if user and user != who.name:
            require_admin(who, "acting on another user's jobs")
            owner = user
        job_id = s.scalar(select(JobRow.id).where(JobRow.user == owner, JobRow.name == name))
        if job_id is None:
            raise NotFound(
                f"job {name!r} not found (see: paddlecloud get jobs -a)", code=ErrorCode.JOB_NOT_FOUND
            )
        return job_id

    def _queue(self, s: Session, who: Caller, name: str, user: str | None) -> TaskQueueRow:
        return self._queue_of(s, self._job_id(s, who, name, user), name)

    @staticmethod
    def _queue_of(s: Session, job_id: int, name: str, *, lock: bool = False) -> TaskQueueRow:
        """The job's queue row; ``lock``: row-locked until the commit (PostgreSQL: other servers'
        operations on this job wait; SQLite ignores it)."""
        query = select(TaskQueueRow).where(TaskQueueRow.job_id == job_id)
        if lock:
            query = query.with_for_update()
        q = s.scalar(query)
        if q is None:
            raise NotFound(
                f"job {name!r} has no task master (submit it with tasks: --tasks-from-input or --task)",
                code=ErrorCode.NO_TASK_MASTER,
            )
        return q

    @staticmethod
    def _task(s: Session, q: TaskQueueRow, index: int) -> TaskRow:
        t = s.scalar(select(TaskRow).where(TaskRow.queue_id == q.id, TaskRow.index == index))
        if t is None:
            raise NotFound(f"no task {index} in this job", code=ErrorCode.TASK_NOT_FOUND)
        return t

    # -- queries ----------------------------------------------------------------------------------

    def status(
        self, who: Caller, name: str, user: str | None = None, page: TaskPage | None = None
    ) -> TaskList:
        """The summary and one page of tasks: at most ``page.limit`` with an index above ``page.after``
        (only those in ``page.state`` if given); ``next_after`` says where the next page starts."""
        page = page or TaskPage()
        with self.ctx.session() as s:
            q = self._queue(s, who, name, user)
            query = select(TaskRow).where(TaskRow.queue_id == q.id).order_by(TaskRow.index)
            if page.state:
                query = query.where(TaskRow.state == page.state)
            if page.after is not None:
                query = query.where(TaskRow.index > page.after)
            rows = list(s.scalars(query.limit(page.limit + 1)))  # one more: is there a next page?
            items = [_view(q, t) for t in rows[: page.limit]]
            more = len(rows) > page.limit and bool(items)
            return TaskList(
                summary=self._summary(s, q), items=items, next_after=items[-1].index if more else None
            )

    def _summary(self, s: Session, q: TaskQueueRow) -> TaskSummary:
        c = _counts(s, q)
        ended = logic.pass_step(c, q.pass_no, q.num_passes) == PassStep.FINISHED
        return TaskSummary(
            total=sum(c.values()), todo=c[TaskState.TODO], leased=c[TaskState.LEASED], done=c[TaskState.DONE],
            failed=c[TaskState.FAILED], pass_no=q.pass_no, num_passes=q.num_passes,
            finished=q.finished_at is not None or ended, lease_timeout=q.lease_seconds,
            max_failures=q.max_failures,
        )  # fmt: skip

    # -- trainers ---------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, who: Caller, name: str, user: str | None) -> Iterator[tuple[Session, TaskQueueRow]]:
        """A session and the job's queue row, with the job's operations serialised (module doc)."""
        with self.ctx.session() as s:
            job_id = self._job_id(s, who, name, user)
            with self._locks.hold(job_id):
                yield s, self._queue_of(s, job_id, name, lock=True)

    def lease(self, who: Caller, name: str, req: LeaseRequest, user: str | None = None) -> TaskLease:
        """Hand out the first todo task of the current pass (or say wait / finished)."""
        with self._locked(who, name, user) as (s, q):
            again = s.scalar(
                select(TaskRow).where(
                    TaskRow.queue_id == q.id, TaskRow.state == TaskState.LEASED, TaskRow.lease == req.lease
                )
            )
            if again is not None:  # a retried request: the same answer
                return self._leased(q, again)
            with self._counting_lost():
                self._refuse_ended_run(s, q.job_id, req)
            now = self.ctx.clock.now()
            expired = self._reclaim(s, q, now)
            answer = self._step(s, q, req, now)
            s.commit()
            self.ctx.metrics.lease("expired", expired)
            self.ctx.metrics.lease("granted", int(answer.status == "leased"))
            return answer

    @contextmanager
    def _counting_lost(self) -> Iterator[None]:
        """Count a ``lease_lost`` refusal raised inside (and let it through)."""
        try:
            yield
        except Conflict as exc:
            if exc.code == ErrorCode.LEASE_LOST:
                self.ctx.metrics.lease("lost")
            raise

    @staticmethod
    def _refuse_ended_run(s: Session, job_id: int, req: LeaseRequest) -> None:
        """A run the platform has already seen end (its worker is on a later run, or the run ended)
        gets no task: ``release_ended`` ran for it already and would hand the task on only in its
        next cycle. A request that was on its way when the trainer was killed ends here."""
        if not req.worker:
            return
        w = s.scalar(select(WorkerRow).where(WorkerRow.job_id == job_id, WorkerRow.name == req.worker))
        holder = logic.holder_name(req.worker, req.run)
        if w is not None and logic.holder_gone(
            holder, {w.name: (w.restarts, w.state in ENDED_WORKER_STATES)}
        ):
            raise Conflict(
                f"{holder} has ended (the platform runs {w.name} as run {w.restarts}, {w.state}): "
                "it is given no task",
                code=ErrorCode.LEASE_LOST,
            )

    def _step(self, s: Session, q: TaskQueueRow, req: LeaseRequest, now: float) -> TaskLease:
        while True:  # at most num_passes rounds: every round returns or starts the next pass
            step = logic.pass_step(_counts(s, q), q.pass_no, q.num_passes)
            if step == PassStep.LEASE:
                t = s.scalars(
                    select(TaskRow)
                    .where(TaskRow.queue_id == q.id, TaskRow.state == TaskState.TODO)
                    .order_by(TaskRow.index)
                    .limit(1)
                ).one()
                holder = logic.holder_name(req.worker, req.run)
                store_slot(t, logic.grant(slot_of(t), req.lease, holder, now, limits_of(q)))
                t.leases += 1
                return self._leased(q, t)
            if step == PassStep.WAIT:
                expiries = s.scalars(
                    select(TaskRow.lease_expires).where(
                        TaskRow.queue_id == q.id, TaskRow.state == TaskState.LEASED
                    )
                )
                return self._answer(q, "wait", retry_after=logic.retry_after(expiries, now))
            if step == PassStep.NEXT_PASS:
                self._next_pass(s, q)
                continue
            if q.finished_at is None:
                q.finished_at = now
            return self._answer(q, "finished")

    @staticmethod
    def _reclaim(s: Session, q: TaskQueueRow, now: float) -> int:
        """Expired leases back to todo (or failed at the limit), counted as failures; how many."""
        stale = s.scalars(
            select(TaskRow).where(
                TaskRow.queue_id == q.id, TaskRow.state == TaskState.LEASED, TaskRow.lease_expires <= now
            )
        ).all()
        for t in stale:
            store_slot(t, logic.reclaim(slot_of(t), now, limits_of(q)))
        return len(stale)

    @staticmethod
    def _next_pass(s: Session, q: TaskQueueRow) -> None:
        fresh = logic.next_pass(TaskSlot())  # done_lease is kept per row: not in the bulk update
        s.execute(
            update(TaskRow)
            .where(TaskRow.queue_id == q.id)
            .values(
                state=str(fresh.state),
                lease=fresh.lease,
                holder=fresh.holder,
                lease_expires=fresh.expires,
                failures=fresh.failures,
                error=fresh.error,
            )
        )
        q.pass_no += 1
        s.flush()

    @staticmethod
    def _answer(q: TaskQueueRow, status: Literal["wait", "finished"], retry_after: float = 0.0) -> TaskLease:
        return TaskLease(
            status=status, pass_no=q.pass_no, num_passes=q.num_passes, lease_seconds=q.lease_seconds,
            retry_after=retry_after,
        )  # fmt: skip

    @staticmethod
    def _leased(q: TaskQueueRow, t: TaskRow) -> TaskLease:
        return TaskLease(
            status="leased", task=_view(q, t), lease=t.lease, lease_seconds=q.lease_seconds,
            pass_no=q.pass_no, num_passes=q.num_passes,
        )  # fmt: skip

    def done(self, who: Caller, name: str, index: int, req: AckRequest, user: str | None = None) -> TaskView:
        """Acknowledge a task done (idempotent for the lease that did it)."""
        with self._locked(who, name, user) as (s, q), self._counting_lost():
            t = self._task(s, q, index)
            try:
                slot, new = logic.complete(slot_of(t), req.lease)
            except LeaseError as exc:
                raise _lost(exc) from None
            if new:
                store_slot(t, slot)
                t.done_passes += 1
                s.commit()
                self.ctx.metrics.lease("done")
            return _view(q, t)

    def fail(self, who: Caller, name: str, index: int, req: AckRequest, user: str | None = None) -> TaskView:
        """The holder gives the task back as failed: handed out again, or failed at the limit."""
        with self._locked(who, name, user) as (s, q), self._counting_lost():
            t = self._task(s, q, index)
            try:
                store_slot(t, logic.fail(slot_of(t), req.lease, limits_of(q), req.error))
            except LeaseError as exc:
                raise _lost(exc) from None
            s.commit()
            self.ctx.metrics.lease("failed")
            return _view(q, t)

    def renew(self, who: Caller, name: str, index: int, req: AckRequest, user: str | None = None) -> TaskView:
        """Extend the holder's lease by the queue's lease time from now."""
        with self._locked(who, name, user) as (s, q), self._counting_lost():
            t = self._task(s, q, index)
            try:
                store_slot(t, logic.renew(slot_of(t), req.lease, self.ctx.clock.now(), limits_of(q)))
            except LeaseError as exc:
                raise _lost(exc) from None
            s.commit()
            return _view(q, t)
