"""Restart bookkeeping of the local backend: ``core.restarts.decide`` applied to its workers.

    sync ─▶ LocalBackend._check_* finds a worker of ``job.workers`` Failed or Lost
              │ RestartBook.on_failure(w, now)  (the policy of w's role, the job's count, w's count)
              ├─▶ str (why not)          the backend fails the job and stops everything, as before
              └─▶ (next run, event)      w's slot holds ``w.next_run(run, now + delay)``: Pending, no
                                         pid, ``restart_at`` set; event WorkerRestarted; file saved
    sync, clock ≥ restart_at ─▶ RestartBook.due(workers) ─▶ the backend spawns them with the job's
                                         current endpoints (same name, index, port, GPUs, directory)

The reconcile thread never sleeps on a backoff: the respawn waits for a later ``sync`` (the backend
sets a timer that wakes the loop when it is due). Retired trainers (a shrink) leave ``job.workers``
and are never looked at here, so they are never restarted.

``restarts.json`` in the job directory, rewritten atomically after every decision and spawn::

    {"count": 2, "workers": {"trainer-1": 2}, "streaks": {"trainer-1": 1},
     "pending": {"trainer-1": {"run": 2, "at": 1.7e9}}}

``count`` (the job's restarts, which ``max_restarts`` limits), ``workers`` (each worker's) and
``streaks`` (each worker's restarts since its last stable run, which the backoff doubles with; a run
of at least ``backoff_reset_s`` starts it again) survive a preemption's re-run: the limit is the
job's. ``pending`` is what a restarted server needs: ``restore`` (from ``adopt``) puts a worker
that was waiting for its restart back in its slot, so it is spawned when due instead of being
decided on again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import BackendEvent
from paddlecloud.backends.local.process import WorkerProc
from paddlecloud.core.restarts import Exit, Fail, RestartRules, decide
from paddlecloud.runtime.launcher import write_json_atomic

__all__ = ["RestartBook"]


@dataclass
class RestartBook:
    rules: RestartRules
    path: Path
    count: int = 0
    by_worker: dict[str, int] = field(default_factory=dict)
    #: restarts of each worker since its last stable run (the backoff doubles with these)
    streaks: dict[str, int] = field(default_factory=dict)
    #: restarts decided but not spawned when the file was last written: worker -> (run, at)
    pending: dict[str, tuple[int, float]] = field(default_factory=dict)

    @classmethod
    def load(cls, rules: RestartRules, path: Path) -> RestartBook:
        """The job's restart record; an empty one when there is none (or it cannot be read)."""
        book = cls(rules, path)
        try:
            data = json.loads(path.read_text())
            book.count = int(data.get("count", 0))
            book.by_worker = {str(k): int(v) for k, v in data.get("workers", {}).items()}
            book.streaks = {str(k): int(v) for k, v in data.get("streaks", data.get("workers", {})).items()}
            book.pending = {
                str(k): (int(v["run"]), float(v["at"])) for k, v in data.get("pending", {}).items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return book

    def save(self, workers: Iterable[WorkerProc]) -> None:
        self.pending = {w.name: (w.restart, w.restart_at) for w in workers if w.restart_at is not None}
        write_json_atomic(
            str(self.path),
            {
                "count": self.count,
                "workers": self.by_worker,
                "streaks": self.streaks,
                "pending": {k: {"run": run, "at": at} for k, (run, at) in self.pending.items()},
            },
        )

    def on_failure(self, w: WorkerProc, now: float) -> tuple[WorkerProc, BackendEvent] | str:
        """Decide for ``w``, which failed or vanished: its next run and the event, or why the job fails."""
        ran = w.finished_at - w.started_at if w.finished_at is not None and w.started_at is not None else None
        verdict = decide(
            self.rules.policy(w.role), self.rules, w.name, Exit(w.exit_code, w.signal, w.pid, ran),
            self.count, w.restart, self.streaks.get(w.name, 0),
        )  # fmt: skip
        if isinstance(verdict, Fail):
            return verdict.message
        self.count += 1
        self.by_worker[w.name] = self.by_worker.get(w.name, 0) + 1
        self.streaks[w.name] = verdict.streak
        return w.next_run(verdict.run, now + verdict.delay_s), BackendEvent(
            "Warning", "WorkerRestarted", verdict.message
        )

    def restore(self, workers: dict[str, WorkerProc]) -> list[WorkerProc]:
        """After a server restart: workers that were waiting for a restart wait again (returned).

        A slot whose adopted run is already the pending one (spawned just before the server went
        down) keeps its process."""
        back = []
        for name, (run, at) in self.pending.items():
            w = workers.get(name)
            if w is not None and w.restart < run:
                workers[name] = w.next_run(run, at)
                back.append(workers[name])
        return back

    @staticmethod
    def due(workers: Iterable[WorkerProc], now: float) -> list[WorkerProc]:
        return [w for w in workers if w.restart_at is not None and w.restart_at <= now]
