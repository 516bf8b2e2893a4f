"""Working allocation for preemptive and elastic policies: what-if placement on a scratch copy.

:class:`Allocation` starts from the snapshot's free capacity (running jobs hold what they hold) and
lets a policy release a job's trainers, place new ones, and read back each job's final placement.
Nothing here decides; policies do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import WorkerPlacement
from paddlecloud.scheduler.snapshot import FreeCapacity, JobRequest, Snapshot

__all__ = ["Allocation", "tiresias_queue"]


def tiresias_queue(attained: float, thresholds: tuple[float, ...]) -> int:
    """Index of the discretized least-attained-service queue (0 = least served)."""
    for i, limit in enumerate(thresholds):
        if attained < limit:
            return i
    return len(thresholds)


@dataclass
class Allocation:
    cap: FreeCapacity
    #: job key -> its trainers' placement (index order) in this what-if
    trainers: dict[str, list[WorkerPlacement]] = field(default_factory=dict)
    jobs: dict[str, JobRequest] = field(default_factory=dict)
    #: free capacity summed over nodes (a necessary condition, checked before any scan)
    total: Resources = field(default_factory=Resources)
    #: nodes that got capacity back, newest last: where the next trainer most likely fits
    hints: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, snap: Snapshot) -> Allocation:
        alloc = cls(FreeCapacity.of(snap.nodes))
        alloc.total = alloc.cap.total()
        for job in snap.running:
            alloc.jobs[job.key] = job
            alloc.trainers[job.key] = [p for p in job.placement if p.role == "trainer"]
        return alloc

    def copy(self) -> Allocation:
        return Allocation(
            self.cap.copy(),
            {k: list(v) for k, v in self.trainers.items()},
            dict(self.jobs),
            self.total,
            list(self.hints[-64:]),
        )

    def count(self, key: str) -> int:
        return len(self.trainers.get(key, ()))

    def _give_back(self, job: JobRequest, p: WorkerPlacement) -> None:
        self.cap.free[p.node] = self.cap.free[p.node] + job.trainer
        self.cap.gpus[p.node].extend(p.gpus)
        self.total = self.total + job.trainer
        self.hints.append(p.node)

    def _take(self, job: JobRequest, node: str) -> WorkerPlacement:
        gpus = tuple(self.cap.gpus[node][: job.trainer.gpu])
        del self.cap.gpus[node][: job.trainer.gpu]
        self.cap.free[node] = self.cap.free[node] - job.trainer
        self.total = self.total - job.trainer
        return WorkerPlacement("trainer", len(self.trainers.setdefault(job.key, [])), node, gpus)

    def shrink(self, job: JobRequest, to: int) -> None:
        """Release trainers above ``to`` (highest index first)."""
        held = self.trainers.get(job.key, [])
        while len(held) > to:
            self._give_back(job, held.pop())

    def restore(self, job: JobRequest) -> bool:
        """Give a released job exactly its old placement back, if all of it is still free."""
        need: dict[str, Resources] = {}
        for p in job.placement:
            need[p.node] = need.get(p.node, Resources()) + (
                job.trainer if p.role == "trainer" else job.pserver
            )
        gpus_free = {n: set(self.cap.gpus[n]) for n in need}
        if not all(r.fits_in(self.cap.free[n]) for n, r in need.items()) or not all(
            set(p.gpus) <= gpus_free[p.node] for p in job.placement
        ):
            return False
        for n, r in need.items():
            self.cap.free[n] = self.cap.free[n] - r
            self.total = self.total - r
        for p in job.placement:
            for g in p.gpus:
                self.cap.gpus[p.node].remove(g)
        self.trainers[job.key] = [p for p in job.placement if p.role == "trainer"]
        self.jobs[job.key] = job
        return True

    def release_pservers(self, job: JobRequest) -> None:
        for p in job.placement:
            if p.role == "pserver":
                self.cap.free[p.node] = self.cap.free[p.node] + job.pserver
                self.total = self.total + job.pserver
                self.hints.append(p.node)

    def fits(self, need: Resources, n: int) -> bool:
        """Could ``n`` workers of ``need`` be placed now (ignoring which job)?"""
        if not need.times(n).fits_in(self.total):
            return False
        total = 0
        for node in self.cap.order:
            total += _how_many(self.cap.free[node], need)
            if total >= n:
                return True
        return n <= 0

    def grow(self, job: JobRequest, n: int) -> bool:
        """Add ``n`` trainers, all or none; nodes the job already uses first, then the fullest fit."""
        if n <= 0:
            return True
        if not job.trainer.times(n).fits_in(self.total):
            return False
        held = self.trainers.setdefault(job.key, [])
        used = list(dict.fromkeys(p.node for p in held))  # ordered: results must not depend on hashing
        if n == 1:  # the common elastic step: beside its own trainers, recently freed nodes, first fit
            for node in [*used, *reversed(self.hints), *self.cap.order]:
                if job.trainer.fits_in(self.cap.free[node]):
                    held.append(self._take(job, node))
                    self.jobs.setdefault(job.key, job)
                    return True
            return False
        room = (name for name in self.cap.order if job.trainer.fits_in(self.cap.free[name]))
        order = sorted(
            room,  # only nodes that can take one: a busy cluster has few to rank
            key=lambda name: (name not in used, -_how_many(self.cap.free[name], job.trainer)),
        )
        added: list[WorkerPlacement] = []
        for node in order:
            while len(added) < n and job.trainer.fits_in(self.cap.free[node]):
                p = self._take(job, node)
                added.append(WorkerPlacement("trainer", len(held) + len(added), node, p.gpus))
            if len(added) == n:
                held.extend(added)
                self.jobs.setdefault(job.key, job)
                return True
        for p in added:  # not all fit: undo
            self._give_back(job, p)
        return False

    def place_pservers(self, job: JobRequest) -> list[WorkerPlacement] | None:
        out: list[WorkerPlacement] = []
        for i in range(job.pservers):
            node = next((n for n in self.cap.order if job.pserver.fits_in(self.cap.free[n])), None)
            if node is None:
                for p in out:
                    self.cap.free[p.node] = self.cap.free[p.node] + job.pserver
                    self.total = self.total + job.pserver
                return None
            self.cap.free[node] = self.cap.free[node] - job.pserver
            self.total = self.total - job.pserver
            out.append(WorkerPlacement("pserver", i, node))
        return out


def _how_many(free: Resources, need: Resources) -> int:
    counts = []
    if need.cpu_m:
        counts.append(free.cpu_m // need.cpu_m)
    if need.memory:
        counts.append(free.memory // need.memory)
    if need.gpu:
        counts.append(free.gpu // need.gpu)
    return max(min(counts), 0) if counts else 1 << 30
