"""SampleSets: requests (create, list, get, SampleJobs, delete) and the lifecycle loop.

    route ──▶ SampleSetService.create: capability, name, source (a PFS folder the owner may read),
              cache size, nodes, quota (the projected cache) ──▶ INSERT samplesets (Pending) +
              sample_jobs [sync, warmup] ──▶ wake the loop
    SampleSetLoop.tick, per SampleSet (its own thread, every ``interval_s`` or when woken):
      deleting        ──▶ backend.delete(ref) ──▶ rows dropped
      not ensured yet ──▶ backend.ensure(ref)  (SampleSetsUnavailable: Failed, jobs failed with it)
      SampleJobs, one at a time in id order: Pending ──start_task──▶ Running ──task_status──▶
                                             Succeeded | Failed (message)
      status (files, bytes, per-node caches) at most every ``refresh_s``, and after each job
      phase = derive_phase(jobs): Syncing while a sync or warmup runs; Ready once the last sync
              succeeded; Failed when it failed; Pending before any sync ended

Tenancy: every lookup is by (owner, name), so another user's SampleSet is not found (404
``sampleset_not_found``), never forbidden; admins list everyone's with ``all_users``. The cached
bytes count against the owner's storage quota (``FileService.held_elsewhere``,
``sampleset_records.cached_bytes_of``). A SampleSet that a job not finished yet names cannot be
deleted (409 ``sampleset_in_use``, naming the jobs).

Backend calls never run under the controller mutex (a mount may take seconds); the loop writes only
the SampleSet tables. After a server restart every SampleSet is ensured again and a Running
SampleJob is started again (a backend that lost it starts it afresh; one that kept it changes
nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, InvalidInput
from paddlecloud.api.samplesets import (
    NodeCacheView,
    SampleJobKind,
    SampleJobPhase,
    SampleJobRequest,
    SampleJobView,
    SampleSetPhase,
    SampleSetSpec,
    SampleSetView,
)
from paddlecloud.backends.errors import BackendError, BackendUnavailable
from paddlecloud.backends.samplesets import (
    SampleSetBackend,
    SampleSetRef,
    SampleSetsUnavailable,
    SampleTask,
    SampleTaskKind,
    SampleTaskState,
    SampleTaskStatus,
)
from paddlecloud.controller.context import Context
from paddlecloud.controller.identity import Identity, require_admin
from paddlecloud.controller.sampleset_records import (
    find_sampleset,
    ref_of,
    sampleset_backend,
    sampleset_not_found,
    samplesets_unavailable,
)
from paddlecloud.core.phases import TERMINAL_PHASES
from paddlecloud.core.quantity import QuantityError, human_memory, parse_memory
from paddlecloud.store.tables import JobRow, SampleJobRow, SampleSetRow

__all__ = ["SampleSetLoop", "SampleSetService", "check_job_path", "derive_phase"]

log = logging.getLogger("paddlecloud.samplesets")

#: the default cache size: the source's bytes times this, at least ``MIN_DEFAULT_CACHE``
CACHE_HEADROOM = 1.1
MIN_DEFAULT_CACHE = 64 * 2**20
#: SampleJobs shown with a SampleSet
JOBS_SHOWN = 20
_LIVE_JOB = (SampleJobPhase.PENDING, SampleJobPhase.RUNNING)


def check_job_path(kind: SampleJobKind, path: str) -> str:
    """The path of a SampleJob, normalised (``a/b``), or 422 ``sampleset_path_invalid``: relative to
    the volume root, no "..", not empty for rmr; sync and clear take none."""

    def bad(why: str) -> InvalidInput:
        return InvalidInput(
            f"{kind} path {path!r} {why}", code=ErrorCode.SAMPLESET_PATH_INVALID, field="path"
        )

    if kind in (SampleJobKind.SYNC, SampleJobKind.CLEAR):
        if path:
            raise bad("is not taken: sync and clear work on the whole SampleSet (give no path)")
        return ""
    if "\0" in path:
        raise bad("holds a NUL byte")
    if path.startswith("/"):
        raise bad('is absolute: give it relative to the SampleSet\'s root (e.g. "train/part-0")')
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise bad('holds "..": give a path inside the SampleSet')
    if kind == SampleJobKind.RMR and not parts:
        raise bad("is empty: name what to remove (delete the whole SampleSet with `sampleset delete`)")
    return "/".join(parts)


def derive_phase(jobs: Sequence[SampleJobRow], unavailable: str | None = None) -> tuple[SampleSetPhase, str]:
    """A SampleSet's phase and message from its SampleJobs (id order) and whether it can mount."""
    if unavailable is not None:
        return SampleSetPhase.FAILED, unavailable
    running = next((j for j in jobs if j.phase == SampleJobPhase.RUNNING), None)
    if running is not None and running.kind in (SampleJobKind.SYNC, SampleJobKind.WARMUP):
        return SampleSetPhase.SYNCING, f"{running.kind} running"
    ended = [j for j in jobs if j.phase in (SampleJobPhase.SUCCEEDED, SampleJobPhase.FAILED)]
    last_sync = next((j for j in reversed(ended) if j.kind == SampleJobKind.SYNC), None)
    if last_sync is None:
        return SampleSetPhase.PENDING, "waiting for its first sync"
    if last_sync.phase == SampleJobPhase.FAILED:
        return SampleSetPhase.FAILED, f"sync failed: {last_sync.message} (try again: sampleset sync)"
    waiting = next(
        (
            j
            for j in jobs
            if j.phase == SampleJobPhase.PENDING and j.kind in (SampleJobKind.SYNC, SampleJobKind.WARMUP)
        ),
        None,
    )
    if waiting is not None:  # e.g. the warmup that follows a sync: not Ready (and placed) before it ran
        return SampleSetPhase.SYNCING, f"{waiting.kind} waiting to run"
    last = ended[-1]
    if last.phase == SampleJobPhase.FAILED:
        return SampleSetPhase.READY, f"{last.kind} failed: {last.message}"
    return SampleSetPhase.READY, ""


def _job_view(j: SampleJobRow) -> SampleJobView:
    return SampleJobView(
        id=j.id, kind=j.kind, path=j.path, phase=SampleJobPhase(j.phase), done=j.done, total=j.total,
        message=j.message, created_at=j.created_at, finished_at=j.finished_at,
    )  # fmt: skip


def _view(s: Session, row: SampleSetRow) -> SampleSetView:
    jobs = s.scalars(
        select(SampleJobRow)
        .where(SampleJobRow.sampleset_id == row.id)
        .order_by(SampleJobRow.id.desc())
        .limit(JOBS_SHOWN)
    ).all()
    return SampleSetView(
        name=row.name,
        owner=row.owner,
        source=row.source,
        phase=SampleSetPhase(row.phase),
        message=row.message,
        files=row.files,
        bytes=row.bytes,
        cached_bytes=row.cached_bytes,
        cache_size=row.cache_size,
        nodes=[NodeCacheView.model_validate(n) for n in row.node_caches or []],
        jobs=[_job_view(j) for j in jobs],
        created_at=row.created_at,
        deleting=row.deleting,
    )


class SampleSetService:
    """What the ``/samplesets`` routes call; every method takes the caller's identity."""

    def __init__(self, ctx: Context, wake: threading.Event | None = None) -> None:
        self.ctx = ctx
        #: set to wake the lifecycle loop (``SampleSetLoop.wake``)
        self.wake = wake or threading.Event()

    # -- queries --------------------------------------------------------------------------------

    def _row(self, s: Session, who: Identity, name: str) -> SampleSetRow:
        row = find_sampleset(s, who.name, name)
        if row is None:
            raise sampleset_not_found(name)
        return row

    def get(self, who: Identity, name: str) -> SampleSetView:
        with self.ctx.session() as s:
            return _view(s, self._row(s, who, name))

    def list_all(self, who: Identity, *, all_users: bool = False) -> list[SampleSetView]:
        """The caller's SampleSets (``all_users``: everyone's, admins only), by name."""
        with self.ctx.session() as s:
            q = select(SampleSetRow).order_by(SampleSetRow.owner, SampleSetRow.name)
            if all_users:
                require_admin(who, "listing every user's SampleSets")
            else:
                q = q.where(SampleSetRow.owner == who.name)
            return [_view(s, r) for r in s.scalars(q)]

    def jobs(self, who: Identity, name: str) -> list[SampleJobView]:
        """The SampleSet's SampleJobs, latest first."""
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            q = select(SampleJobRow).where(SampleJobRow.sampleset_id == row.id)
            rows = s.scalars(q.order_by(SampleJobRow.id.desc()))
            return [_job_view(j) for j in rows]

    # -- commands -------------------------------------------------------------------------------

    def _engine(self) -> SampleSetBackend:
        engine = sampleset_backend(self.ctx.backend)
        if engine is None:
            raise samplesets_unavailable(self.ctx.backend)
        return engine

    def create(self, who: Identity, spec: SampleSetSpec) -> SampleSetView:
        self._engine()
        source_bytes = self._check_source(who, spec.source)
        nodes = self._check_nodes(spec.nodes)
        cache_size = self._cache_size(spec.cache_size, source_bytes)
        width = len(nodes) if nodes is not None else len(self.ctx.backend.nodes())
        self.ctx.files.check_room(who.name, min(cache_size, source_bytes) * width)
        now = self.ctx.clock.now()
        with self.ctx.session() as s:
            row = SampleSetRow(
                owner=who.name, name=spec.name, source=spec.source, cache_size=cache_size, nodes=nodes,
                phase=SampleSetPhase.PENDING, message="waiting to be mounted and synced", files=0,
                bytes=0, cached_bytes=0, node_caches=[], created_at=now, updated_at=now, deleting=False,
            )  # fmt: skip
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                s.rollback()
                raise self._exists(s, who, spec.name) from None
            for kind in (SampleJobKind.SYNC, SampleJobKind.WARMUP):  # sync then warmup, by themselves
                s.add(self._new_job(row.id, kind, "", now))
            s.commit()
            view = _view(s, row)
        self.wake.set()
        return view

    @staticmethod
    def _exists(s: Session, who: Identity, name: str) -> Conflict:
        going = s.scalar(
            select(SampleSetRow.deleting).where(SampleSetRow.owner == who.name, SampleSetRow.name == name)
        )
        tail = (
            "it is being deleted: try again once `paddlecloud get samplesets` no longer lists it"
            if going
            else f"pick another name or delete it first (paddlecloud sampleset delete {name})"
        )
        return Conflict(f"SampleSet {name!r} already exists; {tail}", code=ErrorCode.SAMPLESET_EXISTS,
                        field="name")  # fmt: skip

    def _check_source(self, who: Identity, source: str) -> int:
        """The source is a folder ``who`` may read; its size in bytes."""
        files = self.ctx.files
        info = files.stat(who, source)  # invalid_path / forbidden / path_not_found as for `pfs ls`
        if info.type != "dir":
            raise Conflict(
                f"source {source} is a file: give the folder that holds the data set",
                code=ErrorCode.NOT_A_DIRECTORY,
                field="source",
            )
        return files.bytes_below(files.parse(source))

    def _check_nodes(self, nodes: list[str] | None) -> list[str] | None:
        if nodes is None:
            return None
        known = [n.name for n in self.ctx.backend.nodes()]
        unknown = sorted(set(nodes) - set(known))
        if unknown or not nodes:
            what = f"unknown node(s) {', '.join(unknown)}" if unknown else "no node given"
            raise InvalidInput(f"{what}; this cluster's nodes: {', '.join(known)}",
                               code=ErrorCode.INVALID_REQUEST, field="nodes")  # fmt: skip
        return list(dict.fromkeys(nodes))

    @staticmethod
    def _cache_size(text: str | None, source_bytes: int) -> int:
        if text is None:
            return max(int(source_bytes * CACHE_HEADROOM), MIN_DEFAULT_CACHE)
        try:
            n = parse_memory(text)
        except QuantityError as exc:
            raise InvalidInput(
                f"cache_size: {exc}", code=ErrorCode.INVALID_REQUEST, field="cache_size"
            ) from None
        if n < 2**20:
            raise InvalidInput(f"cache_size {text!r} is under 1Mi (the cache's unit)",
                               code=ErrorCode.INVALID_REQUEST, field="cache_size")  # fmt: skip
        return n

    def _new_job(self, set_id: int, kind: SampleJobKind, path: str, now: float) -> SampleJobRow:
        return SampleJobRow(sampleset_id=set_id, kind=str(kind), path=path, phase=SampleJobPhase.PENDING,
                            done=0, total=0, message="", created_at=now)  # fmt: skip

    def add_job(self, who: Identity, name: str, req: SampleJobRequest) -> SampleJobView:
        """Queue a sync, warmup, clear or rmr; it runs after the SampleSet's earlier jobs."""
        self._engine()
        path = check_job_path(req.kind, req.path)
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            if req.kind == SampleJobKind.WARMUP:  # the cache it may fill counts against the quota
                width = len(row.node_caches or []) or 1
                more = min(row.cache_size, row.bytes) * width - row.cached_bytes
                self.ctx.files.check_room(who.name, max(more, 0))
            job = self._new_job(row.id, req.kind, path, self.ctx.clock.now())
            s.add(job)
            s.commit()
            view = _job_view(job)
        self.wake.set()
        return view

    def delete(self, who: Identity, name: str) -> SampleSetView:
        """Unmount and remove it (in the background); refused while a job not finished names it."""
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            users = [
                j.name
                for j in s.scalars(
                    select(JobRow).where(JobRow.user == who.name, JobRow.phase.not_in(list(TERMINAL_PHASES)))
                )
                if (spec := self.ctx.specs.peek(j)) is not None and spec.sampleset == name
            ]
            if users:
                raise Conflict(
                    f"SampleSet {name!r} is used by job(s) {', '.join(sorted(users))}: "
                    "delete it once they have finished (or kill them)",
                    code=ErrorCode.SAMPLESET_IN_USE,
                )
            row.deleting = True
            row.message = "deleting: unmounting and removing the cache"
            s.commit()
            view = _view(s, row)
        self.wake.set()
        return view


@dataclass
class _Memory:
    """What the loop keeps of one SampleSet between cycles (lost in a restart, rebuilt from it)."""

    #: the nodes it was last mounted on (None: not ensured by this process)
    ensured: tuple[str, ...] | None = None
    #: why this cluster cannot mount it (SampleSetsUnavailable), until a new job asks again
    unavailable: str | None = None
    #: why the last mount failed for now (BackendUnavailable: tried again next cycle), "" none
    trouble: str = ""
    #: SampleJobs this process started (a Running one not among them is started again)
    started: set[int] = field(default_factory=set)
    refreshed_at: float = float("-inf")


class SampleSetLoop:
    """Drives every SampleSet through its lifecycle (see the module docstring)."""

    def __init__(self, ctx: Context, interval_s: float = 1.0, refresh_s: float = 3.0) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self.wake = threading.Event()
        self._memory: dict[int, _Memory] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if sampleset_backend(self.ctx.backend) is None:
            return
        self._thread = threading.Thread(target=self._run, name="samplesets", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.wake.clear()
            try:
                self.tick()
            except Exception:  # keep the loop alive; logged with its traceback
                log.exception("SampleSet cycle failed")
            self.wake.wait(self.interval_s)

    def tick(self) -> None:
        engine = sampleset_backend(self.ctx.backend)
        if engine is None:
            return
        with self.ctx.session() as s:
            ids = list(s.scalars(select(SampleSetRow.id).order_by(SampleSetRow.id)))
        nodes: list[str] | None = None
        for set_id in ids:
            if self._stop.is_set():
                return
            if nodes is None:
                nodes = [n.name for n in self.ctx.backend.nodes()]
            with self.ctx.session() as s:
                row = s.get(SampleSetRow, set_id)
                if row is None:
                    continue
                try:
                    self._drive(s, engine, row, ref_of(row, self.ctx.files, nodes))
                except Exception as exc:  # this SampleSet alone; the others go on
                    s.rollback()
                    log.exception("SampleSet %s/%s", row.owner, row.name)
                    self._note(s, set_id, f"trouble, tried again shortly: {type(exc).__name__}: {exc}")
        self._memory = {k: v for k, v in self._memory.items() if k in ids}

    def _note(self, s: Session, set_id: int, message: str) -> None:
        row = s.get(SampleSetRow, set_id)
        if row is not None:
            row.message = message
            s.commit()

    def _drive(self, s: Session, engine: SampleSetBackend, row: SampleSetRow, ref: SampleSetRef) -> None:
        mem = self._memory.setdefault(row.id, _Memory())
        if row.deleting:
            engine.delete(ref)
            s.delete(row)
            s.commit()
            self._memory.pop(row.id, None)
            return
        jobs = list(s.scalars(select(SampleJobRow).where(SampleJobRow.sampleset_id == row.id)
                              .order_by(SampleJobRow.id)))  # fmt: skip
        if not self._ensure(engine, ref, mem, jobs):
            self._settle(row, jobs, mem)
            s.commit()
            return
        ended = self._step_jobs(engine, ref, mem, jobs)
        now = self.ctx.clock.now()
        if ended or now - mem.refreshed_at >= self.refresh_s:
            self._refresh(engine, ref, row)
            mem.refreshed_at = now
        self._settle(row, jobs, mem)
        s.commit()

    def _ensure(
        self, engine: SampleSetBackend, ref: SampleSetRef, mem: _Memory, jobs: Sequence[SampleJobRow]
    ) -> bool:
        """Mounted where it should be (again after a restart, or when its nodes changed). False when
        it cannot be now: unavailable (its waiting jobs fail with the reason) or transient trouble."""
        if mem.ensured == ref.nodes:
            return True
        waiting = [j for j in jobs if j.phase in _LIVE_JOB]
        if mem.unavailable is not None and not any(j.phase == SampleJobPhase.PENDING for j in waiting):
            return False  # tried again only when someone asks for a new job
        try:
            engine.ensure(ref)
        except SampleSetsUnavailable as exc:
            mem.unavailable = f"this cluster cannot mount SampleSets: {exc}"
            for j in waiting:
                self._finish(j, SampleTaskStatus(SampleTaskState.FAILED, message=mem.unavailable))
            return False
        except BackendUnavailable as exc:
            log.warning("SampleSet %s: mounting it failed for now: %s", ref.key, exc)
            mem.trouble = f"mounting failed, trying again: {exc}"
            return False
        mem.ensured, mem.unavailable, mem.trouble = ref.nodes, None, ""
        return True

    def _step_jobs(
        self, engine: SampleSetBackend, ref: SampleSetRef, mem: _Memory, jobs: Sequence[SampleJobRow]
    ) -> bool:
        """Follow the running SampleJob and start the next; True when one ended."""
        ended = False
        running = next((j for j in jobs if j.phase == SampleJobPhase.RUNNING), None)
        if running is not None:
            task = SampleTask(f"sj-{running.id}", SampleTaskKind(running.kind), running.path)
            # not started by this process (a restart): the backend may have lost it
            if running.id not in mem.started and not self._start(engine, ref, mem, running, task):
                return True
            status = engine.task_status(ref, task.id)
            running.done, running.total = status.done, status.total
            if status.state == SampleTaskState.RUNNING:
                return False
            self._finish(running, status)
            ended = True
        pending = next((j for j in jobs if j.phase == SampleJobPhase.PENDING), None)
        if pending is not None:
            task = SampleTask(f"sj-{pending.id}", SampleTaskKind(pending.kind), pending.path)
            if self._start(engine, ref, mem, pending, task):
                pending.phase, pending.started_at = SampleJobPhase.RUNNING, self.ctx.clock.now()
            else:
                ended = True
        return ended

    def _start(
        self, engine: SampleSetBackend, ref: SampleSetRef, mem: _Memory, job: SampleJobRow, task: SampleTask
    ) -> bool:
        """Hand ``task`` to the backend; False when it refused it (the job failed with its words)."""
        try:
            engine.start_task(ref, task)
        except BackendUnavailable:
            raise  # the cycle notes it and tries again
        except BackendError as exc:
            self._finish(job, SampleTaskStatus(SampleTaskState.FAILED, message=str(exc)))
            return False
        mem.started.add(job.id)
        return True

    def _finish(self, job: SampleJobRow, status: SampleTaskStatus) -> None:
        ok = status.state == SampleTaskState.SUCCEEDED
        job.phase = SampleJobPhase.SUCCEEDED if ok else SampleJobPhase.FAILED
        job.message = status.message or ("done" if ok else "failed")
        job.finished_at = self.ctx.clock.now()
        if ok and job.total:
            job.done = job.total

    def _refresh(self, engine: SampleSetBackend, ref: SampleSetRef, row: SampleSetRow) -> None:
        try:
            st = engine.status(ref)
        except BackendUnavailable as exc:  # e.g. not mounted for now: the last figures stay
            log.warning("SampleSet %s: status unavailable for now: %s", ref.key, exc)
            return
        row.files, row.bytes = st.files, st.bytes
        row.node_caches = [
            {
                "node": n.node,
                "mounted": n.mounted,
                "cached_bytes": n.cached_bytes,
                "message": n.message,
                "local_copy": n.local_copy,
            }
            for n in st.nodes
        ]
        row.cached_bytes = sum(n.cached_bytes for n in st.nodes)

    def _settle(self, row: SampleSetRow, jobs: Sequence[SampleJobRow], mem: _Memory) -> None:
        phase, message = derive_phase(jobs, mem.unavailable)
        if mem.trouble and phase != SampleSetPhase.FAILED:
            message = mem.trouble
        if not message and row.cached_bytes:
            mounted = sum(1 for n in row.node_caches or [] if n.get("mounted"))
            message = f"{human_memory(row.cached_bytes)} cached on {mounted} node(s)"
        row.phase, row.message, row.updated_at = phase, message, self.ctx.clock.now()
