"""Per-user quotas inside one scheduling cycle: what each user holds and whether a job may add more.

:class:`QuotaLedger` starts from what the snapshot's running jobs hold per user and is charged as a
policy admits or grows jobs (and credited as it shrinks or preempts them). A job over its user's
quota waits with ``QuotaExceeded`` and a message naming the dimension; it never blocks other users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paddlecloud.core.quantity import format_cpu, human_memory
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["QuotaLedger"]


@dataclass
class QuotaLedger:
    quotas: dict[str, Resources]
    used: dict[str, Resources] = field(default_factory=dict)

    @classmethod
    def of(cls, snap: Snapshot) -> QuotaLedger:
        ledger = cls(dict(snap.quotas))
        for job in snap.running:
            ledger.charge(job, job.running, pservers=True)
        return ledger

    def _demand(self, job: JobRequest, trainers: int, pservers: bool) -> Resources:
        return job.trainer.times(trainers) + (job.pserver.times(job.pservers) if pservers else Resources())

    def problem(self, job: JobRequest, trainers: int, pservers: bool = False) -> str | None:
        """Why ``trainers`` more trainers (and the pservers) would break the user's quota, or None."""
        limit = self.quotas.get(job.user)
        if limit is None:
            return None
        used = self.used.get(job.user, Resources())
        after = used + self._demand(job, trainers, pservers)
        if after.fits_in(limit):
            return None
        parts = []
        if after.cpu_m > limit.cpu_m:
            parts.append(f"cpu {format_cpu(used.cpu_m)}/{format_cpu(limit.cpu_m)} used")
        if after.memory > limit.memory:
            parts.append(f"memory {human_memory(used.memory)}/{human_memory(limit.memory)} used")
        if after.gpu > limit.gpu:
            parts.append(f"gpu {used.gpu}/{limit.gpu} used")
        need = self._demand(job, trainers, pservers).describe()
        return f"user quota of {job.user}: {', '.join(parts)}; the job needs {need} more"

    def charge(self, job: JobRequest, trainers: int, pservers: bool = False) -> None:
        if job.user in self.quotas:  # only limited users' use is ever looked at
            self.used[job.user] = self.used.get(job.user, Resources()) + self._demand(job, trainers, pservers)

    def credit(self, job: JobRequest, trainers: int, pservers: bool = False) -> None:
        if job.user in self.quotas:
            self.used[job.user] = self.used.get(job.user, Resources()) - self._demand(job, trainers, pservers)
