"""Preemptive and elastic policies: ``elastic`` (the default), ``tiresias`` and ``edl``.

``elastic`` (ours), each cycle over the snapshot:
  1. order every job, waiting or running: priority, then the discretized least-attained-service
     queue (Tiresias' 2D-LAS: less served first), then submit time;
  2. gang minimums, in that order: a running job keeps what it holds; a waiting job gets its
     ``min`` trainers if they fit, else elastic jobs are shrunk towards their ``min`` (least marginal
     loss first), and only then are jobs later in the order preempted; what cannot fit waits, with
     the reason;
  3. in the same order every job is topped up to the trainer count it asked for, taking trainers
     back from jobs later in the order (never below their min);
  4. the capacity left is handed out one trainer at a time to the job with the largest marginal
     speedup (``rate(n + 1) - rate(n)``), up to each job's ``max``, beside its own trainers when
     possible; a running job is not grown again within ``resize_cooldown`` seconds of its last
     resize (shrinking to admit a job is always allowed).
``tiresias`` is step 1-2 with exactly the requested trainers and no growing. ``edl`` is the seed's
controller: FIFO admission at ``min``, then +1 trainer passes in ascending fulfillment
``(cur - min) / (max - min)`` while a node can host one and the cluster load stays under ``max_load``,
and -1 passes in descending fulfillment while it is over.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.alloc import Allocation, tiresias_queue
from paddlecloud.scheduler.decisions import Admit, Plan, Preempt, Resize, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.placement import never_fits
from paddlecloud.scheduler.quota import QuotaLedger
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["EdlPolicy", "ElasticPolicy"]

#: attained trainer-seconds at which a job moves to the next LAS queue
DEFAULT_THRESHOLDS = (3600.0, 36000.0)


@dataclass(frozen=True)
class ElasticPolicy:
    name: str = "elastic"
    elastic: bool = True
    grow: bool = True
    preempt: bool = True
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    resize_cooldown: float = 300.0

    def _lo(self, job: JobRequest) -> int:
        return job.lo if self.elastic else job.trainers

    def _hi(self, job: JobRequest) -> int:
        return job.hi if self.elastic else job.trainers

    def order(self, job: JobRequest) -> tuple[int, int, float, str]:
        return (-job.priority, tiresias_queue(job.attained, self.thresholds), job.submitted_at, job.key)

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        alloc = Allocation.of(snap)
        ledger = QuotaLedger.of(snap)
        jobs = sorted([*snap.running, *snap.queue], key=self.order)
        rank = {j.key: i for i, j in enumerate(jobs)}
        running = {j.key for j in snap.running}
        preempted: set[str] = set()
        admitted: dict[str, list[WorkerPlacement]] = {}
        ranked_running = [j for j in jobs if j.key in running]
        # what the running jobs ahead of each position hold (for the wait reasons)
        self_ahead: list[Resources] = [Resources()]
        for j in jobs:
            held = (
                j.trainer.times(j.running) + j.pserver.times(j.pservers) if j.key in running else Resources()
            )
            self_ahead.append(self_ahead[-1] + held)
        running_ranks = [rank[j.key] for j in ranked_running]
        impossible_of: dict[tuple[Resources, Resources, int], str | None] = {}
        # Within a cycle, room only shrinks for later jobs (admissions consume; fewer jobs are later in
        # the order to take from), so once a shape failed at some count every later need as large fails
        failed: dict[tuple[Resources, Resources, int], int] = {}
        for job in jobs:
            if job.key in running or job.key in preempted:
                continue
            shape = (job.trainer, job.pserver, job.pservers)
            if shape not in impossible_of:
                impossible_of[shape] = never_fits(snap.nodes, job)
            impossible = impossible_of[shape]
            if impossible:
                plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
                continue
            need = self._lo(job)
            over = ledger.problem(job, need, pservers=True)
            if over:  # waits without holding up other users' jobs
                plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
                continue
            if need >= failed.get(shape, 1 << 30):
                plan.wait.append(self._why(alloc, job, rank[job.key], self_ahead[rank[job.key]]))
                continue
            direct = self._direct(alloc, job, need)
            if direct is not None:  # it fits as things are: no what-if copy needed
                admitted[job.key] = direct
                ledger.charge(job, need, pservers=True)
                continue
            later = ranked_running[bisect.bisect_right(running_ranks, rank[job.key]) :]
            trial = self._admit(alloc, job, [j for j in later if j.key in running])
            if trial is None:
                failed[shape] = min(failed.get(shape, 1 << 30), need)
                plan.wait.append(self._why(alloc, job, rank[job.key], self_ahead[rank[job.key]]))
                continue
            alloc, pservers, victims = trial
            admitted[job.key] = pservers
            ledger.charge(job, need, pservers=True)
            for v in later:
                if v.key in victims:
                    ledger.credit(v, v.running, pservers=True)
            preempted |= victims
            running -= victims
        if self.grow and self.elastic:
            self._top_up(alloc, jobs, preempted, ledger)
            self._grow(alloc, snap, jobs, set(admitted), preempted, ledger)
        self._emit(plan, snap, alloc, admitted, preempted)
        return plan

    def _direct(self, alloc: Allocation, job: JobRequest, need: int) -> list[WorkerPlacement] | None:
        pservers = alloc.place_pservers(job)
        if pservers is None:
            return None
        if alloc.grow(job, need):
            return pservers
        for p in pservers:
            alloc.cap.free[p.node] = alloc.cap.free[p.node] + job.pserver
            alloc.total = alloc.total + job.pserver
        return None

    def _admit(
        self, alloc: Allocation, job: JobRequest, later_running: list[JobRequest]
    ) -> tuple[Allocation, list[WorkerPlacement], set[str]] | None:
        trial = alloc.copy()
        need = self._lo(job)
        if self.elastic:  # shrink elastic jobs towards their min, least marginal loss first
            self._shrink_for(trial, job, need)
        victims: set[str] = set()
        if self.preempt:
            for other in reversed(later_running):
                if trial.fits(job.trainer, need) and _pservers_fit(trial, job):
                    break
                trial.shrink(other, 0)
                trial.release_pservers(other)
                victims.add(other.key)
        # keep only the victims that are needed: give one back its old placement if the job still fits
        for other in later_running:  # most important first
            if other.key in victims and trial.restore(other):
                if trial.fits(job.trainer, need) and _pservers_fit(trial, job):
                    victims.discard(other.key)
                else:
                    trial.shrink(other, 0)
                    trial.release_pservers(other)
        pservers = trial.place_pservers(job)
        if pservers is None or not trial.grow(job, need):
            return None
        return trial, pservers, victims

    def _shrink_for(self, trial: Allocation, job: JobRequest, need: int) -> None:
        soft = [(j.rate(trial.count(k)) - j.rate(trial.count(k) - 1), k) for k, j in trial.jobs.items()
                if trial.count(k) > self._lo(j)]  # fmt: skip
        heapq.heapify(soft)
        while soft and not trial.fits(job.trainer, need):
            _, key = heapq.heappop(soft)
            other = trial.jobs[key]
            n = trial.count(key) - 1
            trial.shrink(other, n)
            if n > self._lo(other):
                heapq.heappush(soft, (other.rate(n) - other.rate(n - 1), key))

    def _top_up(self, alloc: Allocation, jobs: list[JobRequest], gone: set[str], ledger: QuotaLedger) -> None:
        """In priority / least-served order, bring every job up to the count its user asked for,
        taking trainers back from jobs later in that order (down to their min) when nothing is free."""
        last = len(jobs) - 1  # donors are taken from the end of the order; counts only go down
        for i, job in enumerate(jobs):
            n = alloc.count(job.key)
            target = min(job.trainers, self._hi(job))
            while job.key not in gone and 0 < n < target and ledger.problem(job, 1) is None:
                if alloc.grow(job, 1):
                    ledger.charge(job, 1)
                    n += 1
                    continue
                while last > i and alloc.count(jobs[last].key) <= self._lo(jobs[last]):
                    last -= 1
                if last <= i:
                    break
                alloc.shrink(jobs[last], alloc.count(jobs[last].key) - 1)
                ledger.credit(jobs[last], 1)

    def _grow(
        self,
        alloc: Allocation,
        snap: Snapshot,
        jobs: list[JobRequest],
        fresh: set[str],
        gone: set[str],
        ledger: QuotaLedger,
    ) -> None:
        heap: list[tuple[float, int, str]] = []
        for i, job in enumerate(jobs):
            n = alloc.count(job.key)
            if job.key in gone or n == 0 or n >= self._hi(job):
                continue
            if job.key not in fresh and snap.now - job.resized_at < self.resize_cooldown:
                continue
            if job.rate(n + 1) > job.rate(n):  # never grow a job into a slowdown
                heapq.heappush(heap, (-(job.rate(n + 1) - job.rate(n)), i, job.key))
        exhausted: set[Resources] = set()  # in this phase free capacity only shrinks
        while heap:
            _, i, key = heapq.heappop(heap)
            job = jobs[i]
            if job.trainer in exhausted or ledger.problem(job, 1):
                continue
            if not alloc.grow(job, 1):
                exhausted.add(job.trainer)  # no node can host one more trainer of this shape
                continue
            ledger.charge(job, 1)
            n = alloc.count(key)
            if n < self._hi(job) and job.rate(n + 1) > job.rate(n):
                heapq.heappush(heap, (-(job.rate(n + 1) - job.rate(n)), i, key))

    def _why(self, alloc: Allocation, job: JobRequest, position: int, held_ahead: Resources) -> Wait:
        need = self._lo(job)
        what = "trainer" if need == 1 else "trainers"
        msg = f"needs {need} {what} ({job.trainer.describe()} each)"
        if held_ahead.gpu + held_ahead.cpu_m > 0 and job.trainer.times(need).fits_in(
            alloc.total + held_ahead
        ):
            msg += f"; {position} job(s) ahead of it in priority / least-attained-service order hold the rest"
            return Wait(job.key, WaitReason.LOWER_PRIORITY, msg)
        return Wait(job.key, WaitReason.INSUFFICIENT_RESOURCES, msg + f"; {alloc.total.describe()} free")

    def _emit(
        self,
        plan: Plan,
        snap: Snapshot,
        alloc: Allocation,
        admitted: dict[str, list[WorkerPlacement]],
        preempted: set[str],
    ) -> None:
        for job in snap.queue:
            if job.key in admitted:
                trainers = alloc.trainers[job.key]
                nodes = sorted({p.node for p in trainers})
                msg = f"admitted with {len(trainers)} trainers on {', '.join(nodes)}"
                plan.admit.append(Admit(job.key, (*admitted[job.key], *trainers), msg))
        for job in snap.running:
            if job.key in preempted:
                plan.preempt.append(
                    Preempt(job.key, "preempted for a job ahead of it (priority / least served)")
                )
                continue
            n = alloc.count(job.key)
            if n != job.running:
                verb = "grown" if n > job.running else "shrunk"
                plan.resize.append(Resize(job.key, n, tuple(alloc.trainers[job.key]),
                                          f"{verb} from {job.running} to {n} trainers"))  # fmt: skip


def _pservers_fit(alloc: Allocation, job: JobRequest) -> bool:
    return job.pservers == 0 or alloc.fits(job.pserver, job.pservers)


@dataclass(frozen=True)
class EdlPolicy:
    """The seed's EDL controller, reproduced (see the module docstring)."""

    name: str = "edl"
    max_load: float = 0.97

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        alloc = Allocation.of(snap)
        admitted: dict[str, list[WorkerPlacement]] = {}
        ledger = QuotaLedger.of(snap)
        for job in sorted(snap.queue, key=lambda j: (-j.priority, j.submitted_at, j.key)):
            impossible = never_fits(snap.nodes, job)
            if impossible:
                plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
                continue
            over = ledger.problem(job, job.lo, pservers=True)
            if over:
                plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
                continue
            trial = alloc.copy()
            pservers = trial.place_pservers(job)
            if pservers is None or not trial.grow(job, job.lo):
                msg = f"needs {job.lo} trainers ({job.trainer.describe()} each) to start"
                plan.wait.append(Wait(job.key, WaitReason.INSUFFICIENT_RESOURCES, msg))
                continue
            alloc = trial
            admitted[job.key] = pservers
            ledger.charge(job, job.lo, pservers=True)
        jobs = [*snap.running, *(j for j in snap.queue if j.key in admitted)]
        # as in the seed, a waiting job's minimum counts towards the load (its pods are pending), so a
        # full cluster sheds trainers and the job is admitted in a following cycle
        waiting = Resources()
        for j in snap.queue:
            if j.key not in admitted and never_fits(snap.nodes, j) is None:  # a job that can never
                waiting = waiting + j.trainer.times(j.lo) + j.pserver.times(j.pservers)  # run sheds nothing
        self._scale(alloc, snap, jobs, waiting, ledger)
        ElasticPolicy()._emit(plan, snap, alloc, admitted, set())
        return plan

    def _load(self, alloc: Allocation, cap: Resources, waiting: Resources) -> float:
        used = cap - alloc.total + waiting
        if cap.gpu:
            return used.gpu / cap.gpu
        return used.cpu_m / cap.cpu_m if cap.cpu_m else 0.0

    def _fulfillment(self, alloc: Allocation, job: JobRequest) -> tuple[float, int, int, int]:
        span = job.hi - job.lo
        f = (alloc.count(job.key) - job.lo) / span if span else 1.0
        return (f, job.trainer.gpu, job.trainer.cpu_m, job.trainer.memory)

    def _scale(
        self,
        alloc: Allocation,
        snap: Snapshot,
        jobs: list[JobRequest],
        waiting: Resources,
        ledger: QuotaLedger,
    ) -> None:
        elastic = [j for j in jobs if j.elastic]
        cap = Resources()
        for n in snap.nodes:
            cap = cap + n.capacity
        for _ in range(10_000):  # dry-run passes until nothing changes (bounded)
            changed = False
            for job in sorted(elastic, key=lambda j: self._fulfillment(alloc, j)):
                if alloc.count(job.key) >= job.hi or ledger.problem(job, 1):
                    continue
                if not alloc.grow(job, 1):
                    continue
                if self._load(alloc, cap, waiting) <= self.max_load:
                    ledger.charge(job, 1)
                    changed = True
                else:  # one more would pass max_load: give it back
                    alloc.shrink(job, alloc.count(job.key) - 1)
            for job in sorted(elastic, key=lambda j: self._fulfillment(alloc, j), reverse=True):
                if self._load(alloc, cap, waiting) <= self.max_load:
                    break
                if alloc.count(job.key) > job.lo:
                    alloc.shrink(job, alloc.count(job.key) - 1)
                    ledger.credit(job, 1)
                    changed = True
            if not changed:
                return
