"""The ``edl`` policy: the seed's EDL controller, reproduced.

FIFO admission at ``min`` (among jobs of one priority, users take turns by dominant share of the
cluster: fair share, see fairshare.py), then dry-run passes, repeated until nothing changes: +1
trainer in ascending fulfillment ``(cur - min) / (max - min)`` while a node can host one and the
cluster load stays under ``max_load``, and -1 in descending fulfillment while it is over. As in the
seed, a waiting job's minimum (trainers and pservers) counts towards the load (its pods are pending),
so a full cluster sheds trainers. Then the waiting jobs start, first come first served, in the room
that made (in the seed Kubernetes bound the pending pods as soon as the trainers were gone, within
the same 5 s loop; waiting for the next cycle added a cycle to every start).

The load is a cluster-wide sum, so it can sit under ``max_load`` while no node has room for a
waiting job: with 5-CPU trainers on 17.5-CPU nodes, 2.5 CPUs of each node (14 %) can never hold
one, more than the 3 % headroom. The seed leaves such a job pending until some job ends (its own
experiment log shows one); here a waiting job that does not fit after the passes has trainers shed
for it, one at a time in the same descending fulfillment, never below a min, until it fits (if it
cannot fit even so, nothing is shed), which is what the seed's report says the autoscaler is for:
"scales existing jobs down to make room for the new jobs". The first job that cannot start stops
the rest.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.decisions import Plan, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.elastic import emit
from paddlecloud.scheduler.fairshare import FairOrder, Vec, capacity, fair_message, holdings, started
from paddlecloud.scheduler.placement import NeverFits
from paddlecloud.scheduler.quota import QuotaLedger
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["EdlPolicy"]


def _fifo(job: JobRequest) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.key)


@dataclass(frozen=True)
class EdlPolicy:
    """The seed's EDL controller, reproduced (see the module docstring)."""

    name: str = "edl"
    max_load: float = 0.97

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        alloc = Allocation.of(snap)
        ledger = QuotaLedger.of(snap)
        never_fits = NeverFits(snap.nodes)
        cap = capacity(snap.nodes)
        order = FairOrder(snap.queue, _fifo, lambda j: started(j, j.lo), cap, holdings(snap.running))
        roomless: list[JobRequest] = []  # waiting for room only (not for quota, not too big)
        admitted = self._admit(plan, order, alloc, ledger, never_fits, roomless)
        jobs = [*snap.running, *(j for j in snap.queue if j.key in admitted)]
        wc = wm = wg = 0  # a job that can never run sheds nothing
        for j in snap.queue:
            if j.key not in admitted and never_fits(j) is None:
                c, m, g = started(j, j.lo)
                wc, wm, wg = wc + c, wm + m, wg + g
        scaler = _Scaler(self.max_load, alloc, ledger, cap, (wc, wm, wg))
        scaler.run(jobs)
        late: set[str] = set()
        for j in roomless:  # first come first served; the first that cannot start stops the rest
            if not scaler.make_room(j, admitted):
                break
            late.add(j.key)
        plan.wait[:] = [w for w in plan.wait if w.job not in late]
        emit(plan, snap, alloc, admitted, set())
        return plan

    def _admit(
        self, plan: Plan, order: FairOrder, alloc: Allocation, ledger: QuotaLedger, never_fits: NeverFits,
        roomless: list[JobRequest],
    ) -> dict[str, list[WorkerPlacement]]:  # fmt: skip
        """FIFO admission at each job's min; what does not fit waits (later jobs may still start) and,
        when it waits for room only, goes to ``roomless``."""
        admitted: dict[str, list[WorkerPlacement]] = {}
        for job in order.jobs:
            impossible = never_fits(job)
            if impossible:
                plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
                continue
            over = ledger.problem(job, job.lo, pservers=True)
            if over:
                plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
                continue
            alloc.begin()
            pservers = alloc.place_pservers(job)
            if pservers is None or not alloc.grow(job, job.lo):
                alloc.rollback()
                msg = f"needs {job.lo} trainers ({job.trainer.describe()} each) to start"
                ahead = order.ahead(job)  # jobs of users with a smaller share went first
                why = Wait(job.key, WaitReason.FAIR_SHARE, fair_message(ahead, msg)) if ahead else None
                plan.wait.append(why or Wait(job.key, WaitReason.INSUFFICIENT_RESOURCES, msg))
                roomless.append(job)
                continue
            alloc.commit()
            admitted[job.key] = pservers
            ledger.charge(job, job.lo, pservers=True)
        return admitted


class _Scaler:
    """The +1 / -1 passes over the elastic jobs (see the module docstring)."""

    def __init__(
        self, max_load: float, alloc: Allocation, ledger: QuotaLedger, cap: Vec, waiting: Vec
    ) -> None:
        self.max_load, self.alloc, self.ledger = max_load, alloc, ledger
        (cc, _, cg), (wc, _, wg) = cap, waiting
        #: load = (used - free + extra) / cap, on GPUs (or cpu on a cluster without GPUs)
        self.gpus = bool(cg)
        self.used, self.cap = (cg + wg, cg) if cg else (cc + wc, cc)
        self.elastic: list[JobRequest] = []
        self._static: list[tuple[int, int, int, int, int]] = []
        #: what the trainers above a min add up to (cpu, memory, GPUs), once make_room needs it
        self._spare: list[int] | None = None

    def load(self, extra_cpu: int = 0, extra_gpu: int = 0) -> float:
        """Used / capacity (GPUs, or cpu on a cluster without GPUs), with ``extra`` more in use."""
        if not self.cap:
            return 0.0
        pool = self.alloc.pool
        if self.gpus:
            return (self.used - pool.tgpu + extra_gpu) / self.cap
        return (self.used - pool.tcpu + extra_cpu) / self.cap

    def order(self, reverse: bool = False) -> list[int]:
        """Elastic jobs (positions) by ``(cur - min) / (max - min)``, then trainer gpu, cpu, memory."""
        trainers = self.alloc.trainers
        keys = [
            ((len(trainers.get(j.key, ())) - lo) / span if span else 1.0, g, c, m)
            for j, (lo, span, g, c, m) in zip(self.elastic, self._static, strict=True)
        ]
        return sorted(range(len(keys)), key=keys.__getitem__, reverse=reverse)

    def run(self, jobs: list[JobRequest]) -> None:
        self.elastic = [j for j in jobs if j.elastic]
        self._static = [
            (j.lo, j.hi - j.lo, j.trainer.gpu, j.trainer.cpu_m, j.trainer.memory) for j in self.elastic
        ]
        for _ in range(10_000):  # dry-run passes until nothing changes (bounded)
            grown = self._grow_pass()
            if not (self._shrink_pass() or grown):
                return

    def _grow_pass(self) -> bool:
        """+1 trainer each, least fulfilled first, while the load stays under ``max_load``; a trainer
        that would pass it is not added (what placing and removing it leaves is kept)."""
        alloc, ledger, changed = self.alloc, self.ledger, False
        trainers, limited = alloc.trainers, bool(ledger.quotas)
        for k in self.order():
            job = self.elastic[k]
            lo, span = self._static[k][:2]
            if len(trainers.get(job.key, ())) >= lo + span or (limited and ledger.problem(job, 1)):
                continue
            spot = alloc.spot(job)
            if spot is None:
                continue
            if self.load(job.trainer.cpu_m, job.trainer.gpu) <= self.max_load:
                alloc.add_at(job, spot)
                ledger.charge(job, 1)
                changed = True
            else:  # one more would pass max_load: it is given straight back
                alloc.bounce(job, spot)
        return changed

    def make_room(self, job: JobRequest, admitted: dict[str, list[WorkerPlacement]]) -> bool:
        """Start waiting ``job`` at its min now (into ``admitted``), shedding trainers one at a time
        (most fulfilled job first, never below a min) until it fits; if it cannot fit even so,
        nothing changes and the answer is False."""
        alloc, ledger = self.alloc, self.ledger
        if ledger.problem(job, job.lo, pservers=True):  # earlier admissions of this cycle used the quota
            return False
        alloc.begin()
        shed: list[JobRequest] = []
        heap: list[tuple[float, int, int, int, int]] | None = None
        while True:
            pservers = alloc.place_pservers(job)
            if pservers is not None:
                if alloc.grow(job, job.lo):
                    break
                alloc.unplace_pservers(job, pservers)
            if heap is None:
                if not self._could_fit(job):
                    alloc.rollback()
                    return False
                heap = self._donors()
            gone = self._shed_one(heap)
            if gone is None:
                alloc.rollback()
                return False
            shed.append(gone)
        alloc.commit()
        for j in shed:  # (shedding came after _could_fit, which set _spare)
            ledger.credit(j, 1)
            t, spare = j.trainer, self._spare or [0, 0, 0]
            self._spare = [spare[0] - t.cpu_m, spare[1] - t.memory, spare[2] - t.gpu]
        ledger.charge(job, job.lo, pservers=True)
        admitted[job.key] = pservers
        return True

    def _could_fit(self, job: JobRequest) -> bool:
        """Whether ``job``'s min fits in the free capacity plus every trainer above a min, summed
        over the nodes (a cheap bound: no shedding is tried for a job it rules out)."""
        if self._spare is None:
            spare = [0, 0, 0]
            for j, (lo, _, g, c, m) in zip(self.elastic, self._static, strict=True):
                extra = self.alloc.count(j.key) - lo
                if extra > 0:
                    spare = [spare[0] + c * extra, spare[1] + m * extra, spare[2] + g * extra]
            self._spare = spare
        pool = self.alloc.pool
        free = (pool.tcpu, pool.tmem, pool.tgpu)
        return all(n <= s + f for n, s, f in zip(started(job, job.lo), self._spare, free, strict=True))

    def _donors(self) -> list[tuple[float, int, int, int, int]]:
        """The elastic jobs above their min, most fulfilled first (as :meth:`order` reversed)."""
        trainers, heap = self.alloc.trainers, []
        for k, (j, (lo, span, g, c, m)) in enumerate(zip(self.elastic, self._static, strict=True)):
            n = len(trainers.get(j.key, ()))
            if n > lo:
                heap.append((-(n - lo) / span, -g, -c, -m, k))
        heapq.heapify(heap)
        return heap

    def _shed_one(self, heap: list[tuple[float, int, int, int, int]]) -> JobRequest | None:
        """One trainer less for the most fulfilled elastic job above its min (None: none is)."""
        if not heap:
            return None
        _, g, c, m, k = heapq.heappop(heap)
        job, (lo, span) = self.elastic[k], self._static[k][:2]
        n = self.alloc.count(job.key) - 1
        self.alloc.shrink(job, n)
        if n > lo:
            heapq.heappush(heap, (-(n - lo) / span, g, c, m, k))
        return job

    def _shrink_pass(self) -> bool:
        alloc, changed = self.alloc, False
        for k in self.order(reverse=True):
            if self.load() <= self.max_load:
                break
            job = self.elastic[k]
            n = alloc.count(job.key)
            if n > self._static[k][0]:
                alloc.shrink(job, n - 1)
                self.ledger.credit(job, 1)
                changed = True
        return changed
