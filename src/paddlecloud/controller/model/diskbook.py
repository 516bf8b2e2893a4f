"""What the disk watch last measured (``controller.loop.diskwatch``), for whoever reads it.

    DiskWatch ──record(user, {job: bytes})──▶ DiskBook ──user_bytes(user)──▶ FileService (get quota,
              ──flag(Overage)───────────────▶          ──take_over()─────▶ Reconciler (fails the
                                                                            user's running jobs)
    JobService.delete ──forget(key)─────────▶

The book holds, per user, the bytes each of their jobs' own folders held at the last measure (a job
deleted is dropped at once), and the users found over their storage quota (or whose use could not
be measured) since the reconciler last took them. Nothing here touches a disk or the database; every
method is safe from any thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["DiskBook", "Overage"]


@dataclass(frozen=True)
class Overage:
    """A user whose storage use passed their limit when it was measured (or could not be measured:
    ``error``). ``partial``: the walk stopped as soon as the sum passed the limit, so the figures are
    at least these."""

    user: str
    used: int
    limit: int | None
    #: the parts of ``used``: PFS home, the jobs' own folders (by job name), SampleSet caches
    pfs: int
    jobs: dict[str, int]
    samplesets: int
    partial: bool = False
    #: why the use could not be measured ("" : it was); the quota is then enforced as if passed
    error: str = ""


class DiskBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: user -> job name -> bytes of that job's folders at the last measure
        self._jobs: dict[str, dict[str, int]] = {}
        #: user -> why they are over, until the reconciler takes it
        self._over: dict[str, Overage] = {}

    def user_bytes(self, user: str) -> int:
        """The bytes of ``user``'s jobs' own folders as last measured (0: none measured)."""
        with self._lock:
            return sum(self._jobs.get(user, {}).values())

    def job_bytes(self, user: str) -> dict[str, int]:
        with self._lock:
            return dict(self._jobs.get(user, {}))

    def measured(self, key: str) -> bool:
        user, _, name = key.partition("/")
        with self._lock:
            return name in self._jobs.get(user, {})

    def record(self, user: str, jobs: dict[str, int]) -> None:
        """``user``'s jobs' folders as just measured (by job name); jobs not named keep their figure."""
        with self._lock:
            self._jobs.setdefault(user, {}).update(jobs)

    def forget(self, key: str) -> None:
        """The job ``user/name`` was deleted (its folders with it)."""
        user, _, name = key.partition("/")
        with self._lock:
            mine = self._jobs.get(user)
            if mine is not None:
                mine.pop(name, None)

    def retain(self, keys: set[str]) -> None:
        """Only the jobs ``keys`` (``user/name``) exist: forget the others."""
        with self._lock:
            for user, mine in list(self._jobs.items()):
                for name in [n for n in mine if f"{user}/{n}" not in keys]:
                    del mine[name]
                if not mine:
                    del self._jobs[user]

    def flag(self, over: Overage) -> None:
        with self._lock:
            self._over[over.user] = over

    def clear(self, user: str) -> None:
        """``user`` was measured within the limit."""
        with self._lock:
            self._over.pop(user, None)

    def take_over(self) -> list[Overage]:
        """The users flagged since the last call (each once: a user still over is flagged again by
        the next measure, so a job admitted later is judged on a fresh figure)."""
        with self._lock:
            out, self._over = list(self._over.values()), {}
        return out
