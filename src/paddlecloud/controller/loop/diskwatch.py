"""The disk watch: the storage use of users with running jobs measured often, in a thread of its
own, and a user found over their storage quota handed to the reconciler, which fails their jobs.

    DiskWatch.step (its thread: once a second; tests call it)
      a round at most every PlatformConfig.disk_check_s (10 s), once the last one is done:
        the jobs table ─▶ the users to measure: a job Starting / Running / Preempting, a job that
        ended in the last SETTLE_S (its scratch has just gone), a job not measured since start-up
      per user, a walk that can be paused:
        FileService.walk_home(user)                 PFS home (also refreshes the service's cache)
        backend.disk_usage(key) for each of their jobs   (capability disk-usage: the workers'
                                                      copies, /tmp, logs; backends/jobdirs.py)
        + SampleSet caches (FileService.held_elsewhere)
      at most ``budget_s`` (0.5 s) of walking per step, ``parallel`` (2) users' walks at a time in
      slices of ``slice_s``: a huge home delays its own verdict, not the loop nor, alone, the others
      ─▶ DiskBook.record(user, {job: bytes})       what `get quota` / `pfs du` show as ``jobs``
      ─▶ used > limit: DiskBook.flag(Overage), the reconciler woken; a walk whose running sum
         already passed the limit stops there (``partial``: "at least")
      ─▶ a walk that cannot be done (a folder the server may not read, folders nested deeper than
         the walkers go): flagged with ``error``: the quota is enforced as if passed (fail closed)
    Reconciler.tick ─▶ DiskBook.take_over() ─▶ every Starting/Running job of that user fails
      (failures.end_failed, StorageQuotaExceeded / StorageUnmeasurable, :func:`storage_failure`'s
      message: how much of how much, what counts, what to do)

Cost: nothing in the reconcile loop or a request but reading the book. Users without running jobs
are not walked again (their jobs' folders no longer grow: a finished job keeps only its logs), and a
user is walked at most once per round, so the work is the homes and job folders of the users with
running jobs, every ``disk_check_s``, at most half of one core.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

from sqlalchemy import select

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.backends.base import Capability
from paddlecloud.backends.errors import BackendError
from paddlecloud.backends.jobdirs import DiskWalkError
from paddlecloud.controller.loop.failures import FailReason
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.diskbook import Overage
from paddlecloud.core.phases import JobPhase
from paddlecloud.core.quantity import human_bytes
from paddlecloud.store.tables import JobRow

__all__ = ["SETTLE_S", "DiskWatch", "storage_failure"]

log = logging.getLogger("paddlecloud.diskwatch")

#: a job that ended this recently is measured again (its scratch is being removed)
SETTLE_S = 60.0
_HOLDING = (JobPhase.STARTING, JobPhase.RUNNING, JobPhase.PREEMPTING)


@dataclass
class _Walk:
    """One user's measure, in progress."""

    user: str
    #: their jobs whose folders are walked (``user/name``)
    keys: tuple[str, ...]
    limit: int | None = None
    samplesets: int = 0
    pfs: int = 0
    #: what this walk counted so far, by key
    jobs: dict[str, int] = field(default_factory=dict)
    #: the last figures of the jobs this walk could not measure (the backend unavailable)
    kept: dict[str, int] = field(default_factory=dict)
    steps: Generator[None, None, None] | None = None

    def used(self) -> int:
        return self.pfs + sum(self.jobs.values()) + sum(self.kept.values()) + self.samplesets

    def by_name(self) -> dict[str, int]:
        return {key.partition("/")[2]: n for key, n in {**self.kept, **self.jobs}.items()}


class DiskWatch:
    def __init__(
        self, ctx: Context, *, budget_s: float = 0.5, parallel: int = 2, slice_s: float = 0.05
    ) -> None:
        self.ctx = ctx
        self.budget_s, self.parallel, self.slice_s = budget_s, parallel, slice_s
        self._pending: deque[_Walk] = deque()
        self._walking: list[_Walk] = []
        self._planned_at: float | None = None
        #: rounds planned so far (tests, logs)
        self.rounds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for w in self._walking:  # release the descriptors paused walks hold
            if w.steps is not None:
                w.steps.close()
        self._walking.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                busy = self.step()
            except Exception:  # keep watching; the failure is logged with its traceback
                log.exception("disk watch step failed")
            self._stop.wait(self.budget_s if busy else 1.0)  # walking: at most half of the time

    # -- one step -------------------------------------------------------------------------------

    def step(self) -> bool:
        """Plan a round when one is due, then walk for at most ``budget_s``; True while walks remain."""
        now = self.ctx.clock.now()
        idle = not self._pending and not self._walking
        if idle and (self._planned_at is None or now - self._planned_at >= self.ctx.config.disk_check_s):
            self._plan(now)
        deadline = time.monotonic() + self.budget_s
        while (self._pending or self._walking) and time.monotonic() < deadline:
            while self._pending and len(self._walking) < self.parallel:
                self._walking.append(self._begin(self._pending.popleft()))
            for w in list(self._walking):
                if self._advance(w, min(deadline, time.monotonic() + self.slice_s)):
                    self._walking.remove(w)
        return bool(self._pending or self._walking)

    def _plan(self, now: float) -> None:
        with self.ctx.session() as s:
            rows = s.execute(select(JobRow.user, JobRow.name, JobRow.phase, JobRow.finished_at)).all()
        book = self.ctx.disk
        book.retain({job_key(u, n) for u, n, _, _ in rows})
        folders = Capability.DISK_USAGE in self.ctx.backend.capabilities
        keys: dict[str, list[str]] = {}
        due: dict[str, bool] = {}  # user -> has a job holding resources (measured first)
        for user, name, phase, finished in rows:
            key = job_key(user, name)
            keys.setdefault(user, []).append(key)
            active = phase in _HOLDING
            recent = finished is not None and now - finished <= SETTLE_S
            if active or recent or (folders and not book.measured(key)):
                due[user] = due.get(user, False) or active
        for user in sorted(due, key=lambda u: (not due[u], u)):
            self._pending.append(_Walk(user, tuple(keys[user]) if folders else ()))
        self._planned_at = now
        self.rounds += 1

    def _begin(self, w: _Walk) -> _Walk:
        files = self.ctx.files
        w.limit, w.samplesets = files.quota_of(w.user), files.held_elsewhere(w.user)
        w.steps = self._walk(w)
        return w

    def _walk(self, w: _Walk) -> Generator[None, None, None]:
        for n in self.ctx.files.walk_home(w.user):
            w.pfs = n
            yield
        known = self.ctx.disk.job_bytes(w.user)
        for key in w.keys:
            try:
                for n in self.ctx.backend.disk_usage(key):
                    w.jobs[key] = n
                    yield
            except BackendError as exc:  # the engine unreachable now: its last figure stands
                log.warning("measuring the folders of %s: %s", key, exc)
                w.jobs.pop(key, None)
                w.kept[key] = known.get(key.partition("/")[2], 0)

    def _advance(self, w: _Walk, until: float) -> bool:
        """Walk ``w`` until ``until``; True once it is concluded."""
        assert w.steps is not None
        try:
            for _ in w.steps:
                if time.monotonic() < until:
                    continue
                if w.limit is not None and w.used() - sum(w.kept.values()) > w.limit:
                    w.steps.close()
                    self._conclude(w, partial=True)  # already past it: no need to count the rest
                    return True
                return False
        except (DiskWalkError, PaddleCloudError, RecursionError) as exc:
            deep = isinstance(exc, RecursionError)
            self._conclude(w, error="folders nested too deep to walk" if deep else str(exc))
            return True
        except Exception:  # a bug: logged, this user measured again next round
            log.exception("measuring the storage of %s failed", w.user)
            return True
        self._conclude(w)
        return True

    def _conclude(self, w: _Walk, *, partial: bool = False, error: str = "") -> None:
        book = self.ctx.disk
        if not partial and not error:
            book.record(w.user, {key.partition("/")[2]: n for key, n in w.jobs.items()})
        used = w.used()
        if error or (w.limit is not None and used > w.limit):
            over = Overage(
                user=w.user, used=used, limit=w.limit, pfs=w.pfs, jobs=w.by_name(), samplesets=w.samplesets,
                partial=partial, error=error,
            )  # fmt: skip
            log.warning(
                "storage of %s: %s%s of %s%s", w.user, "at least " if partial else "", human_bytes(used),
                human_bytes(w.limit) if w.limit is not None else "no limit", f" ({error})" if error else "",
            )  # fmt: skip
            book.flag(over)
            self.ctx.wake()
        else:
            book.clear(w.user)


def storage_failure(over: Overage, row: JobRow, output: str) -> tuple[FailReason, str]:
    """Why ``row`` (a running job of ``over.user``, writing its output to ``output``: "" none) is
    failed, and what its owner can do."""
    user, h = over.user, human_bytes
    ask = f"ask an admin to raise the quota (`paddlecloud admin set-quota {user} --storage SIZE`)"
    if over.error:
        return FailReason.STORAGE_UNMEASURABLE, (
            f"the storage {user} uses could not be measured ({over.error}), so the storage quota cannot "
            f"be enforced: every running job of {user} was stopped. Make that folder readable by its "
            "owner again (chmod -R u+rwX) and less deep, or remove it (`paddlecloud pfs rm -r`), or ask "
            "an admin"
        )
    mine = over.jobs.get(row.name)
    this = f"this job's {h(mine)}; " if mine is not None else ""
    parts = [
        f"PFS home {h(over.pfs)}",
        f"jobs' folders {h(sum(over.jobs.values()))} ({this}logs, the workers' copies of the package, "
        "their /tmp)",
    ]
    if over.samplesets:
        parts.append(f"SampleSet caches {h(over.samplesets)}")
    limit = h(over.limit) if over.limit is not None else "no limit"
    return FailReason.STORAGE_QUOTA_EXCEEDED, (
        f"storage quota exceeded: {user} uses {'at least ' if over.partial else ''}{h(over.used)} of "
        f"{limit}: {', '.join(parts)}. Every running job of {user} was stopped. Remove files with "
        f"`paddlecloud pfs rm`{f' (this job wrote its output to {output})' if output else ''}, delete "
        f"finished jobs and their logs with `paddlecloud kill JOB --rm`, or {ask}"
    )
