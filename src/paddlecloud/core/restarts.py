"""Restart policies: whether a worker that failed is started again, and after how long.

    worker run ended badly ──▶ decide(policy, rules, worker, Exit, job_restarts, run, worker_restarts)
        ├─▶ Restart(delay_s, run, message)   the backend starts the same worker again after delay_s
        └─▶ Fail(message)                    the job fails with that message

Pure: no clock, no I/O. The local backend applies the result (``backends/local/restarts.py``); a
Kubernetes backend reuses the same function.

Policies, per role (``trainers.restart``, ``pservers.restart`` in the job spec):

- ``Never``: every failure fails the job (the default).
- ``OnFailure``: any failure (non-zero exit, signal, a vanished process) restarts the worker.
- ``ExitCode``: restart only when the worker was killed by a signal (the launcher saw the signal, the
  shell's ``128 + N`` exit code, or the whole process group vanished) or exited with one of the job's
  ``retry_exit_codes``; any other exit code fails the job at once.

Restarts count over all workers of the job; once ``max_restarts`` were made the next failure fails
the job ("... ; restart limit 2 reached"). The delay doubles with each restart of the same worker:
``backoff_s``, ``2 * backoff_s``, ... up to ``backoff_max_s``; a run that lasted at least
``backoff_reset_s`` (default 600 s, as Kubernetes does for crash-looping containers) was stable, so
the doubling starts again from ``backoff_s`` when it ends (:attr:`Restart.streak` is what the backend
keeps: the worker's restarts since its last stable run).
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Exit", "Fail", "Restart", "RestartPolicy", "RestartRules", "backoff", "decide", "stable"]

#: the shell reports death by signal N as exit code 128 + N
_SHELL_SIGNAL_BASE = 128
_MAX_SIGNAL = 64


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    EXIT_CODE = "ExitCode"


@dataclass(frozen=True)
class RestartRules:
    """A job's restart settings: a policy per role and the job-wide limit and backoff."""

    trainer: RestartPolicy = RestartPolicy.NEVER
    pserver: RestartPolicy = RestartPolicy.NEVER
    max_restarts: int = 3
    retry_exit_codes: frozenset[int] = frozenset()
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    #: a run that lasted this long (seconds) resets its worker's backoff to ``backoff_s``
    backoff_reset_s: float = 600.0

    def policy(self, role: str) -> RestartPolicy:
        """The policy of ``role``; platform helpers (an elastic torch job's rendezvous store, whose
        state a restart would lose) are never restarted."""
        return {"pserver": self.pserver, "trainer": self.trainer}.get(role, RestartPolicy.NEVER)


@dataclass(frozen=True)
class Exit:
    """How one run of a worker ended. ``code`` and ``signal`` both None: it vanished without a status."""

    code: int | None
    signal: int | None = None
    pid: int | None = None
    #: how long the run lasted, seconds (None: unknown); a long one resets the backoff
    ran_s: float | None = None

    @property
    def killed_by(self) -> int | None:
        """The signal that ended it, when known (directly, or from the shell's 128 + N code)."""
        if self.signal:
            return self.signal
        if self.code is not None and _SHELL_SIGNAL_BASE < self.code <= _SHELL_SIGNAL_BASE + _MAX_SIGNAL:
            return self.code - _SHELL_SIGNAL_BASE
        return None

    @property
    def lost(self) -> bool:
        return self.code is None and self.signal is None

    def describe(self, worker: str) -> str:
        """``trainer-1 failed with exit code 3`` / ``was killed by signal 9 (SIGKILL)`` / ``vanished``."""
        if self.lost:
            pid = f" (pid {self.pid})" if self.pid is not None else ""
            return f"{worker} vanished without an exit status{pid}"
        if self.signal:
            return f"{worker} was killed by signal {self.signal} ({_signal_name(self.signal)})"
        return f"{worker} failed with exit code {self.code}"


@dataclass(frozen=True)
class Restart:
    delay_s: float
    #: the run number the restarted worker gets (``PADDLECLOUD_RESTART``, its log ``<worker>.<run>.log``)
    run: int
    message: str
    #: the worker's restarts since its last stable run, this one included (the next backoff doubles
    #: with it: pass it back as ``worker_restarts``)
    streak: int = 1


@dataclass(frozen=True)
class Fail:
    message: str


def _signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def backoff(rules: RestartRules, worker_restarts: int) -> float:
    """The delay before a worker's next restart: ``backoff_s`` doubled per earlier restart, capped."""
    return float(min(rules.backoff_s * 2 ** min(worker_restarts, 32), rules.backoff_max_s))


def _retryable(policy: RestartPolicy, rules: RestartRules, ended: Exit) -> str | None:
    """None when ``policy`` retries ``ended``, else why not."""
    if policy == RestartPolicy.NEVER:
        return ""
    if policy == RestartPolicy.ON_FAILURE or ended.lost or ended.killed_by is not None:
        return None
    if ended.code in rules.retry_exit_codes:
        return None
    codes = ", ".join(str(c) for c in sorted(rules.retry_exit_codes)) or "none"
    return f"exit code {ended.code} is not retryable (ExitCode policy: signals and exit codes {codes})"


def stable(rules: RestartRules, ran_s: float | None) -> bool:
    """Whether a run that lasted ``ran_s`` seconds (None: unknown) resets its worker's backoff."""
    return ran_s is not None and ran_s >= rules.backoff_reset_s


def decide(
    policy: RestartPolicy,
    rules: RestartRules,
    worker: str,
    ended: Exit,
    job_restarts: int,
    worker_run: int,
    worker_restarts: int,
) -> Restart | Fail:
    """Restart ``worker`` (whose run ``worker_run`` ended as ``ended``) or fail its job.

    ``job_restarts``: restarts made so far over all workers of the job (the limit counts these);
    ``worker_restarts``: restarts of this worker since its last stable run (the backoff doubles with
    these; a stable run, :func:`stable`, starts them again from 0).
    """
    what = ended.describe(worker)
    why_not = _retryable(policy, rules, ended)
    if why_not is not None:
        return Fail(f"{what}; {why_not}" if why_not else what)
    if job_restarts >= rules.max_restarts:
        return Fail(f"{what}; restart limit {rules.max_restarts} reached")
    fresh = stable(rules, ended.ran_s)
    streak = 0 if fresh else worker_restarts
    delay = backoff(rules, streak)
    run = worker_run + 1
    note = f"; backoff reset: the run lasted {ended.ran_s:.0f} s" if fresh and worker_restarts else ""
    return Restart(
        delay_s=delay,
        run=run,
        message=(
            f"{what}; restarting it as run {run} in {delay:g} s "
            f"(restart {job_restarts + 1} of at most {rules.max_restarts} for the job{note})"
        ),
        streak=streak + 1,
    )
