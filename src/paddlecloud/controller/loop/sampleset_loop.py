"""The SampleSets' lifecycle loop: each SampleSet driven through its backend, in a thread of its own.

    SampleSetLoop.tick, per SampleSet (every ``interval_s`` or when woken, ``wake``):
      deleting        ──▶ backend.delete(ref) ──▶ rows dropped
      not ensured yet ──▶ backend.ensure(ref)  (SampleSetsUnavailable: Failed, jobs failed with it)
      SampleJobs, one at a time in id order: Pending ──start_task──▶ Running ──task_status──▶
                                             Succeeded | Failed (message)
      status (files, bytes, per-node caches) at most every ``refresh_s``, and after each job
      phase = derive_phase(jobs): Syncing while a sync or warmup runs; Ready once the last sync
              succeeded; Failed when it failed; Pending before any sync ended

The requests (create, list, get, SampleJobs, delete) are ``controller/services/samplesets.py``'s
(``SampleSetService``, which wakes this loop); neither module imports the other. Backend calls
never run under the controller mutex (a mount may take seconds); the loop writes only the
SampleSet tables. After a server restart every SampleSet is ensured again and a Running SampleJob
is started again (a backend that lost it starts it afresh; one that kept it changes nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.samplesets import SampleJobKind, SampleJobPhase, SampleSetPhase
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
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.sampleset_refs import ref_of, sampleset_backend
from paddlecloud.core.quantity import human_memory
from paddlecloud.store.tables import SampleJobRow, SampleSetRow

__all__ = ["SampleSetLoop", "derive_phase"]

log = logging.getLogger("paddlecloud.samplesets")

_LIVE_JOB = (SampleJobPhase.PENDING, SampleJobPhase.RUNNING)


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
