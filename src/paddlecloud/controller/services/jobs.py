"""Job operations behind the REST routes: submit, list, get, kill, delete, workers, logs, quota,
and a job's trainers over time (``controller.model.history``).

Every method takes the caller's :class:`Identity`; users see only their own jobs. Admins act on
another user's jobs with the ``user`` argument (anyone may name themselves; a non-admin naming someone
else gets ``forbidden``) and list everyone's with ``all_users``. Another user's job is not found,
exactly as a job that does not exist. Writes that race with the reconcile loop (kill, delete) happen
under the context mutex; a submit only inserts a new Queued job, which the loop reads at its next
cycle, so it takes no mutex. Every write is committed before the method returns, so an acknowledged
submit is durable.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, InvalidInput, NotFound
from paddlecloud.api.files import FileInfo
from paddlecloud.api.history import TrainerHistory
from paddlecloud.api.models import (
    EstimateView,
    JobDetail,
    JobList,
    JobSpec,
    JobView,
    QuotaView,
    ResourceView,
    WorkerView,
)
from paddlecloud.backends.base import Capability, LogRequest
from paddlecloud.controller.model.batches import new_state
from paddlecloud.controller.model.capacity import check_capacity
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.forecast_board import FORECAST_TABLE
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.job_rows import job_request, record_workers
from paddlecloud.controller.model.jobtokens import JobIdentity
from paddlecloud.controller.model.limits import compute_quota
from paddlecloud.controller.model.readcache import ReadCache
from paddlecloud.controller.model.sampleset_refs import check_job_sampleset
from paddlecloud.controller.model.views import RoleTally, detail_view, job_view, worker_view
from paddlecloud.controller.services.files import FileService
from paddlecloud.controller.services.packages import check_entry, inspect_package
from paddlecloud.controller.services.tasks import add_queue, plan_tasks
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, JobReason
from paddlecloud.core.quantity import format_cpu, format_memory
from paddlecloud.core.resources import Resources
from paddlecloud.store.tables import JobRow, UserRow, WorkerRow

__all__ = ["JobListQuery", "JobService"]

log = logging.getLogger("paddlecloud.controller")

#: phases of jobs that have processes (or are stopping them) and hold resources
ACTIVE = (JobPhase.STARTING, JobPhase.RUNNING, JobPhase.PREEMPTING)

#: seconds a rendered job list is served at most without building it again. Every write of this
#: server process is seen at once (``controller.model.readcache``); the age only bounds how long a write
#: made by another process on the same database could go unseen, and one server per database is the
#: supported setup, so it is long: a rebuild under load competes for the GIL with the requests
_LIST_CACHE_AGE = 30.0


@dataclass(frozen=True)
class JobListQuery:
    """What ``GET /jobs`` asks for: finished jobs too (``all_jobs``), every user's (``all_users``,
    admins), or one named user's (``user``, admins; anyone may name themselves)."""

    all_jobs: bool = False
    all_users: bool = False
    user: str | None = None


def _job_not_found(name: str) -> NotFound:
    return NotFound(f"job {name!r} not found (see: paddlecloud get jobs -a)", code=ErrorCode.JOB_NOT_FOUND)


def _limit_view(r: Resources) -> ResourceView:
    """A limit for display: an unlimited dimension shows as 'unlimited'."""
    huge = 1 << 60
    return ResourceView(
        cpu=format_cpu(r.cpu_m) if r.cpu_m < huge else "unlimited",
        memory=format_memory(r.memory) if r.memory < huge else "unlimited",
        gpu=r.gpu if r.gpu < huge else -1,
    )


def _resources_view(r: Resources) -> ResourceView:
    return ResourceView(cpu=format_cpu(r.cpu_m), memory=format_memory(r.memory), gpu=r.gpu)


class JobService:
    def __init__(self, ctx: Context, files: FileService) -> None:
        self.ctx = ctx
        self.files = files
        #: (owner or None for everyone, all_jobs) -> the JSON of the JobList
        self._lists: ReadCache[tuple[str | None, bool], bytes] = ReadCache(
            ctx.db.changes, ("jobs", "workers", FORECAST_TABLE), max_age=_LIST_CACHE_AGE
        )

    # -- queries --------------------------------------------------------------------------------

    @staticmethod
    def _owner(who: Identity, user: str | None) -> str:
        """Whose jobs a request is about: the caller's own, or (admins only) ``user``'s."""
        if not user or user == who.name:
            return who.name
        require_admin(who, "acting on another user's jobs")
        return user

    def _row(
        self, s: Session, who: Identity, name: str, user: str | None = None, *, events: bool = True
    ) -> JobRow:
        """The job with its workers (and its events unless ``events`` is False: the readers that
        need only the workers, e.g. every poll of a log, skip that query)."""
        owner = self._owner(who, user)
        loads = [selectinload(JobRow.workers), *([selectinload(JobRow.events)] if events else [])]
        row = s.scalar(select(JobRow).where(JobRow.user == owner, JobRow.name == name).options(*loads))
        if row is None:
            raise _job_not_found(name)
        return row

    def trainers_history(self, who: Identity, name: str, user: str | None = None) -> TrainerHistory:
        """The job's trainer count over time as the reconciler observed it (``History``); another
        user's job is not found."""
        owner = self._owner(who, user)
        with self.ctx.session() as s:
            job_id = s.scalar(select(JobRow.id).where(JobRow.user == owner, JobRow.name == name))
        if job_id is None:
            raise _job_not_found(name)
        points = self.ctx.history.job_trainers_history(job_key(owner, name), job_id)
        return TrainerHistory(user=owner, job=name, items=points)

    def _list_key(self, who: Identity, q: JobListQuery) -> tuple[str | None, bool]:
        """Whose jobs ``q`` lists (None: everyone's), after the permission checks."""
        if q.all_users:
            require_admin(who, "listing every user's jobs")
            if q.user:
                raise InvalidInput("give either user or all_users, not both", code=ErrorCode.INVALID_REQUEST)
            return None, q.all_jobs
        return self._owner(who, q.user), q.all_jobs

    def cached_list(self, who: Identity, q: JobListQuery) -> bytes | None:
        """The JSON of :meth:`list_json` from memory (no database), or None when it must be built."""
        return self._lists.get(self._list_key(who, q))

    def list_json(self, who: Identity, q: JobListQuery) -> bytes:
        """The ``JobList`` JSON of ``GET /jobs``, built from the database and kept for the next
        caller until a job or worker row changes."""
        key = self._list_key(who, q)
        return self._lists.get_or_build(
            key, lambda: JobList(items=self._list(*key)).model_dump_json().encode()
        )

    def list_jobs(
        self, who: Identity, *, all_jobs: bool, all_users: bool = False, user: str | None = None
    ) -> list[JobView]:
        return self._list(*self._list_key(who, JobListQuery(all_jobs, all_users, user)))

    def _list(self, owner: str | None, all_jobs: bool) -> list[JobView]:
        with self.ctx.session() as s:
            q = select(JobRow).order_by(JobRow.submitted_at, JobRow.id)
            if owner is not None:
                q = q.where(JobRow.user == owner)
            if not all_jobs:
                q = q.where(JobRow.phase.not_in(list(TERMINAL_PHASES)))
            return self._views(s, s.scalars(q).all())

    def _estimate(self, row: JobRow) -> EstimateView | None:
        board = self.ctx.forecasts
        return board.view(job_key(row.user, row.name)) if board is not None else None

    def _views(self, s: Session, rows: Sequence[JobRow]) -> list[JobView]:
        """``rows`` as list entries, their workers counted by role and state in one query."""
        counts: dict[int, RoleTally] = {}
        if rows:
            tq = (
                select(WorkerRow.job_id, WorkerRow.role, WorkerRow.state, func.count())
                .where(WorkerRow.job_id.in_([r.id for r in rows]))
                .group_by(WorkerRow.job_id, WorkerRow.role, WorkerRow.state)
            )
            for job_id, role, state, n in s.execute(tq):
                counts.setdefault(job_id, {})[(role, state)] = n
        return [job_view(r, counts.get(r.id, {}), self._estimate(r)) for r in rows]

    def finished(
        self, who: Identity, q: JobListQuery, phases: Collection[JobPhase], limit: int
    ) -> tuple[list[JobView], int]:
        """The newest ``limit`` finished jobs of ``q`` (in ``phases``, a subset of the terminal
        ones), most recently finished first, and how many there are: one page of a long history
        without reading it all (the web console's Jobs page)."""
        owner, _ = self._list_key(who, q)
        wanted = [p for p in phases if p in TERMINAL_PHASES]
        with self.ctx.session() as s:
            where = [JobRow.phase.in_(wanted)] + ([JobRow.user == owner] if owner is not None else [])
            total = s.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0
            page = select(JobRow).where(*where).order_by(JobRow.finished_at.desc(), JobRow.id.desc())
            return self._views(s, s.scalars(page.limit(limit)).all()), int(total)

    def get(self, who: Identity, name: str, user: str | None = None) -> JobDetail:
        with self.ctx.session() as s:
            row = self._row(s, who, name, user)
            return detail_view(row, estimate=self._estimate(row))

    def workers(self, who: Identity, name: str, user: str | None = None) -> list[WorkerView]:
        with self.ctx.session() as s:
            return [worker_view(w) for w in self._row(s, who, name, user, events=False).workers]

    def package_reader(self, job: JobIdentity, path: str) -> Identity:
        """Whom a job token reads ``path`` as: its job's owner, and only its job's own package (what
        the init container of a Kubernetes pod fetches, docs/kubernetes.md)."""
        with self.ctx.session() as s:
            package = s.scalar(select(JobRow.package_id).where(JobRow.id == job.job_id))
        if package is None or path != package:
            raise Forbidden(
                f"a job token reads only its own job's package ({package}), not {path!r}",
                code=ErrorCode.FORBIDDEN,
            )
        return Identity(job.user, is_admin=False)

    def quota(self, who: Identity) -> QuotaView:
        with self.ctx.session() as s:
            rows = s.scalars(
                select(JobRow).where(JobRow.user == who.name, JobRow.phase.not_in(list(TERMINAL_PHASES)))
            ).all()
            used = Resources()
            running = queued = 0
            for row in rows:
                if row.phase == JobPhase.QUEUED:
                    queued += 1
                elif row.phase in ACTIVE:
                    running += 1
                    req = job_request(row, specs=self.ctx.specs, engine=self.ctx.engine_units)
                    used = used + req.pserver.times(req.pservers) + req.trainer.times(req.running)
        cluster = Resources()
        for n in self.ctx.backend.nodes():
            cluster = cluster + n.capacity
        with self.ctx.session() as s:
            user_row = s.scalar(select(UserRow).where(UserRow.name == who.name))
            limit = compute_quota(user_row) if user_row is not None else None
        return QuotaView(
            user=who.name,
            limit=_limit_view(limit) if limit is not None else None,
            used=_resources_view(used),
            cluster=_resources_view(cluster),
            jobs_running=running,
            jobs_queued=queued,
        )

    # -- commands -------------------------------------------------------------------------------

    def submit(self, who: Identity, spec: JobSpec) -> JobDetail:
        check_capacity(self.ctx, who.name, spec)
        if spec.image is not None and Capability.IMAGES not in self.ctx.backend.capabilities:
            raise Conflict(
                f"the {self.ctx.backend.name} backend cannot run jobs in container images (it does not "
                "declare images; `paddlecloud version` lists what it offers): submit without --image",
                code=ErrorCode.IMAGES_UNAVAILABLE,
            )
        if spec.sampleset is not None:  # the owner's own, or not found (never another user's)
            with self.ctx.session() as s:
                check_job_sampleset(s, self.ctx.backend, who.name, spec.sampleset)
        spec, output_dir = self._check_files(who, spec)
        tasks = plan_tasks(self.files, who, spec)
        with self.ctx.session() as s:
            now = self.ctx.clock.now()
            row = JobRow(
                user=who.name,
                name=spec.name,
                package_id=spec.package,
                framework=str(spec.framework),
                spec=spec.model_dump(mode="json"),
                priority=spec.priority,
                phase=JobPhase.QUEUED,
                reason="Queued",
                message="waiting for the next scheduling cycle",
                submitted_at=now,
                output_dir=output_dir,
                workers=[],  # known empty: building the answer needs no query for them
                adaptive=new_state(spec),  # adaptive-batch jobs: the assignment starts at its batch
            )
            self.ctx.event(row, "Normal", JobReason.SUBMITTED, f"submitted by {who.name}")
            if tasks is not None and spec.tasks is not None:
                passes = spec.tasks.num_passes
                self.ctx.event(
                    row, "Normal", "TasksPlanned", f"{len(tasks)} tasks, {passes} passes (get tasks)"
                )
            # no controller mutex: a new Queued row is only read by the next reconcile cycle, and
            # the unique (user, name) index decides between concurrent submits of one name
            s.add(row)
            try:
                s.flush()
                if tasks is not None and spec.tasks is not None:
                    add_queue(s, row.id, spec.tasks, tasks, now)
                s.commit()
            except IntegrityError:
                s.rollback()
                raise Conflict(
                    f"job {spec.name!r} already exists; pick another --name or remove the old one "
                    f"with `paddlecloud kill {spec.name} --rm`",
                    code=ErrorCode.JOB_EXISTS,
                    field="name",
                ) from None
            self.ctx.wake()
            return detail_view(row, spec)

    def _exists(self, who: Identity, path: str, field: str) -> FileInfo:
        try:
            return self.files.stat(who, path)
        except NotFound:
            raise NotFound(
                f"{field} {path} does not exist", code=ErrorCode.PATH_NOT_FOUND, field=field
            ) from None

    def _check_files(self, who: Identity, spec: JobSpec) -> tuple[JobSpec, str]:
        """Package readable, safe, small enough and holding the entry; input readable; output
        writable (created). Returns the spec with its output path filled in, and the output's local
        directory for the workers."""
        files = self.files
        info = self._exists(who, spec.package, "package")
        if info.type != "file":
            raise InvalidInput(f"package {spec.package} is a directory, not a .tar.gz archive",
                               code=ErrorCode.INVALID_PACKAGE, field="package")  # fmt: skip
        with os.fdopen(files.open_own(spec.package), "rb") as f:  # never by path: links are refused
            check_entry(spec.entry, inspect_package(f, spec.package, self.ctx.config.max_package_bytes))
        if spec.input:
            self._exists(who, spec.input, "input")
        output = spec.output or f"{self.ctx.config.job_dir(who.name, spec.name)}/output"
        files.mkdir(who, output, parents=True)
        out_local = files.local_path(files.parse(output))
        return spec.model_copy(update={"output": output}), str(out_local)

    def kill(
        self, who: Identity, name: str, grace: float | None = None, *, user: str | None = None
    ) -> JobView:
        grace = self.ctx.config.kill_grace if grace is None else grace
        if grace < 0 or grace > 3600:
            raise InvalidInput("grace must be between 0 and 3600 seconds", field="grace")
        with self.ctx.mutex, self.ctx.session() as s:
            row = self._row(s, who, name, user)
            phase = JobPhase(row.phase)
            if phase in TERMINAL_PHASES:
                raise Conflict(f"job {name!r} already {phase}", code=ErrorCode.JOB_NOT_RUNNING)
            row.stop_requested = True
            s.commit()
            started = phase in ACTIVE
        trouble = ""
        if started:  # slow part outside the mutex: the reconciler skips jobs with stop_requested
            key = job_key(row.user, row.name)
            try:
                self.ctx.backend.stop(key, grace)
                status = self.ctx.backend.sync(key)
            except Exception as exc:  # the kill still ends the job (and frees its placement)
                log.exception("killing %s: stopping it failed", key)
                started, trouble = False, f"; stopping its workers failed: {type(exc).__name__}: {exc}"
        with self.ctx.mutex, self.ctx.session() as s:
            row = self._row(s, who, name, user)
            if started:
                record_workers(self.ctx, row, status)
            self.ctx.move(row, JobPhase.KILLED, JobReason.KILLED, f"killed by {who.name}{trouble}")
            self.ctx.event(row, "Normal", JobReason.KILLED, row.message)
            s.commit()
            view = detail_view(row)
        self.ctx.wake()  # freed capacity: schedule now
        return view

    def delete(self, who: Identity, name: str, user: str | None = None) -> None:
        with self.ctx.session() as s:
            phase = JobPhase(self._row(s, who, name, user).phase)
        if phase not in TERMINAL_PHASES:
            self.kill(who, name, 0.0 if phase == JobPhase.QUEUED else None, user=user)
        with self.ctx.mutex, self.ctx.session() as s:
            row = self._row(s, who, name, user)
            package = row.package_id
            s.delete(row)
            s.commit()
            self.ctx.backend.forget(job_key(row.user, row.name))
            self.ctx.disk.forget(job_key(row.user, row.name))  # its folders went with it
            if package == f"{self.ctx.config.job_dir(row.user, row.name)}/package.tar.gz":
                self.files.discard(package)  # the copy `submit` uploaded; outputs stay

    def logs(
        self,
        who: Identity,
        name: str,
        *,
        worker: str | None,
        tail: int | None,
        follow: bool,
        previous: bool,
        user: str | None = None,
    ) -> Iterator[bytes]:
        with self.ctx.session() as s:
            row = self._row(s, who, name, user, events=False)
            names = [w.name for w in row.workers]
            key = job_key(row.user, row.name)
        if worker:
            if worker not in names and worker != "prepare":
                raise NotFound(
                    f"job {name!r} has no worker {worker!r} (workers: {', '.join(names) or 'none yet'}; "
                    "'prepare' shows the environment build)",
                    code=ErrorCode.WORKER_NOT_FOUND,
                )
            names = [worker]
        if tail is not None and tail < 0:
            raise InvalidInput("tail must be >= 0", field="tail")
        self._check_log_capabilities(follow=follow, previous=previous)
        return self.ctx.backend.read_log(
            LogRequest(key=key, workers=tuple(names), tail=tail, follow=follow, previous=previous)
        )

    def _check_log_capabilities(self, *, follow: bool, previous: bool) -> None:
        """``--previous`` and ``-f`` only where the backend declares them (422 ``not_supported``)."""
        backend = self.ctx.backend
        for asked, capability, flag in (
            (previous, Capability.LOGS_PREVIOUS, "previous"),
            (follow, Capability.LOGS_FOLLOW, "follow"),
        ):
            if asked and capability not in backend.capabilities:
                what = "keep the logs of earlier runs" if flag == "previous" else "follow logs"
                raise InvalidInput(
                    f"the {backend.name} backend does not {what} (no {capability} capability): "
                    f"ask without --{flag}",
                    code=ErrorCode.NOT_SUPPORTED,
                    field=flag,
                )
