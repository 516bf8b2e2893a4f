"""The live start-time forecast: when each queued job should start and each started job end.

    Forecaster thread, every ``interval_s`` (and never more often):
      snapshot()  the cluster as the reconciler sees it (``reconciler.build_snapshot``: nodes, queue,
                  running jobs; read-only, no mutex)
        ─▶ unchanged since the last forecast (same jobs, placements, nodes) and younger than
           ``max_age_s``: nothing to do
        ─▶ Work per job (what it has left, how sure; ``work_for``):
             learned   a running job with a task master that has done >= 1 %: its pace so far
             declared  the spec's ``expected_duration_s``, less what it has run
             unknown   ``unknown_s`` (an hour by default), less what it has run
        ─▶ scheduler.forecast with the server's policy (at most ``max_rounds`` rounds and
           ``budget_s`` of wall time; the rest is "not before the horizon")
        ─▶ ForecastBoard.publish (``model.forecast_board``): the views (``JobView.estimate``) read
           it; the job-list cache is dropped (a change of the pseudo-table ``forecasts``)

Cost: one forecast is a few hundred policy rounds at most; at 1,250 nodes x 8 GPUs and 5,000 jobs
it is bounded by ``budget_s`` (bench/forecast_scale.py), once per ``interval_s`` and only when
something changed, in a thread of its own, so it never delays a scheduling cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from paddlecloud.api.models import JobSpec
from paddlecloud.controller.model.config import ForecastSettings
from paddlecloud.controller.model.forecast_board import ForecastBoard
from paddlecloud.core.tasks import TaskState
from paddlecloud.scheduler import Policy, Snapshot
from paddlecloud.scheduler.forecast import (
    Basis,
    Work,
    forecast,
    learned_work,
    seconds_work,
)
from paddlecloud.store.tables import TaskQueueRow, TaskRow

__all__ = ["Forecaster", "work_for"]

log = logging.getLogger("paddlecloud.forecast")


def _progress(s: Session, job_ids: list[int]) -> dict[int, float]:
    """Fraction of its work each job's task master reports done: (passes done + tasks done in this
    pass / tasks) / passes."""
    if not job_ids:
        return {}
    done = func.sum(case((TaskRow.state == TaskState.DONE, 1), else_=0))
    rows = s.execute(
        select(
            TaskQueueRow.job_id, TaskQueueRow.pass_no, TaskQueueRow.num_passes, func.count(TaskRow.id), done
        )
        .join(TaskRow, TaskRow.queue_id == TaskQueueRow.id)
        .where(TaskQueueRow.job_id.in_(job_ids))
        .group_by(TaskQueueRow.id)
    ).all()
    return {
        job_id: (pass_no + (n_done or 0) / n) / max(passes, 1)
        for job_id, pass_no, passes, n, n_done in rows
        if n
    }


def work_for(snap: Snapshot, specs: Mapping[str, JobSpec], progress: Mapping[str, float],
             unknown_s: float) -> dict[str, Work]:  # fmt: skip
    """What each job of ``snap`` has left: learned from ``progress`` (fraction done, by key), else
    its spec's ``expected_duration_s``, else ``unknown_s`` (module doc)."""
    out: dict[str, Work] = {}
    for req in (*snap.running, *snap.queue):
        frac = progress.get(req.key)
        learned = learned_work(req, frac) if frac is not None and req.running else None
        spec = specs.get(req.key)
        if learned is not None:
            out[req.key] = learned
        elif spec is not None and spec.expected_duration_s is not None:
            out[req.key] = seconds_work(req, spec.expected_duration_s)
        else:
            out[req.key] = seconds_work(req, unknown_s, Basis.UNKNOWN)
    return out


def _digest(snap: Snapshot) -> tuple[object, ...]:
    return (
        tuple(j.key for j in snap.queue),
        tuple((j.key, j.placement) for j in snap.running),
        tuple((n.name, n.capacity, n.allocated) for n in snap.nodes),
    )


class Forecaster:
    """Refreshes the :class:`ForecastBoard` in a thread of its own (module doc)."""

    def __init__(
        self,
        board: ForecastBoard,
        policy: Policy,
        snapshot: Callable[[Session], tuple[Snapshot, dict[str, JobSpec], dict[str, int]] | None],
        session: Callable[[], Session],
        settings: ForecastSettings | None = None,
    ) -> None:
        self.board, self.policy, self._snapshot, self._session = board, policy, snapshot, session
        self.settings = settings or ForecastSettings()
        self._digest: tuple[object, ...] | None = None
        self._made = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: wall-clock seconds the last forecast took (tests, metrics)
        self.last_cost_s = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="forecaster", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval_s):
            try:
                self.refresh()
            except Exception:  # keep the thread alive; the failure is logged with its traceback
                log.exception("start-time forecast failed")

    def refresh(self, force: bool = False) -> bool:
        """Forecast now if the cluster changed (or ``force``); True when a forecast was published."""
        cfg = self.settings
        with self._session() as s:
            got = self._snapshot(s)
            if got is None:
                return False
            snap, specs, ids = got
            digest = _digest(snap)
            if not force and digest == self._digest and snap.now - self._made < cfg.max_age_s:
                return False
            by_id = _progress(s, list(ids.values()))
        progress = {key: by_id[i] for key, i in ids.items() if i in by_id}
        work = work_for(snap, specs, progress, cfg.unknown_s)
        started = time.perf_counter()
        deadline = started + cfg.budget_s
        fc = forecast(
            self.policy.schedule, snap, work, cfg.rounds, out_of_time=lambda: time.perf_counter() > deadline
        )
        self.last_cost_s = time.perf_counter() - started
        self.board.publish(fc)
        self._digest, self._made = digest, snap.now
        return True
