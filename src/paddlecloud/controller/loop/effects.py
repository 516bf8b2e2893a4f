"""Apply a scheduler ``Plan``: the one place where decisions become database rows and backend calls.

Order within a cycle (the plan was computed assuming it):

  1. ``Preempt``: the job becomes Preempting and its processes are stopped in the background
     (SIGTERM, ``shrink_grace`` to checkpoint, SIGKILL): the loop and the API never wait for them.
     Its resources stay counted as held until the reconciler sees every process gone and queues it
     again (reason Preempted; its workers' logs kept for its next run). The jobs this plan admits
     or grows relied on the capacity being freed: they wait (``PreemptionInProgress``) and are
     returned to the reconciler, which holds them out of the queue until the preempted jobs have
     stopped;
  2. ``Resize`` shrinks: the highest trainers are retired gracefully (in the background); a
     ``Resize`` that places trainers the job keeps elsewhere (``ElasticPolicy.pack`` re-places
     a growing job on fewer nodes: it restarts anyway) retires them from the lowest moved one up,
     and step 5 adds them again where the plan put them;
  3. ``Wait``: the job's reason and message; an event only when the reason changes;
  4. ``Admit``: Starting, worker rows and an event, committed *before* the backend starts anything;
  5. ``Resize`` grows: new trainers are added to the running job.

An ``Admit`` or ``Resize`` with ``batch_size > 0`` (an adaptive-batch job) also stores the global
batch assigned for its trainer count (``adaptive_states``; ``GET .../adaptive`` answers it, workers
started afterwards get it in ``PADDLECLOUD_BATCH_SIZE``), with an event when it changes. A ``Resize``
to the trainers the job has is a batch-only one (``Rebatch`` in the metrics, no ``Resized`` event):
the workers poll the assignment and switch at a step boundary, nothing is restarted; it does not
set the job's ``resized_at`` (the grow cooldown), but like any resize of an adaptive job it sets
``adaptive_states.rebatched_at`` (the re-batch cooldown). A grow that
gets only some of its trainers assigns the batch the job's goodput table gives the count it has.

Every decision that changes a job is a job event, so ``describe`` shows the job's scheduling history,
and is counted in the platform's metrics (``paddlecloud_scheduler_decisions_total``: a wait when the
job's reason changes); a job's first admission observes its queueing delay.
A backend call that raises fails that job alone (``controller.loop.failures``: ``StartFailed`` for a start,
``StopFailed`` for a preemption or a shrink, its processes stopped and its placement freed); a grow
that raises leaves the job as it was (a ``ResizeFailed`` event) with the trainers it did get. A
transient backend error (``BackendUnavailable``: the engine unreachable) keeps the job instead: a
start is undone (the job Queued again, admitted by a later cycle), a shrink not done, within
``backend_retry_s``.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from paddlecloud.backends.base import JobStatus
from paddlecloud.controller.loop.failures import FailReason, backend_recovered, backend_trouble, fail_job
from paddlecloud.controller.model.batches import noise_scale
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.job_rows import record_workers
from paddlecloud.controller.model.placement import place, placed, trainer_names, trainers_of
from paddlecloud.core.phases import JobPhase, JobReason, WorkerState
from paddlecloud.scheduler import Admit, Plan, Preempt, Resize, Wait, WaitReason, WorkerPlacement
from paddlecloud.store.tables import JobRow, WorkerRow

__all__ = ["apply_plan", "requeue_preempted"]

log = logging.getLogger("paddlecloud.effects")


def _pending_worker(row: JobRow, p: WorkerPlacement) -> None:
    """A worker row for a placed worker: a new row, or the row of its earlier run made Pending."""
    name = f"{p.role}-{p.index}"
    for w in row.workers:
        if w.name == name:
            w.state, w.node, w.pid, w.exit_code, w.endpoint = WorkerState.PENDING, p.node, None, None, ""
            w.started_at = w.finished_at = None
            w.reason = w.message = ""
            return
    row.workers.append(
        WorkerRow(name=name, role=p.role, index=p.index, state=WorkerState.PENDING, node=p.node)
    )


def apply_plan(ctx: Context, s: Session, plan: Plan, rows: dict[str, JobRow]) -> frozenset[str]:
    """Apply ``plan`` to the jobs in ``rows`` (every queued and started job, by key). Returns the
    jobs whose admission or growth waits for this plan's preemptions to complete."""
    for p in plan.preempt:
        try:
            _preempt(ctx, rows[p.job], p)
        except Exception as exc:  # what it holds is freed all the same: the plan counted on it
            fail_job(ctx, rows[p.job], FailReason.STOP_FAILED, "stopping the job to preempt it", exc)
    s.commit()
    grows, before = [], {}
    for r in plan.resize:
        row = rows[r.job]
        moved = _first_moved(row, r)
        if moved is not None:  # trainers it keeps move: retire from the first moved one, add again
            try:
                before[r.job] = _retire_from(ctx, row, moved)
                grows.append(r)
            except Exception as exc:  # as a shrink's
                backend_trouble(ctx, row, FailReason.STOP_FAILED, "retiring a trainer", exc)
        elif r.trainers < len(trainer_names(row)):
            try:
                _shrink(ctx, row, r)
            except Exception as exc:  # as for a preemption: the plan counted on what it gives back
                # (an engine unreachable for now: the job keeps its trainers, the next plan decides)
                backend_trouble(ctx, row, FailReason.STOP_FAILED, "retiring a trainer", exc)
        else:
            grows.append(r)
    waits, held = list(plan.wait), frozenset[str]()
    admits = plan.admit
    if plan.preempt:  # they need what the preempted jobs still hold: later
        waits += _after_preemption(plan, [a.job for a in admits] + [r.job for r in grows])
        held = frozenset(w.job for w in waits[len(plan.wait) :])
        admits, grows = [], [r for r in grows if r.job not in held]
    for w in waits:
        _wait(ctx, rows[w.job], w)
    s.commit()
    for a in admits:
        _admit(ctx, s, rows[a.job], a)
    for r in grows:
        _grow(ctx, rows[r.job], r, before.get(r.job))
    s.commit()
    return held


def _after_preemption(plan: Plan, jobs: list[str]) -> list[Wait]:
    stopping = ", ".join(p.job for p in plan.preempt)
    message = f"starts when the preempted job(s) {stopping} have stopped (their grace period to checkpoint)"
    return [Wait(job, WaitReason.PREEMPTION_IN_PROGRESS, message) for job in jobs]


def _wait(ctx: Context, row: JobRow, wait: Wait) -> None:
    if row.reason != wait.reason:
        ctx.event(row, "Normal", str(wait.reason), wait.message)
        ctx.metrics.decision("wait", str(wait.reason))
    row.reason, row.message = str(wait.reason), wait.message


def _admit(ctx: Context, s: Session, row: JobRow, admit: Admit) -> None:
    now = ctx.clock.now()
    ctx.move(row, JobPhase.STARTING, JobReason.ADMITTED, admit.message)
    ctx.metrics.decision("admit")
    if row.started_at is None:  # its first admission
        ctx.metrics.queueing_delay.observe(max(now - row.submitted_at, 0.0))
        row.started_at = now
    row.accounted_at = now
    row.attempts += 1
    place(row, admit.placement)
    for p in ctx.workers_placed(row):  # the names the backend's workers will have
        _pending_worker(row, p)
    again = f" (start {row.attempts})" if row.attempts > 1 else ""
    ctx.event(row, "Normal", JobReason.ADMITTED, admit.message + again)
    _assign_batch(ctx, row, admit.batch_size, sum(p.role == "trainer" for p in admit.placement))
    s.commit()  # the decision is durable before any process starts
    try:
        ctx.backend.start(ctx.launch(row))
    except Exception as exc:  # the backend could not even begin: the job fails with its reason ...
        if backend_trouble(ctx, row, FailReason.START_FAILED, "starting the job", exc):
            _unadmit(ctx, row)  # ... or, the engine unreachable for now, waits to be admitted again
        s.commit()
        return
    backend_recovered(ctx, row)


def _unadmit(ctx: Context, row: JobRow) -> None:
    """A start the engine could not take now (transient): Queued again, admitted by a later cycle."""
    try:  # whatever the engine may have taken of it before it failed
        ctx.backend.stop(job_key(row.user, row.name), 0.0)
    except Exception:
        log.exception("job %s/%s: cleaning up after a failed start", row.user, row.name)
    ctx.move(row, JobPhase.QUEUED, JobReason.REQUEUED, "the backend could not start it now; queued again")
    place(row, None)
    row.attempts -= 1


def _preempt(ctx: Context, row: JobRow, p: Preempt) -> None:
    grace = ctx.config.shrink_grace
    ctx.move(
        row,
        JobPhase.PREEMPTING,
        JobReason.PREEMPTING,
        f"{p.message}; stopping its workers ({grace:g} s to checkpoint)",
    )
    ctx.event(row, "Warning", JobReason.PREEMPTING, row.message)
    ctx.metrics.decision("preempt")
    ctx.stop_in_background(job_key(row.user, row.name), grace)


def requeue_preempted(ctx: Context, row: JobRow, status: JobStatus) -> None:
    """A Preempting job whose processes are all gone: Queued again, its run's logs kept."""
    record_workers(ctx, row, status)
    message = row.message.rpartition("; stopping its workers")[0] or row.message
    ctx.move(row, JobPhase.QUEUED, JobReason.PREEMPTED, message)
    place(row, None)
    ctx.event(row, "Warning", JobReason.PREEMPTED, f"{message}; queued again, logs of this run kept")


def _shrink(ctx: Context, row: JobRow, r: Resize) -> None:
    key = job_key(row.user, row.name)
    before = len(trainer_names(row))
    for _ in range(before - r.trainers):
        ctx.backend.remove_trainer(key, ctx.config.shrink_grace)
    _record_resize(ctx, row, r, before)


def _first_moved(row: JobRow, r: Resize) -> int | None:
    """The lowest index of a trainer the job keeps that ``r`` places on another node or other GPUs
    (``consolidate.py``: a job that restarts anyway re-placed on fewer nodes); None: none moves."""
    now = {p.index: (p.node, p.gpus) for p in trainers_of(row)}
    moved = [p.index for p in r.placement if p.index in now and now[p.index] != (p.node, p.gpus)]
    return min(moved, default=None)


def _retire_from(ctx: Context, row: JobRow, index: int) -> int:
    """Retire the job's trainers from ``index`` up (the highest first, as a shrink does); the
    placement keeps the others. Returns how many trainers it had."""
    key, have = job_key(row.user, row.name), len(trainer_names(row))
    for _ in range(have - index):
        ctx.backend.remove_trainer(key, ctx.config.shrink_grace)
    place(row, [p for p in placed(row) if p.role != "trainer" or p.index < index])
    return have


def _grow(ctx: Context, row: JobRow, r: Resize, before: int | None = None) -> None:
    """Add the trainers of ``r`` the job does not have (``before``: its count before a move retired
    some of them, for the event)."""
    key = job_key(row.user, row.name)
    have = trainer_names(row)
    added = [p for p in r.placement if f"trainer-{p.index}" not in have]
    done: list[WorkerPlacement] = []
    try:
        for p in added:
            ctx.backend.add_trainer(key, p)
            done.append(p)
    except Exception as exc:  # the job keeps what it has (and got); the next cycle may try again
        log.exception("growing %s failed", r.job)
        ctx.event(row, "Warning", JobReason.RESIZE_FAILED, f"adding trainers failed: {exc}")
        if not done:
            return
        kept = [p for p in r.placement if f"trainer-{p.index}" in have] + done
        note = f"{r.message} (only {len(done)} of {len(added)} added)"
        r = Resize(r.job, len(kept), tuple(kept), note, _batch_for(ctx, row, r, len(kept)))
    for p in done:
        _pending_worker(row, p)
    _record_resize(ctx, row, r, len(have) if before is None else before, moved=before is not None)


def _record_resize(ctx: Context, row: JobRow, r: Resize, before: int, moved: bool = False) -> None:
    place(row, [*(p for p in placed(row) if p.role != "trainer"), *r.placement])
    now = ctx.clock.now()
    if moved and r.trainers == before:  # the same count on other nodes (restarted)
        row.resized_at = now
        ctx.event(row, "Normal", JobReason.RESIZED, f"trainers {before} moved: {r.message}")
        ctx.metrics.decision("resize", "Move")
    elif r.trainers == before:  # a new batch on the same trainers: its BatchSize event says it
        # applied live at a step boundary (no restart): it does not start the grow cooldown
        ctx.metrics.decision("resize", "Rebatch")
    else:
        row.resized_at = now
        ctx.event(row, "Normal", JobReason.RESIZED, f"trainers {before} -> {r.trainers}: {r.message}")
        ctx.metrics.decision("resize", "Grow" if r.trainers > before else "Shrink")
    if row.adaptive is not None and r.batch_size > 0:  # the re-batch cooldown: any resize sets a batch
        row.adaptive.rebatched_at = now
    _assign_batch(ctx, row, r.batch_size, r.trainers)


def _batch_for(ctx: Context, row: JobRow, r: Resize, trainers: int) -> int:
    """The batch for ``trainers`` when a grow got fewer than planned: the job's goodput table's
    (the one the plan was made with), 0 for a fixed-batch job."""
    if r.batch_size <= 0:
        return 0
    plan = ctx.batch_plans.last(row)
    return plan.batch(trainers) if plan is not None and plan.batches else r.batch_size


def _assign_batch(ctx: Context, row: JobRow, batch: int, trainers: int) -> None:
    """Store an adaptive job's global batch for ``trainers``; an event when the batch changes."""
    state = row.adaptive
    if batch <= 0 or state is None:
        return
    before, state.batch_size, state.trainers = state.batch_size, batch, trainers
    if batch == before:
        return
    asked = ctx.specs.get(row).batch
    init = asked.size if asked is not None and asked.size else batch
    why, noise = [], noise_scale(state, init)
    if noise is not None:
        why.append(f"noise scale {noise:,.0f}")
    if state.step_time_s is not None:
        why.append(f"step time {state.step_time_s:.3g} s")
    detail = f" ({', '.join(why)})" if why else " (no report yet)"
    ctx.event(
        row,
        "Normal",
        JobReason.BATCH_SIZE,
        f"global batch {before} -> {batch} on {trainers} trainers{detail}",
    )
