"""What the server records over time for charts: cluster use and queue, each job's trainer count.

    Reconciler.tick (every cycle, time from the injected clock)
      ├─ History.observe_job(key, job id, now, trainers, running)   each job holding resources
      ├─ History.end_jobs(keys seen this cycle, now)                 jobs that stopped holding: 0
      └─ History.due(now) ? History.record_cluster(ClusterPoint)     at most one per interval
    views (the console, GET /api/v1/cluster/history, GET /api/v1/jobs/{name}/history)
      History.cluster_history()        -> list[ClusterPoint]   oldest first, the last ``span_s``
      History.cluster_view()           -> ClusterHistory       the same with the interval and span
      History.job_trainers_history(k)  -> list[TrainerPoint]   oldest first ([] for an unknown job)

Memory is bounded: the cluster's points are a ring buffer of ``span_s / interval_s`` samples (one
hour at one per 10 s by default: 360); a job's points are recorded only when its values change, at
most ``job_points`` per job, for at most ``max_jobs`` jobs (the least recently observed are dropped
first). Nothing is stored in the database: a server restart starts the charts afresh.

The reconcile thread writes, request threads read: one lock; views return copies.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from paddlecloud.api.history import ClusterHistory, ClusterPoint, TrainerPoint

__all__ = ["History"]


@dataclass
class _JobSeries:
    #: the database id of the job whose points these are (a job removed and submitted again under the
    #: same name starts a new series)
    job_id: int
    points: deque[TrainerPoint]
    #: when the values of the last point were last observed
    seen: float = 0.0
    live: bool = field(default=True)


class History:
    def __init__(
        self, interval_s: float = 10.0, span_s: float = 3600.0, job_points: int = 720, max_jobs: int = 2000
    ) -> None:
        self.interval_s = interval_s
        self.span_s = span_s
        self._cluster: deque[ClusterPoint] = deque(maxlen=math.ceil(span_s / interval_s) + 1)
        self._job_points = job_points
        self._max_jobs = max_jobs
        self._jobs: OrderedDict[str, _JobSeries] = OrderedDict()
        self._lock = threading.Lock()

    # -- recording (the reconcile loop) ----------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether a cluster point should be recorded at ``now`` (none yet, or ``interval_s`` since
        the last; a clock that went back counts as due, so the buffer never stalls)."""
        with self._lock:
            if not self._cluster:
                return True
            last = self._cluster[-1].t
        return now - last >= self.interval_s or now < last

    def record_cluster(self, point: ClusterPoint) -> None:
        with self._lock:
            self._cluster.append(point)

    def observe_job(self, key: str, job_id: int, now: float, trainers: int, running: int) -> None:
        """Job ``key`` (``user/name``) holds ``trainers`` trainers at ``now``, ``running`` of them
        running: a point when that differs from its last one."""
        with self._lock:
            series = self._jobs.get(key)
            if series is None or series.job_id != job_id:
                series = _JobSeries(job_id, deque(maxlen=self._job_points))
                self._jobs[key] = series
                while len(self._jobs) > self._max_jobs:
                    self._jobs.popitem(last=False)
            self._jobs.move_to_end(key)
            self._add(series, TrainerPoint(t=now, trainers=trainers, running=running))
            series.live = True

    def end_jobs(self, seen: set[str], now: float) -> None:
        """Every job observed before but not in ``seen`` (it finished, was killed, preempted or
        removed) holds nothing from ``now`` on."""
        with self._lock:
            for key, series in self._jobs.items():
                if series.live and key not in seen:
                    self._add(series, TrainerPoint(t=now, trainers=0, running=0))
                    series.live = False

    @staticmethod
    def _add(series: _JobSeries, point: TrainerPoint) -> None:
        last = series.points[-1] if series.points else None
        if last is None or (last.trainers, last.running) != (point.trainers, point.running):
            series.points.append(point)
        series.seen = point.t

    # -- views (the console and the API) ---------------------------------------------------------

    def cluster_history(self) -> list[ClusterPoint]:
        """The cluster's points of the last ``span_s``, oldest first."""
        with self._lock:
            return list(self._cluster)

    def cluster_view(self) -> ClusterHistory:
        """:meth:`cluster_history` as the API answers it (``GET /api/v1/cluster/history``)."""
        return ClusterHistory(interval_s=self.interval_s, span_s=self.span_s, items=self.cluster_history())

    def job_trainers_history(self, key: str, job_id: int | None = None) -> list[TrainerPoint]:
        """Job ``key``'s (``user/name``) trainer counts, oldest first: one point per change, and
        while the job holds trainers a last point with its current values at the latest observation
        (so a step chart reaches the present). [] for a job never observed holding resources, or
        when ``job_id`` (the job's database id) is given and the points are of an earlier job of
        that name (removed, then submitted again)."""
        with self._lock:
            series = self._jobs.get(key)
            if series is None or not series.points or job_id not in (None, series.job_id):
                return []
            points = list(series.points)
            if series.live and series.seen > points[-1].t:
                points.append(points[-1].model_copy(update={"t": series.seen}))
            return points
