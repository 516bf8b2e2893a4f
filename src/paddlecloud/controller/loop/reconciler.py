"""The reconcile loop: observe started jobs, decide phases, schedule queued jobs, apply the plan.

One cycle (``tick``), numbered, under the context mutex:

  1. sync every Starting/Running job with the backend; write worker states and backend events;
     account the service it received; decide the phase with ``core.phases.next_phase`` over its
     current trainers (a terminal phase waits until the backend reports every process ended);
     release the task leases (``controller.model.task_queue``) held by worker runs that ended; then fail the
     running jobs of the users the disk watch found over their storage quota
     (``controller.loop.diskwatch``: StorageQuotaExceeded);
  2. build a frozen ``scheduler.Snapshot`` (nodes, what started jobs hold, the queue, the running
     jobs with attained service and elastic bounds, quotas, the clock);
  3. ask the policy for a ``Plan``;
  4. apply it with ``controller.loop.effects.apply_plan`` (preempt, shrink, wait, admit, grow; each
     decision a job event).

A preempted job is Preempting until the backend reports every process ended (its stop runs in the
background, so no cycle waits for a grace period): its placement keeps counting as held in the
nodes of each snapshot, it is not offered to the policy, and the jobs whose admission waited for it
are held out of the queue meanwhile (they would otherwise look unplaceable and make the policy
preempt again). Then it is Queued again.

A queued job naming a SampleSet (``controller/services/samplesets.py``) waits out of the queue until it is
Ready (reason ``SampleSetNotReady``, with what it waits for); once it is, its request carries the
nodes holding the cache, which placement prefers.

A backend call about one job that raises (``adopt``, ``sync``, ``stop``, also a preemption's stop in
the background) fails that job alone (``controller.loop.failures``), as does a queued job whose stored spec
cannot be read: the cycle goes on with the other jobs. A transient error (``BackendUnavailable``)
keeps the job instead and the call is tried again next cycle, for at most ``backend_retry_s``: a job
not re-adopted yet is not synced until it is. After a restart, a backend that does not declare
``adopt`` is not asked to: its started jobs are queued again (``NotAdopted``).

Elastic bounds reach the policy only when the backend declares the ``resize`` capability. On an
engine shared with other work (``shared-capacity``) the snapshot's nodes also count what the engine
says that work holds, and a job waiting for capacity is told whose load it waits behind.

Each cycle also feeds the platform's metrics (its own duration, the policy's) and its history
(``controller.model.history``): every job holding resources has its trainer count observed, and at most
every ``History.interval_s`` the cluster's allocation and queue are recorded; ``nodes`` keeps the
last view of the nodes for the metrics' node gauges.

The loop runs in a thread, every ``tick_seconds`` or at once when something calls ``Context.wake``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from paddlecloud.api.history import ClusterPoint
from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import Capability, JobStatus, NodeInfo
from paddlecloud.controller.loop.diskwatch import storage_failure
from paddlecloud.controller.loop.effects import apply_plan, requeue_preempted
from paddlecloud.controller.loop.failures import (
    FailReason,
    backend_recovered,
    backend_trouble,
    end_failed,
    fail_job,
)
from paddlecloud.controller.model.capacity import name_foreign_load, node_states
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.job_rows import account, job_request, record_workers
from paddlecloud.controller.model.limits import compute_quotas
from paddlecloud.controller.model.placement import place, trainer_names
from paddlecloud.controller.model.sampleset_refs import Readiness, readiness
from paddlecloud.controller.model.specs import SpecCache
from paddlecloud.controller.model.task_queue import release_ended
from paddlecloud.core.phases import (
    TERMINAL_PHASES,
    JobPhase,
    JobReason,
    PhaseChange,
    RoleCounts,
    WorkerState,
    next_phase,
)
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Policy, Snapshot
from paddlecloud.store.tables import JobRow

__all__ = ["Reconciler"]

log = logging.getLogger("paddlecloud.reconciler")

ACTIVE = (JobPhase.STARTING, JobPhase.RUNNING)
#: phases whose jobs hold resources on the nodes
HOLDING = (*ACTIVE, JobPhase.PREEMPTING)
#: (JobReason.STOPPING: a started job whose outcome is known while its last processes stop keeps
#: what it holds but is no longer the policy's to grow, shrink or preempt: a trainer added then
#: would never run and turn its success into a failure)


def _counts(status: JobStatus, role: str, names: set[str]) -> RoleCounts:
    """Counts over the job's current workers of ``role`` (trainers retired by a shrink excluded)."""
    ws = [w for w in status.workers if w.role == role and w.name in names]
    return RoleCounts(
        desired=len(names),
        running=sum(w.state == WorkerState.RUNNING for w in ws),
        succeeded=sum(w.state == WorkerState.SUCCEEDED for w in ws),
        failed=sum(w.state in (WorkerState.FAILED, WorkerState.LOST) for w in ws),
    )


def _sampleset_of(specs: SpecCache, row: JobRow) -> str | None:
    """The SampleSet ``row`` names (None: none, or a spec that cannot be read: failed elsewhere)."""
    spec = specs.peek(row)
    return spec.sampleset if spec is not None else None


def _samplesets(s: Session, specs: SpecCache, queued: Sequence[JobRow]) -> dict[tuple[str, str], Readiness]:
    """Whether the SampleSet each queued job names is Ready, by (owner, name)."""
    named = {(r.user, name) for r in queued if (name := _sampleset_of(specs, r))}
    return readiness(s, named)


class Reconciler:
    def __init__(self, ctx: Context, policy: Policy) -> None:
        self.ctx = ctx
        self.policy = policy
        self.cycle = 0
        #: the last scheduling round's snapshot and plan: the queue view orders its waiting jobs by
        #: the plan's waits (``ClusterState``), and tests compare it with the simulator's
        self.last_round: tuple[Snapshot, Plan] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: queued jobs whose admission waits for preempted jobs to stop (``effects.apply_plan``)
        self._held: frozenset[str] = frozenset()
        #: started jobs not yet re-adopted after a restart (the backend was unavailable): by key
        self._unadopted: set[str] = set()
        #: the nodes as the last cycle that looked saw them (the metrics' node gauges), and that cycle
        self.nodes: tuple[NodeState, ...] = ()
        self._nodes_cycle = 0

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
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # keep the loop alive; the failure is logged with its traceback
                log.exception("reconcile cycle %d failed", self.cycle)
            # at most half of the time in cycles: a stream of wake-ups (a burst of submits) is taken
            # in batches, so a cycle over a long queue never starves the requests of the CPU
            self._stop.wait(min(time.monotonic() - started, self.ctx.config.tick_seconds))
            self.ctx.wake_event.wait(self.ctx.config.tick_seconds)

    def adopt_all(self) -> None:
        """After a restart: hand every started job back to the backend; finish interrupted kills."""
        with self.ctx.mutex, self.ctx.session() as s:
            rows = s.scalars(
                select(JobRow)
                .where(JobRow.phase.in_((*HOLDING, JobPhase.QUEUED)))
                .options(selectinload(JobRow.workers), selectinload(JobRow.events))
            ).all()
            for row in rows:
                self._adopt(row)
                s.commit()

    def _adopt(self, row: JobRow) -> bool:
        """Hand one job back to the backend (and finish its interrupted kill or preemption). False
        while the backend is unavailable (the job is kept and tried again next cycle) or when it
        failed the job."""
        key = job_key(row.user, row.name)
        if row.phase != JobPhase.QUEUED:
            if not self._can_adopt(row):
                return False
            try:
                self.ctx.backend.adopt(self.ctx.launch(row))
            except Exception as exc:  # this job alone fails (or waits); the others are adopted
                if backend_trouble(self.ctx, row, FailReason.ADOPT_FAILED, "re-adopting the job", exc):
                    self._unadopted.add(key)
                else:
                    self._unadopted.discard(key)
                return False
            self._unadopted.discard(key)
            backend_recovered(self.ctx, row)
            self.ctx.event(row, "Normal", JobReason.ADOPTED, "server restarted; job re-adopted")
        if row.stop_requested:  # the server stopped in the middle of a kill: finish it
            self._finish_kill(row)
        elif row.phase == JobPhase.PREEMPTING:  # ... or of a preemption: stop it again
            self.ctx.stop_in_background(key, self.ctx.config.shrink_grace)
        return True

    def _can_adopt(self, row: JobRow) -> bool:
        """A backend that does not declare ``adopt`` lost its started jobs with the server: such a
        job is queued again (started from scratch by a later cycle), or, in the middle of a kill,
        Killed."""
        if Capability.ADOPT in self.ctx.backend.capabilities:
            return True
        name = self.ctx.backend.name
        if row.stop_requested:
            message = f"kill completed after a server restart (the {name} backend keeps no jobs)"
            self.ctx.move(row, JobPhase.KILLED, JobReason.KILLED, message)
        else:
            message = (
                f"the server restarted and the {name} backend cannot take over started jobs "
                "(it does not declare adopt): queued again"
            )
            self.ctx.move(row, JobPhase.QUEUED, JobReason.NOT_ADOPTED, message)
            place(row, None)
        self.ctx.event(row, "Warning", row.reason, row.message)
        return False

    def _finish_kill(self, row: JobRow) -> None:
        key = job_key(row.user, row.name)
        if row.phase != JobPhase.QUEUED:
            try:
                self.ctx.backend.stop(key, self.ctx.config.kill_grace)
                record_workers(self.ctx, row, self.ctx.backend.sync(key))
            except Exception as exc:
                fail_job(self.ctx, row, FailReason.STOP_FAILED, "finishing the kill", exc)
                return
        self.ctx.move(row, JobPhase.KILLED, JobReason.KILLED, "kill completed after a server restart")
        self.ctx.event(row, "Normal", JobReason.KILLED, row.message)

    # -- one cycle ------------------------------------------------------------------------------

    def tick(self) -> None:
        started = time.perf_counter()
        with self.ctx.mutex, self.ctx.session() as s:
            self.cycle += 1
            self._observe(s)
            self._enforce_storage(s)
            self._schedule(s)
            self._record_cluster(s)
        self.ctx.metrics.reconcile_cycle.observe(time.perf_counter() - started)

    def _observe(self, s: Session) -> None:
        rows = s.scalars(
            select(JobRow)
            .where(JobRow.phase.in_(HOLDING), JobRow.stop_requested.is_(False))
            .options(selectinload(JobRow.workers))
        ).all()
        now = self.ctx.clock.now()
        for row in rows:
            key = job_key(row.user, row.name)
            if key in self._unadopted and not self._adopt(row):
                s.commit()
                continue
            try:
                status = self.ctx.backend.sync(key)
            except Exception as exc:  # this job alone fails (or, the engine unreachable, waits)
                backend_trouble(self.ctx, row, FailReason.OBSERVE_FAILED, "observing the job", exc)
                s.commit()
                continue
            backend_recovered(self.ctx, row)
            if row.phase == JobPhase.PREEMPTING:
                if (failed := self.ctx.stop_failures.pop(key, None)) is not None:
                    what = "stopping the job to preempt it"
                    if backend_trouble(self.ctx, row, FailReason.STOP_FAILED, what, failed):
                        self.ctx.stop_in_background(key, self.ctx.config.shrink_grace)  # again
                elif status.finished:
                    requeue_preempted(self.ctx, row, status)
                s.commit()
                continue
            account(row, now, self.ctx.specs)
            self.apply_status(row, status)
            if self.ctx.specs.get(row).tasks is not None:  # a dead trainer's tasks go to the others now
                self.ctx.metrics.lease("released", release_ended(s, row.id, status.workers))
            s.commit()
        self._observe_trainers(rows, now)

    def _observe_trainers(self, rows: Sequence[JobRow], now: float) -> None:
        """Each job still holding resources: its trainers in the history; the others hold none."""
        seen = set()
        for row in rows:
            if row.phase not in HOLDING:
                continue
            key = job_key(row.user, row.name)
            names = trainer_names(row)
            running = sum(1 for w in row.workers if w.name in names and w.state == WorkerState.RUNNING)
            self.ctx.history.observe_job(key, row.id, now, len(names), running)
            seen.add(key)
        self.ctx.history.end_jobs(seen, now)

    def apply_status(self, row: JobRow, status: JobStatus) -> None:
        record_workers(self.ctx, row, status)
        if row.phase == JobPhase.STARTING and status.events:  # say what the start is waiting on
            row.reason, row.message = status.events[-1].reason, status.events[-1].message
        pservers = {f"pserver-{i}" for i in range(self.ctx.specs.get(row).pservers.count)}
        change = next_phase(
            JobPhase(row.phase),
            _counts(status, "pserver", pservers),
            _counts(status, "trainer", trainer_names(row)),
            status.failure,
            status.failure_reason,
        )
        if change is None and status.finished and JobPhase(row.phase) not in TERMINAL_PHASES:
            change = PhaseChange(JobPhase.FAILED, JobReason.ENDED, "every process ended without success")
        elif change is None:
            return
        else:
            change_phase, reason, message = change.phase, change.reason, change.message
        if change_phase in TERMINAL_PHASES and not status.finished:
            if row.reason != JobReason.STOPPING:  # outcome known, remaining processes still being stopped
                row.reason, row.message = JobReason.STOPPING, f"{message}; stopping the remaining workers"
            return
        self.ctx.move(row, change_phase, reason, message)
        self.ctx.event(row, "Warning" if change_phase == JobPhase.FAILED else "Normal", reason, message)

    def _enforce_storage(self, s: Session) -> None:
        """Every Starting/Running job of a user the disk watch found over their storage quota (or
        could not measure) fails (``controller.loop.diskwatch``): the quota is the user's, and a job of
        theirs left running could go on filling the same home. A job whose outcome is known and
        whose last processes are stopping keeps its outcome."""
        for over in self.ctx.disk.take_over():
            rows = s.scalars(
                select(JobRow).where(
                    JobRow.user == over.user, JobRow.phase.in_(ACTIVE), JobRow.stop_requested.is_(False)
                )
            ).all()
            for row in rows:
                if row.reason == JobReason.STOPPING:
                    continue
                spec = self.ctx.specs.peek(row)
                reason, message = storage_failure(
                    over, row, str(spec.output or "") if spec is not None else ""
                )
                log.warning("job %s/%s: %s", row.user, row.name, reason)
                end_failed(self.ctx, row, reason, message)
                s.commit()

    def _schedule(self, s: Session) -> None:
        queued = s.scalars(
            select(JobRow).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
        ).all()
        holding = s.scalars(select(JobRow).where(JobRow.phase.in_(HOLDING))).all()
        active = [r for r in holding if r.phase != JobPhase.PREEMPTING]
        if len(active) == len(holding):  # no preemption in progress: nothing held back any more
            self._held = frozenset()
        queued = [r for r in queued if job_key(r.user, r.name) not in self._held]
        elastic = Capability.RESIZE in self.ctx.backend.capabilities
        if not queued and not (elastic and active):
            return
        waiting = self._requests(s, queued, elastic)
        queued = [r for r in queued if r.phase == JobPhase.QUEUED]
        nodes = self.ctx.backend.nodes()
        snap = self._snapshot(s, waiting, holding, active, nodes)
        started = time.perf_counter()
        plan = self.policy.schedule(snap)
        self.ctx.metrics.scheduling_round.observe(time.perf_counter() - started)
        if Capability.SHARED_CAPACITY in self.ctx.backend.capabilities:
            plan = name_foreign_load(plan, nodes, snap)
        self.last_round = (snap, plan)
        rows = {job_key(r.user, r.name): r for r in (*queued, *active)}
        self._held |= apply_plan(self.ctx, s, plan, rows)
        holding_now = [r for r in (*queued, *holding) if r.phase in HOLDING]  # after the plan
        self.nodes, self._nodes_cycle = node_states(self.ctx, holding_now, nodes), self.cycle

    def _snapshot(self, s: Session, waiting: tuple[JobRequest, ...], holding: Sequence[JobRow],
                  active: Sequence[JobRow], nodes: Sequence[NodeInfo]) -> Snapshot:  # fmt: skip
        elastic = Capability.RESIZE in self.ctx.backend.capabilities
        return Snapshot(
            cycle=self.cycle,
            now=self.ctx.clock.now(),
            nodes=node_states(self.ctx, holding, nodes),
            queue=waiting,
            running=tuple(
                self._request(r, elastic)
                for r in active
                if not r.stop_requested and r.reason != JobReason.STOPPING
            ),
            quotas=compute_quotas(s),
        )

    def forecast_snapshot(self, s: Session) -> tuple[Snapshot, dict[str, JobSpec], dict[str, int]] | None:
        """The cluster as the next cycle would see it, for the start-time forecast
        (``controller.loop.forecasts``): the snapshot, each job's spec and row id by key. Read-only: a
        job whose spec cannot be read is left out (the cycle fails it); None when no job waits or
        runs."""
        queued = s.scalars(
            select(JobRow).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
        ).all()
        holding = s.scalars(select(JobRow).where(JobRow.phase.in_(HOLDING))).all()
        active = [r for r in holding if r.phase != JobPhase.PREEMPTING]
        if not queued and not active:
            return None
        elastic = Capability.RESIZE in self.ctx.backend.capabilities
        specs, ids, waiting = {}, {}, []
        samplesets = _samplesets(s, self.ctx.specs, queued)
        for row in (*queued, *active):
            key = job_key(row.user, row.name)
            queued_now = row.phase == JobPhase.QUEUED
            found = (
                samplesets.get((row.user, str(_sampleset_of(self.ctx.specs, row)))) if queued_now else None
            )
            if found is not None and not found.ready:  # held out of the queue until it is Ready
                continue
            caches = found.cache_nodes if found is not None else frozenset()
            try:
                specs[key] = self.ctx.specs.get(row)
                if row.phase == JobPhase.QUEUED:
                    waiting.append(self._request(row, elastic, caches))
            except Exception:  # an unreadable spec: the reconciler fails the job next cycle
                continue
            ids[key] = row.id
        snap = self._snapshot(s, tuple(waiting), holding, active, self.ctx.backend.nodes())
        return snap, specs, ids

    def _record_cluster(self, s: Session) -> None:
        """At most every ``history.interval_s``: the cluster's allocation and queue in the history
        (the nodes looked at again unless this cycle's scheduling already did)."""
        now = self.ctx.clock.now()
        if not self.ctx.history.due(now):
            return
        holding = s.scalars(select(JobRow).where(JobRow.phase.in_(HOLDING))).all()
        if self._nodes_cycle != self.cycle:
            try:
                self.nodes = node_states(self.ctx, holding, self.ctx.backend.nodes())
            except Exception as exc:  # an engine unreachable now: the next cycle records instead
                log.warning("cluster history: the backend's nodes are unavailable: %s", exc)
                return
            self._nodes_cycle = self.cycle
        queued = s.scalar(
            select(func.count()).where(JobRow.phase == JobPhase.QUEUED, JobRow.stop_requested.is_(False))
        )
        held = sum((n.allocated for n in self.nodes), Resources())
        capacity = sum((n.capacity for n in self.nodes), Resources())
        self.ctx.history.record_cluster(
            ClusterPoint(
                t=now,
                cpu_allocated=held.cpu_m / 1000,
                cpu_capacity=capacity.cpu_m / 1000,
                memory_allocated=held.memory,
                memory_capacity=capacity.memory,
                gpu_allocated=held.gpu,
                gpu_capacity=capacity.gpu,
                queued=int(queued or 0),
                running=len(holding),
            )
        )

    def _request(self, row: JobRow, elastic: bool, caches: frozenset[str] = frozenset()) -> JobRequest:
        """The scheduler's view of ``row``, with the controller's caches and the engine's CPU unit."""
        return job_request(
            row,
            elastic,
            specs=self.ctx.specs,
            plans=self.ctx.batch_plans,
            cache_nodes=caches,
            engine=self.ctx.engine_units,
        )

    def _requests(self, s: Session, queued: Sequence[JobRow], elastic: bool) -> tuple[JobRequest, ...]:
        """The queued jobs as the scheduler sees them; one whose stored spec cannot be read fails.
        A job whose SampleSet is not Ready waits out of the queue (``SampleSetNotReady``); the others
        naming one carry the nodes that hold its cache."""
        out = []
        samplesets = _samplesets(s, self.ctx.specs, queued)
        for row in queued:
            found = samplesets.get((row.user, str(_sampleset_of(self.ctx.specs, row))))
            if found is not None and not found.ready:
                if row.reason != JobReason.SAMPLESET_NOT_READY:
                    self.ctx.event(row, "Normal", JobReason.SAMPLESET_NOT_READY, found.message)
                row.reason, row.message = JobReason.SAMPLESET_NOT_READY, found.message
                continue
            caches = found.cache_nodes if found is not None else frozenset()
            try:
                out.append(self._request(row, elastic, caches))
            except Exception as exc:
                fail_job(self.ctx, row, FailReason.INVALID_SPEC, "reading the job's spec", exc)
                s.commit()
        return tuple(out)
