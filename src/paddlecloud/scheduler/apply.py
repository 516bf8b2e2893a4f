"""Applying a :class:`Plan` to a virtual cluster's books: what the simulator and the forecast share.

A virtual run (the simulator's rounds, a start-time forecast) keeps, per job, a :class:`JobState`
(what it holds, when it first started, until when it restarts) and two ordered lists of job keys:
the queue and the running jobs. :func:`advance_states` carries one plan out on them, the way the
simulator always has:

    Admit    -> the job holds the plan's placement (trainers in ``placement``, pservers in
                ``pservers``), leaves the queue, joins the running jobs; its first start is
                recorded; it makes no progress for ``restart_s`` (start-up); an adaptive-batch job
                trains at the plan's ``batch_size`` from now
    Resize   -> the job holds the new trainer placement (pservers kept), at the plan's batch size
                if it gives one; ``restart_s`` again. A resize to the trainers it holds (a new batch
                only) pays ``rebatch_s`` instead: the workers apply it at a step boundary without a
                restart (``runtime.adaptive_torch``). Any resize sets ``rebatched_at`` (the re-batch
                cooldown; a restart re-batches too), only one that moves trainers ``resized_at``
    Preempt  -> the job holds nothing and goes to the back of the queue, keeping its progress

The live server applies plans with real effects instead (``controller.loop.effects``); this module is
pure bookkeeping, no I/O, no clock (the time is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from paddlecloud.scheduler.decisions import Plan, WorkerPlacement

__all__ = ["JobState", "advance_states"]


@dataclass(kw_only=True)
class JobState:
    """One job's scheduling state in a virtual run (the simulator's ``_Run`` extends it)."""

    #: its trainers now (empty while it waits)
    placement: tuple[WorkerPlacement, ...] = ()
    #: its pservers, fixed from its admission to its end or a preemption
    pservers: tuple[WorkerPlacement, ...] = ()
    first_start: float | None = None
    #: it makes no progress before this time (start-up or resize)
    paused_until: float = 0.0
    resized_at: float = float("-inf")
    #: its last Resize, batch-only or not (the re-batch cooldown: ``JobRequest.rebatched_at``)
    rebatched_at: float = float("-inf")
    resizes: int = 0
    preemptions: int = 0
    #: adaptive-batch jobs: the global batch of its last Admit / Resize that set one (0: none yet)
    batch: int = 0


def advance_states(
    plan: Plan,
    jobs: Mapping[str, JobState],
    queue: list[str],
    running: list[str],
    t: float,
    restart_s: float,
    rebatch_s: float | None = None,
) -> None:
    """Carry ``plan`` out at time ``t`` on ``jobs`` and the ``queue`` / ``running`` key lists
    (``rebatch_s``: what a batch-only resize costs; None: ``restart_s``, as any resize)."""
    pause = t + restart_s
    rebatch = pause if rebatch_s is None else t + rebatch_s
    for a in plan.admit:
        r = jobs[a.job]
        r.placement = tuple(p for p in a.placement if p.role == "trainer")
        r.pservers = tuple(p for p in a.placement if p.role != "trainer")
        r.batch = a.batch_size or r.batch
        r.first_start = t if r.first_start is None else r.first_start
        r.paused_until, r.resized_at = pause, t
        queue.remove(a.job)
        running.append(a.job)
    for z in plan.resize:
        r = jobs[z.job]
        same = z.placement == r.placement
        r.placement = z.placement
        r.resized_at = r.resized_at if same else t  # a batch-only resize restarts nothing
        r.rebatched_at = t
        r.paused_until = max(r.paused_until, rebatch) if same else pause
        r.resizes += 1
        r.batch = z.batch_size or r.batch
    for pre in plan.preempt:
        r = jobs[pre.job]
        r.placement, r.pservers, r.preemptions = (), (), r.preemptions + 1
        running.remove(pre.job)
        queue.append(pre.job)
