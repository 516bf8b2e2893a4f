"""Restart-aware resizes in the goodput share (issue 14): what a move costs a running job.

A resize restarts a job's trainers (``restart_s`` seconds without progress: the simulator's and
Pollux's 30 s, the live restart of a DDP group), and the job gains from it only over the time it
has left, which the scheduler does not know. The prior is the heavy tail that Tiresias' and LAS's
ordering assume: a job that has been in the system ``age`` seconds is expected to run about as
long again. A move from ``n`` to ``n'`` trainers then pays iff the time it saves over that run,
``age x (1 - rate(n) / rate(n'))``, exceeds ``k`` restarts, i.e. iff::

    rate(n') x (1 - k x restart_s / age)  >  rate(n)

so :func:`restart_factor` is that factor (times the share's flat ``fair_restart``), applied to the
job's speed-up at every count but the one it runs at (``goodfair.Claim.restart``): a young job is
moved only for a large gain, an old one for a small one. :func:`paid_at` is the count at which a job
pays no restart: the count it ran at when the cycle began, so that a move the top-up or a
shrink-to-admit made earlier in the cycle is still one the share may undo for free.

Data flow: ``elastic._Cycle.fair`` -> per running adaptive job, :func:`paid_at` and
:func:`restart_factor` (its submit time, the cycle's injected time) -> ``goodfair.Claim``. Pure.
"""

from __future__ import annotations

from paddlecloud.scheduler.snapshot import JobRequest

__all__ = ["FLOOR", "paid_at", "restart_factor"]

#: the factor never goes below this: a job seconds old may still be moved for a very large gain
FLOOR = 0.05


def restart_factor(job: JobRequest, now: float, restart_s: float, k: float, base: float) -> float:
    """``base x (1 - k x restart_s / age)``, ``age`` the time since ``job`` was submitted (at least
    ``restart_s``), the factor at least :data:`FLOOR`."""
    age = max(now - job.submitted_at, restart_s)
    return base * max(FLOOR, 1.0 - k * restart_s / age)


def paid_at(job: JobRequest, admitted: bool) -> int:
    """The count at which ``job`` pays no restart this cycle: the one it runs at (0 for a job
    admitted in this cycle: it starts anyway, every count is free)."""
    return 0 if admitted else job.running
