"""The ``pods`` policy: Kubernetes' default scheduler as the EDL report's autoscaling-OFF baseline ran.

A baseline for comparisons (``paddlecloud sim``), not a policy to run a cluster with: it binds a job's
workers one by one, without a gang, so a job can hold part of its trainers and wait for the rest, which
a fixed-size distributed job cannot train with (the partial-gang waste gang scheduling exists to
avoid). The seed's EDL experiment ran its OFF case this way: each job's pods were created at once and
the scheduler bound them one at a time in creation order, so when 5 whole jobs filled most of the
cluster, a 6th held 49 of its 60 trainers (``doc/edl/experiment/README.md``); ``fifo`` places jobs
whole, and a cluster where the 6th does not fit whole leaves that room idle.

Each cycle, oldest job first (priority, then submit time; no fair share, no quota ordering: the
default scheduler has neither):
  1. a running job holding fewer trainers than it asked for gets more, one at a time, while they fit
     (its pending pods are older than any waiting job's);
  2. a waiting job that can never fit any node waits (``ExceedsNodeCapacity``); one over its user's
     quota waits (``QuotaExceeded``); else it starts with its pservers and as many trainers as fit,
     at least one (else it waits, ``InsufficientResources``, and later jobs still try: an
     unschedulable pod does not block the queue).
Decisions come out as the elastic policies' do (:func:`~paddlecloud.scheduler.elastic.emit`): an
admission with the trainers it got, a Resize for each job that got more.
"""

from __future__ import annotations

from dataclasses import dataclass

from paddlecloud.scheduler.alloc import Allocation
from paddlecloud.scheduler.decisions import Plan, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.elastic import emit
from paddlecloud.scheduler.fifo import queue_order
from paddlecloud.scheduler.placement import NeverFits
from paddlecloud.scheduler.quota import QuotaLedger
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["PodsPolicy"]


@dataclass(frozen=True)
class PodsPolicy:
    """Workers bound one by one, oldest job first, no gang (see the module docstring)."""

    name: str = "pods"

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        alloc = Allocation.of(snap)
        ledger = QuotaLedger.of(snap)
        for job in sorted(snap.running, key=queue_order):
            _fill(alloc, ledger, job)
        never_fits = NeverFits(snap.nodes)
        admitted: dict[str, list[WorkerPlacement]] = {}
        for job in sorted(snap.queue, key=queue_order):
            impossible = never_fits(job)
            if impossible:
                plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
                continue
            over = ledger.problem(job, 1, pservers=True)
            if over:
                plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
                continue
            alloc.begin()
            pservers = alloc.place_pservers(job)
            if pservers is None or not alloc.grow(job, 1):
                alloc.rollback()
                need = f"{job.pservers} pservers and a trainer" if job.pservers else "a trainer"
                plan.wait.append(Wait(job.key, WaitReason.INSUFFICIENT_RESOURCES, f"no room for {need}"))
                continue
            alloc.commit()
            ledger.charge(job, 1, pservers=True)
            admitted[job.key] = pservers
            _fill(alloc, ledger, job)
        emit(plan, snap, alloc, admitted, set())
        return plan


def _fill(alloc: Allocation, ledger: QuotaLedger, job: JobRequest) -> None:
    """One trainer at a time up to what ``job`` asked for, while they fit (and its quota allows)."""
    while alloc.count(job.key) < job.trainers and not ledger.problem(job, 1) and alloc.grow(job, 1):
        ledger.charge(job, 1)
