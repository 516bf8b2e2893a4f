"""The ``fifo`` policy: static gang scheduling, first come first served.

Each cycle:
  1. order the queue by priority (higher first), then submit time, then key; among jobs of one
     priority, users take turns by dominant share of the cluster (fair share, see fairshare.py;
     first come first served within a user; a job that waits for capacity while jobs of users with
     a smaller share that came later go first waits with ``FairShare``);
  2. for each job: if some worker can never fit any node, it waits (``ExceedsNodeCapacity``) without
     blocking the queue; else try to place all its workers on the free capacity left by the jobs
     admitted before it in this cycle;
  3. a job over its user's quota waits (``QuotaExceeded``) without blocking the queue; a job that
     fits is admitted; the first job that does not fit waits (``InsufficientResources``)
     and, unless ``backfill`` is on, every later job waits behind it (``BehindEarlierJob``).
"""

from __future__ import annotations

from dataclasses import dataclass

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import Admit, Plan, Wait, WaitReason, WorkerPlacement
from paddlecloud.scheduler.fairshare import FairOrder, Vec, capacity, fair_message, holdings, started
from paddlecloud.scheduler.placement import NeverFits, cache_note, place_job
from paddlecloud.scheduler.pool import NodePool
from paddlecloud.scheduler.quota import QuotaLedger
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = ["FifoPolicy", "queue_order"]

Placement = tuple[WorkerPlacement, ...]


def queue_order(job: JobRequest) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.key)


def _demand(job: JobRequest) -> Resources:
    return job.pserver.times(job.pservers) + job.trainer.times(job.trainers)


@dataclass(frozen=True)
class FifoPolicy:
    backfill: bool = False
    name: str = "fifo"

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        pool = NodePool(snap.nodes)
        never_fits = NeverFits(snap.nodes)
        ledger = QuotaLedger.of(snap)
        failed: dict[tuple[int, int, int], int] = {}
        order = FairOrder(snap.queue, queue_order, _wants, capacity(snap.nodes), holdings(snap.running))
        head: JobRequest | None = None
        for job in order.jobs:
            impossible = never_fits(job)
            if impossible:
                plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
                continue
            over = ledger.problem(job, job.trainers, pservers=True)
            if over:  # inadmissible for now, but it does not hold up other users' jobs
                plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
                continue
            if head is not None and not self.backfill:
                plan.wait.append(_behind(job, head, order))
                continue
            placement = _place(pool, job, failed)
            if placement is not None:
                ledger.charge(job, job.trainers, pservers=True)
                nodes = sorted({p.node for p in placement})
                batch = job.batch(job.trainers)
                msg = f"admitted on {', '.join(nodes)}" + (f", global batch {batch}" if batch else "")
                if job.cache_nodes:
                    msg += f"; {cache_note(job.cache_nodes, placement)}"
                plan.admit.append(Admit(job.key, placement, msg, batch))
                continue
            plan.wait.append(_short(job, pool, order.ahead(job)))
            head = head or job
        return plan


def _place(pool: NodePool, job: JobRequest, failed: dict[tuple[int, int, int], int]) -> Placement | None:
    """:func:`place_job`, but a job without pservers whose trainer shape already failed at no more
    trainers fails at once: free capacity only shrinks during a fifo cycle, and placing one role
    needs only enough room summed over the nodes that can take a worker."""
    if job.pservers:
        return place_job(pool, job)
    t = job.trainer
    shape = (t.cpu_m, t.memory, t.gpu)
    if job.trainers >= failed.get(shape, 1 << 30):
        return None
    placement = place_job(pool, job)
    if placement is None:
        failed[shape] = job.trainers
    return placement


def _short(job: JobRequest, pool: NodePool, ahead: int) -> Wait:
    need = _demand(job)
    short = need.shortfall(pool.total()) or ["no single node can hold the workers"]
    msg = f"needs {need.describe()} for {job.pservers + job.trainers} workers; " + "; ".join(short)
    if ahead:  # jobs of users with a smaller share went first
        return Wait(job.key, WaitReason.FAIR_SHARE, fair_message(ahead, msg))
    return Wait(job.key, WaitReason.INSUFFICIENT_RESOURCES, msg)


def _behind(job: JobRequest, head: JobRequest, order: FairOrder) -> Wait:
    msg = f"waiting behind job {head.key} (fifo)"
    if order.rank[head.key] > order.rank[job.key]:  # the head is there by fair share
        return Wait(job.key, WaitReason.FAIR_SHARE, fair_message(order.ahead(job), msg))
    return Wait(job.key, WaitReason.BEHIND_EARLIER_JOB, msg)


def _wants(job: JobRequest) -> Vec:
    return started(job, job.trainers)
