"""Fair share between users: among jobs of one priority, the user with the smallest dominant share goes next.

A user's *dominant share* (DRF, Ghodsi et al. 2011) is the largest, over cpu, memory and GPUs, of
what the user holds divided by the cluster's capacity (the sum over nodes). :func:`fair_order`
turns a policy's own order into the order the policy walks:

  1. jobs are grouped by priority, higher first; priority always wins;
  2. within a priority, each user's jobs keep the policy's own order (so ``fifo`` stays first come,
     first served within a user, and ``tiresias`` / ``elastic`` least-attained-service first);
  3. the next job is the head of the user whose dominant share is smallest; ties go to the head
     that comes first in the policy's own order (for ``fifo`` and ``edl``: earlier submit time,
     then key), so the order is deterministic;
  4. a job counts towards its user's share from its place in the order on (a running job with
     what it holds, a waiting one with what it asks to start), whether or not it starts this cycle;
     the shares start from what each user's running jobs hold (``fifo``, ``edl``: they order
     waiting jobs only) or from zero (``tiresias``, ``elastic``: they order running jobs too, so the
     jobs of the user with the largest share are the last in the order: the first preempted, and
     the first to give trainers back when jobs ahead are topped up).

With a single user the order is the policy's own, unchanged. A job waiting for capacity while jobs
of other users that its policy's own order puts behind it are ahead of it waits with
``FairShare`` ("behind N jobs of users with a smaller share of the cluster; ...").
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

from paddlecloud.scheduler.snapshot import JobRequest, NodeState

__all__ = ["FairOrder", "Vec", "capacity", "fair_message", "held", "holdings", "started"]

#: cpu millicores, memory bytes, GPUs
Vec = tuple[int, int, int]


def capacity(nodes: Iterable[NodeState]) -> Vec:
    c = m = g = 0
    for n in nodes:
        c, m, g = c + n.capacity.cpu_m, m + n.capacity.memory, g + n.capacity.gpu
    return (c, m, g)


def held(job: JobRequest) -> Vec:
    """What a running job holds (its running trainers and its pservers)."""
    t, p, n, k = job.trainer, job.pserver, job.running, job.pservers
    return (t.cpu_m * n + p.cpu_m * k, t.memory * n + p.memory * k, t.gpu * n + p.gpu * k)


def started(job: JobRequest, trainers: int) -> Vec:
    """What a waiting job asks to start with ``trainers`` trainers (and its pservers)."""
    t, p, k = job.trainer, job.pserver, job.pservers
    return (
        t.cpu_m * trainers + p.cpu_m * k,
        t.memory * trainers + p.memory * k,
        t.gpu * trainers + p.gpu * k,
    )


def holdings(running: Iterable[JobRequest]) -> dict[str, Vec]:
    """What each user's running jobs hold."""
    out: dict[str, Vec] = {}
    for job in running:
        c, m, g = out.get(job.user, (0, 0, 0))
        hc, hm, hg = held(job)
        out[job.user] = (c + hc, m + hm, g + hg)
    return out


def fair_message(ahead: int, detail: str) -> str:
    jobs = "job" if ahead == 1 else "jobs"
    return f"behind {ahead} {jobs} of users with a smaller share of the cluster; {detail}"


class FairOrder:
    """A policy's order of ``jobs`` with users interleaved by dominant share (module docstring).

    ``key`` is the policy's own order (it must sort by priority first), ``demand`` what a job counts
    towards its user's share, ``base`` what each user holds before the first job.
    """

    def __init__(
        self,
        jobs: Iterable[JobRequest],
        key: Callable[[JobRequest], Any],
        demand: Callable[[JobRequest], Vec],
        cap: Vec,
        base: Mapping[str, Vec] | None = None,
    ) -> None:
        plain = sorted(jobs, key=key)
        self._plain = plain
        self.fair = bool(plain) and any(j.user != plain[0].user for j in plain)
        self.jobs = _interleave(plain, demand, cap, base or {}) if self.fair else plain
        self._ahead: dict[str, int] | None = None

    @cached_property
    def rank(self) -> dict[str, int]:
        """Each job's position in the policy's own order (before users are interleaved)."""
        return {j.key: i for i, j in enumerate(self._plain)}

    def ahead(self, job: JobRequest) -> int:
        """How many jobs of other users are ahead of ``job`` that the policy's own order puts
        behind it (0 with one user)."""
        if not self.fair:
            return 0
        if self._ahead is None:
            self._ahead = _overtakers(self.jobs, self.rank)
        return self._ahead.get(job.key, 0)


def _interleave(
    plain: Sequence[JobRequest], demand: Callable[[JobRequest], Vec], cap: Vec, base: Mapping[str, Vec]
) -> list[JobRequest]:
    """Taking, again and again, the head of the user with the smallest share (ties: the head that
    comes first in ``plain``) is merging the users' own sequences, each already in order by (share
    before the job, position): so it is one sort by (priority, that share, position)."""
    used = {u: list(v) for u, v in base.items()}
    shares: list[float] = []
    c0, c1, c2 = cap
    first, mixed = plain[0].priority if plain else 0, False
    for job in plain:
        acc = used.get(job.user)
        if acc is None:
            acc = used[job.user] = [0, 0, 0]
        a0, a1, a2 = acc
        share = a0 / c0 if c0 else 0.0  # _share, inline: this runs once per job
        if c1 and a1 / c1 > share:
            share = a1 / c1
        if c2 and a2 / c2 > share:
            share = a2 / c2
        shares.append(share)
        if job.priority != first:
            mixed = True
        c, m, g = demand(job)
        acc[0], acc[1], acc[2] = a0 + c, a1 + m, a2 + g
    # sorting positions by share is stable (ties keep their order), so it sorts by (share, position);
    # a second stable sort by priority then sorts by (priority, share, position): the same order as
    # the tuples', with the sort comparing floats (and ints) alone
    at = sorted(range(len(plain)), key=shares.__getitem__)
    if mixed:
        at.sort(key=[-j.priority for j in plain].__getitem__)
    return [plain[i] for i in at]


def _overtakers(order: Sequence[JobRequest], rank: Mapping[str, int]) -> dict[str, int]:
    """For each job, how many jobs ahead of it in ``order`` come after it by ``rank``."""
    seen: list[int] = []
    out: dict[str, int] = {}
    for pos, job in enumerate(order):
        r = rank[job.key]
        out[job.key] = pos - bisect_right(seen, r)
        insort(seen, r)
    return out
