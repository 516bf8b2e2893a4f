"""Preemptive and elastic policies: ``elastic`` (the default) and ``tiresias`` (``edl``: see edl.py).

``elastic`` (ours), each cycle over the snapshot:
  1. order every job, waiting or running: priority, then the discretized least-attained-service
     queue (less served first; thresholds 10,000 / 30,000 / 90,000 GPU-seconds, a x3 ladder, where
     ``tiresias`` keeps Tiresias' 3,600 / 36,000), then submit time (first come first served within
     a queue, so that jobs of one queue do not take turns); among jobs of one priority, users take
     turns by dominant share of the cluster (fair share, see fairshare.py), so the jobs of the user
     holding the most come last: the first preempted, and the first to give trainers back when
     jobs ahead are topped up;
  2. gang minimums, in that order: a running job keeps what it holds; a waiting job gets its
     ``min`` trainers if they fit, else elastic jobs are shrunk towards their ``min`` (the last in
     the order first: the most served give back first, as in step 3), and only then are jobs later
     in the order preempted; what cannot fit waits, with the reason;
  3. in the same order every job is topped up to the trainer count it asked for, taking trainers
     back from jobs later in the order (never below their min); a job admitted in this cycle is
     first placed whole at that count where it fits as it is, on the fewest nodes (it has no
     trainers yet, so packing it costs nothing; one trainer at a time would scatter it);
  3b. (opt-in, ``fair_p``; off in ``elastic``) adaptive-batch jobs (a goodput table) take no part
     in step 3; what the running ones hold above their ``min`` and what is free are shared among them
     by goodput fairness (goodfair.py): the power mean (``fair_p``, 0.5 best) of their speed-ups over one
     trainer, each weighted by ``fair_weight ** -queue`` (its LAS queue: the less served count more),
     a running job's speed-up at any count but its own discounted by ``fair_restart`` (a resize costs
     a restart); the admission order of step 2 is still LAS. With no adaptive job nothing changes.
     With ``fair_group`` the adaptive jobs are one claimant in step 3 (:class:`_Group`: each adds
     its requested count to the group's reservation in the order, the group is topped up to it,
     fixed-batch jobs ahead take only what it holds beyond that) and the share works inside it;
     with ``fair_exchange`` the share starts from the counts held and exchanges trainers; with
     ``fair_restart_s`` the discount is restart-aware (resizecost.py: larger for a young job, paid
     against the count the job ran at when the cycle began);
  4. the capacity left is handed out one trainer at a time to the job with the largest marginal
     speedup (``rate(n + 1) - rate(n)``), up to each job's ``max``, beside its own trainers when
     possible; a running job is not grown again within ``resize_cooldown`` seconds of its last
     resize (shrinking to admit a job is always allowed).
``tiresias`` is step 1-2 with exactly the requested trainers and no growing.

Cost: what-if admissions run as journaled trials on the cycle's node pool (no copies), and the
elastic jobs that could give a trainer back wait in a heap kept across admissions, so a cycle costs
about what it changes; the top-up moves what one donor can spare to its taker in one step
(``Allocation.hand_over``) when that leaves what moving them one at a time leaves; see
bench/sched_scale.py.
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate, compress
from operator import attrgetter

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.alloc import Allocation, tiresias_queue
from paddlecloud.scheduler.consolidate import Packer, consolidate, packs
from paddlecloud.scheduler.decisions import (
    Plan,
    Preempt,
    Wait,
    WaitReason,
    WorkerPlacement,
    admit_of,
    resize_of,
)
from paddlecloud.scheduler.fairshare import FairOrder, Vec, capacity, fair_message, held
from paddlecloud.scheduler.goodfair import Claim, share
from paddlecloud.scheduler.placement import NeverFits, cache_note
from paddlecloud.scheduler.quota import QuotaLedger
from paddlecloud.scheduler.resizecost import paid_at, restart_factor
from paddlecloud.scheduler.snapshot import JobRequest, Snapshot

__all__ = [
    "ADAPTIVE_SERVICE_SCALE",
    "ELASTIC_THRESHOLDS",
    "REBATCH_RATIO",
    "SERVICE_EXPONENT",
    "TIRESIAS_THRESHOLDS",
    "ElasticPolicy",
    "emit",
    "service",
]

#: attained trainer-seconds (GPU-seconds for GPU jobs) at which a job moves to the next LAS queue:
#: Tiresias' two thresholds (the ``tiresias`` policy, calibrated against the Pollux paper's runs)
TIRESIAS_THRESHOLDS = (3600.0, 36000.0)
#: ``elastic``'s: its jobs are topped up to what they asked for and grown, so they collect service
#: faster than rigid ones; a x3 ladder from 10,000 keeps medium jobs ahead of the longest for longer
#: (mean avg JCT of the 8 Pollux workloads at load 1.0: 3,571 s, 3,846 s with Tiresias' thresholds)
ELASTIC_THRESHOLDS = (10000.0, 30000.0, 90000.0)
#: an adaptive job whose best global batch for its trainers is this factor above or below the one it
#: runs at is given it (a batch-only resize), at most once per ``resize_cooldown`` since its last
#: resize of any kind (``JobRequest.rebatched_at``)
REBATCH_RATIO = 1.5


#: an adaptive job's attained service is weighted by ``rate(1) ** SERVICE_EXPONENT`` (see :func:`service`;
#: every job adaptive, mean avg JCT at load 1.0 / 1.5: exponent 1 3,033 / 4,004 s, 2 2,934 / 3,911 s,
#: 3 2,904 / 3,828 s, 5 2,972 s at 1.0)
SERVICE_EXPONENT = 3.0
#: ... and divided by this: an adaptive job's LAS ladder is 3x longer (30,000 / 90,000 / 270,000),
#: so a long adaptive job (yolov3) is demoted and shrunk later (every job adaptive, mean avg JCT at
#: load 1.0 / 1.5: scale 1 2,904 / 3,828 s, 2 2,957 / 3,886, 3 2,895 / 3,736, 4 2,892 / 3,771)
ADAPTIVE_SERVICE_SCALE = 3.0


_key, _node = attrgetter("key"), attrgetter("node")


def service(job: JobRequest) -> float:
    """The attained service that places a job in its LAS queue: trainer-seconds, and for an adaptive
    job trainer-seconds x ``rate(1) ** SERVICE_EXPONENT / ADAPTIVE_SERVICE_SCALE``, ``rate(1)``
    being its goodput on one trainer relative to its initial batch. ``rate(1)`` is large while the
    job's gradient noise scale is small (early in training a small batch is worth several times its
    examples): one trainer then moves it fast and more trainers add little (its table keeps a small
    batch), so it is counted as served sooner and its trainers go first to jobs that use them
    better. Later, at ``rate(1)`` near 1, the scale keeps it in its queue 3x longer than a
    fixed-batch job, so a long adaptive job is demoted and shrunk later (a measured choice: see
    :data:`ADAPTIVE_SERVICE_SCALE`; a fixed-batch job's service is unchanged)."""
    if not job.batches:
        return job.attained
    weight: float = job.rate(1) ** SERVICE_EXPONENT
    return job.attained * weight / ADAPTIVE_SERVICE_SCALE


@dataclass(frozen=True)
class ElasticPolicy:
    name: str = "elastic"
    elastic: bool = True
    grow: bool = True
    preempt: bool = True
    thresholds: tuple[float, ...] = ELASTIC_THRESHOLDS
    resize_cooldown: float = 300.0
    #: adaptive-batch jobs share trainers by goodput fairness (:mod:`goodfair`) with this power-mean
    #: exponent (0.5 measured best); None (the default): they are topped up in the LAS order like
    #: the others. Off by default: with every job adaptive it wins (Pollux workloads, mean avg JCT
    #: 2,656 / 3,659 s at load 1.0 / 1.5 against 2,895 / 3,736), with half of them adaptive the
    #: adaptive half starves behind the fixed-batch jobs' top-up (3,679 s at 1.0, against 3,255)
    fair_p: float | None = None
    #: a running adaptive job's speed-up at a count other than its own is discounted by this
    fair_restart: float = 0.9
    #: an adaptive job resized less than this long ago keeps its count in the fair share
    fair_cooldown: float = 0.0
    #: an adaptive job's utility is weighted by this to the power of minus its LAS queue
    fair_weight: float = 2.0
    #: the adaptive jobs are one claimant in step 3: in the LAS order each running one adds its
    #: requested count to the group's reservation, and the group (not the job) is topped up to it,
    #: taking from later fixed-batch jobs; fixed-batch jobs ahead may take what the group holds
    #: beyond the reservation of the adaptive jobs ahead of them. The share then works inside it
    fair_group: bool = False
    #: the share hands out what is free too (else only what the adaptive jobs hold above their min;
    #: the free capacity then goes to step 4, every job alike)
    fair_free: bool = True
    #: the share starts from the counts the jobs hold and moves trainers between them while that
    #: gains (an exchange search: fewer moves, a cheaper round), instead of from every job's min
    fair_exchange: bool = False
    #: restart-aware share (:mod:`resizecost`): a running adaptive job's speed-up at a count other
    #: than the one it ran at when the cycle began is also discounted by ``1 - fair_restart_k x
    #: fair_restart_s / age`` (a move must save k restarts over an expected remaining run as long as
    #: its age); with ``fair_exchange`` a job the top-up grew starts the share at the count it ran at.
    #: None: off (the flat ``fair_restart`` at counts other than the one after the top-up). With
    #: ``fair_group`` and ``fair_exchange``, 30 s and k = 2 (mean avg JCT, every job adaptive, load
    #: 1.0 / 1.5): 2,569 / 3,552 s against 2,620 / 3,621 (bench/README.md)
    fair_restart_s: float | None = None
    fair_restart_k: float = 2.0
    #: packed placement (:mod:`consolidate`): a growing job (GPU trainers, no pservers) never spans
    #: more nodes than its count needs (re-placed whole when that takes it: it restarts anyway, else
    #: not grown), and a job admitted or resized in the cycle is re-placed on fewer nodes where the
    #: free capacity allows. Off by default; it wins on every measured set (bench/README.md "Packed
    #: placement"): with the share (``fair_group`` + ``fair_exchange`` + ``fair_restart_s``), every
    #: job adaptive, 2,482 / 3,346 s at load 1.0 / 1.5 against 2,569 / 3,552 (the ``goodput`` policy)
    pack: bool = False

    def lo(self, job: JobRequest) -> int:
        return job.lo if self.elastic else job.trainers

    def hi(self, job: JobRequest) -> int:
        return job.hi if self.elastic else job.trainers

    def order(self, job: JobRequest) -> tuple[int, int, float, str]:
        # service and tiresias_queue, inline: this runs once per job
        attained, queue = service(job) if job.batches else job.attained, 0
        for limit in self.thresholds:
            if attained < limit:
                break
            queue += 1
        return (-job.priority, queue, job.submitted_at, job.key)

    def schedule(self, snap: Snapshot) -> Plan:
        with _collector_paused():
            return self._schedule(snap)

    def _schedule(self, snap: Snapshot) -> Plan:
        cycle = _Cycle(self, snap)
        cycle.minimums()
        if self.grow and self.elastic:
            cycle.top_up()
            cycle.fair()
            cycle.grow()
        if self.pack:
            cycle.pack()
        emit(cycle.plan, snap, cycle.alloc, cycle.admitted, cycle.preempted,
             self.resize_cooldown if self.elastic else None)  # fmt: skip
        return cycle.plan


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one round. A round allocates tens of thousands of
    small objects (placements, keys, heap entries) and frees them by reference counting, but each
    700 allocations start a collection that walks the snapshot's objects again (about a tenth of a
    round at 5,000 jobs); it creates no garbage cycles worth collecting meanwhile. The collector is
    turned back on after the round; a round that finds it off (another round under way in another
    thread, or the caller's choice) leaves it as it is."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass
class _Shrinkable:
    """Elastic jobs above their min, the last in the cycle's order first (the most served: LAS would
    serve them last anyway, and a job gives all it can spare before the next one gives any, so fewer
    jobs pay a resize): ``(-rank, key, n)``. Entries go stale when a job's count changes (a fresh one
    is pushed for the new count). Only the ``elastic`` policy shrinks, so a job's min is ``job.lo``."""

    rank: Mapping[str, int]
    heap: list[tuple[int, str, int]] = field(default_factory=list)

    def sync(self, alloc: Allocation) -> None:
        changed, trainers, jobs, heap, rank = (
            alloc.changed or [],
            alloc.trainers,
            alloc.jobs,
            self.heap,
            self.rank,
        )
        for key in changed:
            job = jobs.get(key)
            # above its min (``job.lo``, inline: this runs for every change)
            if job is not None and len(trainers.get(key, ())) > (job.min_trainers or job.trainers):
                heapq.heappush(heap, (-rank[key], key, len(trainers[key])))
        changed.clear()

    def pop(self, alloc: Allocation) -> JobRequest | None:
        self.sync(alloc)
        trainers = alloc.trainers
        while self.heap:
            _, key, n = heapq.heappop(self.heap)
            job = alloc.jobs.get(key)
            if job is not None and len(trainers.get(key, ())) == n:  # above its min when pushed
                return job
        return None


@dataclass
class _Group:
    """The running adaptive-batch jobs as one claimant of the top-up (``ElasticPolicy.fair_group``):
    the trainers they hold together, and the requested counts of those reached so far in the order.
    ``held - reserved`` only goes down as the order is walked (the reservation grows, the group
    grows only up to it), so a donor pointer moving one way stays right."""

    #: whether the group is a claimant (off: nothing is counted, no adaptive job gives)
    on: bool = False
    held: int = 0
    reserved: int = 0

    @classmethod
    def of(cls, cycle: _Cycle, on: bool) -> _Group:
        if not on:
            return cls()
        count = cycle.alloc.count
        return cls(True, sum(count(j.key) for j in cycle.jobs if j.batches and j.key not in cycle.preempted))

    def add(self, job: JobRequest, k: int) -> None:
        if self.on and job.batches:
            self.held += k

    def spare(self, taker: JobRequest) -> bool:
        """Whether an adaptive job may give ``taker`` a trainer: the group holds more than its
        reservation so far (fixed-batch takers only; an adaptive taker gains nothing for the group)."""
        return self.on and not taker.batches and self.held > self.reserved


class _Cycle:
    """One ``schedule`` call of :class:`ElasticPolicy`: the working state its steps share."""

    def __init__(self, policy: ElasticPolicy, snap: Snapshot) -> None:
        self.policy, self.snap = policy, snap
        self.plan = Plan(cycle=snap.cycle)
        self.alloc = Allocation.of(snap)
        self.ledger = QuotaLedger.of(snap)
        self.was_running = {j.key for j in snap.running}
        self.order = FairOrder([*snap.running, *snap.queue], policy.order, self._counts, capacity(snap.nodes))
        self.jobs = self.order.jobs
        #: each job's position in ``jobs``
        keys = list(map(_key, self.jobs))
        self.rank = dict(zip(keys, range(len(keys)), strict=True))
        self.preempted: set[str] = set()
        self.admitted: dict[str, list[WorkerPlacement]] = {}
        #: running jobs not preempted, in the policy's order (and their ranks)
        self.live_ranks = list(compress(range(len(keys)), map(self.was_running.__contains__, keys)))
        self.live = list(map(self.jobs.__getitem__, self.live_ranks))
        self._running, self._running_ranks = list(self.live), list(self.live_ranks)
        self.never_fits = NeverFits(snap.nodes)
        # Within a cycle, room only shrinks for later jobs (admissions consume; fewer jobs are later in
        # the order to take from), so once a shape failed at some count every later need as large fails
        self.failed: dict[tuple[int, ...], int] = {}
        self.soft = _Shrinkable(self.rank)
        #: ``pack``: jobs grow only onto as few nodes as their count needs
        self.packer = Packer(self.alloc, _per_node(snap)) if policy.pack else None
        self._ahead: list[Vec] = []

    def _counts(self, job: JobRequest) -> Vec:
        """What a job counts towards its user's share: what it holds, or its minimum if waiting
        (``held`` / ``started``, inline: this runs once per job)."""
        n = job.running if job.key in self.was_running else self.policy.lo(job)
        t, p, k = job.trainer, job.pserver, job.pservers
        return (t.cpu_m * n + p.cpu_m * k, t.memory * n + p.memory * k, t.gpu * n + p.gpu * k)

    def _held_ahead(self, position: int) -> Vec:
        """What the jobs running at the snapshot ahead of ``position`` hold (for the wait reasons)."""
        if not self._ahead:  # sums over the running jobs, in order
            add = lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2])  # noqa: E731
            self._ahead = list(accumulate(map(held, self._running), add, initial=(0, 0, 0)))
        return self._ahead[bisect_left(self._running_ranks, position)]

    # ------------------------------------------------------------------------- step 2: minimums

    def minimums(self) -> None:
        if self.policy.elastic:
            self.alloc.changed = [j.key for j in self.snap.running]
        for job in self.jobs:
            if job.key not in self.was_running:
                self._minimum(job)
        self.alloc.changed = None

    def _minimum(self, job: JobRequest) -> None:
        impossible = self.never_fits(job)
        if impossible:
            self.plan.wait.append(Wait(job.key, WaitReason.EXCEEDS_NODE_CAPACITY, impossible))
            return
        need = self.policy.lo(job)
        over = self.ledger.problem(job, need, pservers=True) if self.ledger.quotas else None
        if over:  # waits without holding up other users' jobs
            self.plan.wait.append(Wait(job.key, WaitReason.QUOTA_EXCEEDED, over))
            return
        t, p = job.trainer, job.pserver
        shape = (t.cpu_m, t.memory, t.gpu, p.cpu_m, p.memory, p.gpu, job.pservers)
        if self.failed and need >= self.failed.get(shape, 1 << 30):
            self.plan.wait.append(self._why(job))
            return
        # it fits as things are: no what-if needed
        placed = self._direct(job, need) if job.pservers else ([] if self.alloc.grow(job, need) else None)
        victims: list[JobRequest] = []
        if placed is None:
            trial = self._admit(job, need)
            if trial is None:
                self.failed[shape] = min(self.failed.get(shape, 1 << 30), need)
                self.plan.wait.append(self._why(job))
                return
            placed, victims = trial
        self.admitted[job.key] = placed
        if self.ledger.quotas:  # (else charging changes nothing)
            self.ledger.charge(job, need, pservers=True)
        for v in victims:
            self.ledger.credit(v, v.running, pservers=True)
            self.preempted.add(v.key)
            at = bisect_left(self.live_ranks, self.rank[v.key])
            del self.live[at], self.live_ranks[at]

    def _direct(self, job: JobRequest, need: int) -> list[WorkerPlacement] | None:
        pservers = self.alloc.place_pservers(job)
        if pservers is None:
            return None
        if self.alloc.grow(job, need):
            return pservers
        self.alloc.unplace_pservers(job, pservers)
        return None

    def _fits(self, job: JobRequest, need: int) -> bool:
        alloc = self.alloc
        return alloc.fits(job.trainer, need) and (job.pservers == 0 or alloc.fits(job.pserver, job.pservers))

    def _admit(self, job: JobRequest, need: int) -> tuple[list[WorkerPlacement], list[JobRequest]] | None:
        """Admit ``job`` at ``need`` trainers by shrinking elastic jobs and, if that is not enough,
        preempting running jobs later in the order; ``(pservers, victims)``, or None (nothing changed)."""
        alloc = self.alloc
        alloc.begin()
        fits = None
        if self.policy.elastic:  # shrink elastic jobs towards their min, the last in the order first
            fits = self._shrink_for(job, need)
        victims = self._preempt_for(job, need, fits) if self.policy.preempt else []
        pservers = alloc.place_pservers(job)
        if pservers is None or not alloc.grow(job, need):
            alloc.rollback()
            return None
        alloc.commit()
        return pservers, victims

    def _shrink_for(self, job: JobRequest, need: int) -> bool | None:
        """Shrink until ``need`` trainers of ``job`` would fit, with its pservers (placed and taken
        back to learn that) if it has any; whether they do (None: not known)."""
        alloc = self.alloc
        while not alloc.fits(job.trainer, need) or (job.pservers and not self._fits_with_pservers(job, need)):
            other = self.soft.pop(alloc)
            if other is None:
                return False
            alloc.shrink(other, alloc.count(other.key) - 1)
        return True

    def _fits_with_pservers(self, job: JobRequest, need: int) -> bool:
        """Whether ``job``'s pservers and ``need`` trainers fit together now (nothing stays placed)."""
        pservers = self.alloc.place_pservers(job)
        if pservers is None:
            return False
        fits = self.alloc.grow(job, need)
        if fits:
            self.alloc.shrink(job, 0)
        self.alloc.unplace_pservers(job, pservers)
        return fits

    def _preempt_for(self, job: JobRequest, need: int, fits: bool | None = None) -> list[JobRequest]:
        """Release running jobs from the end of the order until ``job`` fits (``fits``: whether it
        does now, if known), then give back, most important first, each one the job still fits
        without; the ones that stay released."""
        alloc, rank = self.alloc, self.rank[job.key]
        released: list[JobRequest] = []
        at, as_it_ran = len(self.live) - 1, False
        while at >= 0 and self.live_ranks[at] > rank:
            if fits is None:
                fits = self._fits(job, need)
            if fits:
                break
            fits = None
            other = self.live[at]
            as_it_ran = alloc.as_it_ran(other)
            alloc.shrink(other, 0)
            alloc.release_pservers(other)
            released.append(other)
            at -= 1
        victims: list[JobRequest] = []
        if released and as_it_ran:
            # the job did not fit just before the last one was released, and giving that one back
            # exactly what it held would return there: restoring and releasing it again only hints
            victims.append(released.pop())
            alloc.release_again(victims[0])
        for other in reversed(released):  # most important first
            if alloc.restore(other):
                if self._fits(job, need):
                    continue
                alloc.shrink(other, 0)
                alloc.release_pservers(other)
            victims.append(other)
        return victims

    # -------------------------------------------------------------------------- step 3: top up

    def top_up(self) -> None:
        """In priority / least-served order, bring every job up to the count its user asked for,
        taking trainers back from jobs later in that order (down to their min) when nothing is free."""
        alloc, ledger, jobs, hi = self.alloc, self.ledger, self.jobs, self.policy.hi
        trainers, limited, pool = alloc.trainers, bool(ledger.quotas), alloc.pool
        last = len(jobs) - 1  # donors are taken from the end of the order; counts only go down
        fair = self.policy.fair_p is not None  # adaptive jobs neither take nor give here: fair()
        group = _Group.of(self, fair and self.policy.fair_group)
        preempted, admitted, packer = self.preempted, self.admitted, self.packer
        for i, job in enumerate(jobs):
            n = len(trainers.get(job.key, ()))
            if n == 0 or job.key in preempted:
                continue
            if fair and job.batches:
                if not group.on:
                    continue
                group.reserved += min(job.trainers, hi(job))  # its claim, made for the group
                target = min(hi(job), n + group.reserved - group.held)
            elif n >= job.trainers:  # the target is <= trainers
                continue
            else:  # min(trainers, hi(job)), inline (this runs for every job below its count)
                target = max(job.max_trainers or job.trainers, job.min_trainers or job.trainers)
                if job.trainers < target:
                    target = job.trainers
            if job.key in admitted:
                n, had = self._place_whole(job, n, target), n
                group.add(job, n - had)
            t = job.trainer
            c, m, g = t.cpu_m, t.memory, t.gpu
            # (the ledger and the group, off, change nothing: they are not called then)
            while n < target and not (limited and ledger.problem(job, 1)):
                if c <= pool.tcpu and m <= pool.tmem and g <= pool.tgpu and self._grow1(job):
                    if limited:
                        ledger.charge(job, 1)
                    n += 1
                    if group.on:
                        group.add(job, 1)
                    continue
                if alloc.blocked(job):  # its next trainer can only go back where it ran: taken
                    break
                if packer is not None and packs(job) and pool.total_fits(c, m, g):
                    break  # room, but not on as few nodes as it needs: a donor's trainer would not help
                spare = 0  # what the donor holds above its min (``lo``, inline: this runs for every look)
                while last > i:
                    donor = jobs[last]
                    spare = len(trainers.get(donor.key, ())) - (donor.min_trainers or donor.trainers)
                    if spare > 0 and not (fair and donor.batches and not group.spare(job)):
                        break
                    last -= 1
                if last <= i:
                    break
                if not limited and not group.on and not (packer is not None and packs(job)):
                    # what the donor can spare, all at once if that is the same (not packed: one at a time)
                    k = min(target - n, spare)
                    if alloc.hand_over(donor, job, k):
                        n += k
                        continue
                alloc.shrink(donor, len(trainers[donor.key]) - 1)
                if limited:
                    ledger.credit(donor, 1)
                if group.on:
                    group.add(donor, -1)

    def _place_whole(self, job: JobRequest, n: int, target: int) -> int:
        """Place a job admitted this cycle (at ``n`` trainers) anew with as many trainers up to
        ``target`` as fit in what is free, all at once on the fewest nodes; its count afterwards."""
        alloc, ledger, pool = self.alloc, self.ledger, self.alloc.pool
        t = job.trainer
        while target > n:
            k = target - n
            if pool.total_fits(t.cpu_m * k, t.memory * k, t.gpu * k) and not (
                ledger.quotas and ledger.problem(job, k)
            ):
                alloc.begin()
                alloc.shrink(job, 0)
                if alloc.grow(job, target):
                    alloc.commit()
                    ledger.charge(job, k)
                    return target
                alloc.rollback()
            target -= 1
        return n

    # -------------------------------------------------------------- step 3b: goodput fairness

    def fair(self) -> None:
        """Share what the running adaptive-batch jobs hold above their min, and what is free, among
        them by goodput fairness (:func:`goodfair.share`), then place it in the order it was given."""
        policy = self.policy
        if policy.fair_p is None:
            return
        alloc, ledger, now = self.alloc, self.ledger, self.snap.now
        jobs = [j for j in self.jobs if j.batches and j.key not in self.preempted and alloc.count(j.key)]
        if not jobs:
            return
        free = alloc.total if policy.fair_free else Resources()
        room = [free.cpu_m, free.memory, free.gpu]
        claims: list[Claim] = []
        start = [alloc.count(j.key) for j in jobs] if policy.fair_exchange else None
        for j in jobs:
            n, t = alloc.count(j.key), j.trainer
            moved = j.key in self.admitted or n != j.running
            frozen = not moved and now - j.resized_at < policy.fair_cooldown
            lo = n if frozen else min(policy.lo(j), n)
            hi = n if frozen else policy.hi(j)
            w = policy.fair_weight ** -tiresias_queue(service(j), policy.thresholds)
            need = (t.cpu_m, t.memory, t.gpu)
            paid, own, back = 0 if moved else n, None, n - lo  # what it holds above its min: shared again
            if policy.fair_restart_s is not None:  # restart-aware (resizecost.py)
                paid = paid_at(j, j.key in self.admitted)
                k, base = policy.fair_restart_k, policy.fair_restart
                own = restart_factor(j, now, policy.fair_restart_s, k, base)
            if start is not None:  # the exchange: only a restart-aware share takes back the top-up's grow
                back = n - paid if own is not None and 0 < paid < n else 0
                start[len(claims)] = n - back
                lo = min(lo, n - back)
            for d, per in enumerate(need):
                room[d] += per * back
            claims.append(Claim(j.key, lo, hi, paid, need, j.speedup or (1.0,), w, own))
        counts, order = share(claims, (room[0], room[1], room[2]), policy.fair_p, policy.fair_restart, start)
        by_key = {j.key: j for j in jobs}
        for j in jobs:
            n = alloc.count(j.key)
            if counts[j.key] < n:
                alloc.shrink(j, counts[j.key])
                ledger.credit(j, n - counts[j.key])
        for key in dict.fromkeys(order):  # the first to gain, first placed; a new job whole
            j, n, target = by_key[key], alloc.count(key), counts[key]
            if n < target and key in self.admitted:
                n = self._place_whole(j, n, target)
            while n < target and not ledger.problem(j, 1) and self._grow1(j):
                ledger.charge(j, 1)
                n += 1

    # ---------------------------------------------------------------------------- step 4: grow

    def grow(self) -> None:
        """Hand out what is left one trainer at a time, largest marginal speed-up first."""
        alloc, ledger, hi = self.alloc, self.ledger, self.policy.hi
        trainers, pool = alloc.trainers, alloc.pool
        heap: list[tuple[float, int, str]] = []
        for i, job in enumerate(self.jobs):
            n, t = len(trainers.get(job.key, ())), job.trainer
            if n == 0 or not pool.total_fits(t.cpu_m, t.memory, t.gpu):  # free capacity only shrinks
                continue
            if job.key in self.preempted or n >= hi(job):
                continue
            fresh = job.key in self.admitted
            if not fresh and self.snap.now - job.resized_at < self.policy.resize_cooldown:
                continue
            up, now = job.rate(n + 1), job.rate(n)
            if up > now:  # never grow a job into a slowdown
                heapq.heappush(heap, (-(up - now), i, job.key))
        exhausted: set[Resources] = set()  # in this phase free capacity only shrinks
        while heap:
            _, i, key = heapq.heappop(heap)
            job = self.jobs[i]
            if (exhausted and job.trainer in exhausted) or ledger.problem(job, 1):
                continue
            if not self._grow1(job):
                if not alloc.blocked(job) and not (self.packer and packs(job)):
                    exhausted.add(job.trainer)  # no node can host one more trainer of this shape
                continue
            ledger.charge(job, 1)
            n = alloc.count(key)
            if n < hi(job):
                up, now = job.rate(n + 1), job.rate(n)
                if up > now:
                    heapq.heappush(heap, (-(up - now), i, key))

    def _grow1(self, job: JobRequest) -> bool:
        """One more trainer for ``job`` (:meth:`Allocation.grow`; with ``pack`` only on as few nodes
        as its new count needs: :class:`consolidate.Packer`)."""
        if self.packer is not None and packs(job):
            return self.packer.grow(job)
        return self.alloc.grow(job, 1)

    # ----------------------------------------------------------------------- step 5: consolidate

    def pack(self) -> None:
        """The jobs that restart this cycle (admitted, or at a new count) on fewer nodes where the
        free capacity allows (:func:`consolidate.consolidate`)."""
        alloc, running = self.alloc, {j.key: j.running for j in self.snap.running}
        jobs = [
            j
            for j in self.jobs
            if packs(j)
            and j.key not in self.preempted
            and alloc.count(j.key)
            and (j.key in self.admitted or alloc.count(j.key) != running.get(j.key))
        ]
        consolidate(alloc, jobs)

    # ---------------------------------------------------------------------------------- reasons

    def _why(self, job: JobRequest) -> Wait:
        need = self.policy.lo(job)
        position = self.rank[job.key]
        c, m, g = self._held_ahead(position)
        what = "trainer" if need == 1 else "trainers"
        msg = f"needs {need} {what} ({job.trainer.describe()} each)"
        pool, t = self.alloc.pool, job.trainer
        if g + c > 0 and pool.total_fits(t.cpu_m * need - c, t.memory * need - m, t.gpu * need - g):
            msg += f"; {position} job(s) ahead of it in priority / least-attained-service order hold the rest"
            reason = WaitReason.LOWER_PRIORITY
        else:
            msg += f"; {self.alloc.total.describe()} free"
            reason = WaitReason.INSUFFICIENT_RESOURCES
        ahead = self.order.ahead(job)  # jobs of users with a smaller share are ahead of it
        if ahead:
            return Wait(job.key, WaitReason.FAIR_SHARE, fair_message(ahead, msg))
        return Wait(job.key, reason, msg)


def emit(
    plan: Plan,
    snap: Snapshot,
    alloc: Allocation,
    admitted: dict[str, list[WorkerPlacement]],
    preempted: set[str],
    rebatch_after: float | None = None,
) -> None:
    """Admit / preempt / resize decisions from where the allocation ended up. With ``rebatch_after``
    (seconds since its last resize of any kind: ``rebatched_at``), an adaptive job kept at its count
    whose best batch moved by :data:`REBATCH_RATIO` or more from the one it runs at gets it: a
    Resize to the same trainers."""
    held = alloc.trainers
    for job in snap.queue:
        key = job.key
        if key in admitted:
            trainers = held[key]
            k = len(trainers)
            nodes = [trainers[0].node] if k == 1 else sorted(set(map(_node, trainers)))
            msg = f"admitted with {k} trainers on {', '.join(nodes)}"
            batch = job.batch(k)
            msg += f", global batch {batch}" if batch else ""
            if job.cache_nodes:
                msg += f"; {cache_note(job.cache_nodes, trainers)}"
            pservers = admitted[key]
            placement = (*pservers, *trainers) if pservers else tuple(trainers)
            plan.admit.append(admit_of(key, placement, msg, batch))
    for job in snap.running:
        key = job.key
        if key in preempted:
            plan.preempt.append(Preempt(key, "preempted for a job ahead of it (priority / least served)"))
            continue
        n = len(held.get(key, ()))
        if n != job.running:
            verb = "grown" if n > job.running else "shrunk"
            msg = f"{verb} from {job.running} to {n} trainers"
            batch = job.batch(n)
            msg += f", global batch {batch}" if batch else ""
            if job.cache_nodes and n > job.running:  # where the new trainers went
                msg += f"; {cache_note(job.cache_nodes, held[key][job.running :])}"
            plan.resize.append(resize_of(key, n, tuple(held[key]), msg, batch))
        elif n and not alloc.as_it_ran(job):  # the same count elsewhere (``pack`` re-placed it)
            trainers = held[key]
            msg = f"{n} trainers moved to {', '.join(sorted(set(map(_node, trainers))))} (fewer nodes)"
            plan.resize.append(resize_of(key, n, tuple(trainers), msg, job.batch(n)))
        elif rebatch_after is not None and _stale(job, n) and snap.now - job.rebatched_at >= rebatch_after:
            batch = job.batch(n)
            msg = f"global batch {job.batch_size} -> {batch} on {n} trainers (its gradient noise scale moved)"
            plan.resize.append(resize_of(key, n, tuple(held[key]), msg, batch))


def _per_node(snap: Snapshot) -> int:
    """The most GPUs a node of the snapshot has (0: no GPU nodes)."""
    return max((n.capacity.gpu for n in snap.nodes), default=0)


def _stale(job: JobRequest, n: int) -> bool:
    """Whether an adaptive job's best batch on ``n`` trainers is :data:`REBATCH_RATIO` from its own."""
    if not job.batch_size or not job.batches or n <= 0:
        return False
    ratio = job.batch(n) / job.batch_size
    return ratio >= REBATCH_RATIO or ratio <= 1 / REBATCH_RATIO
