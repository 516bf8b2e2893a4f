"""scheduler: fair share between users (dominant-resource shares order jobs of one priority).

Table-driven: the order :class:`FairOrder` gives, then every policy on a contended cluster where one
user submitted many jobs before another user's single job.
"""

from __future__ import annotations

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Snapshot, WaitReason, WorkerPlacement, policy
from paddlecloud.scheduler.fairshare import FairOrder, held, started

GI = 2**30
GPU = Resources(1000, GI, 1)
FS = WaitReason.FAIR_SHARE
BH = WaitReason.BEHIND_EARLIER_JOB
IR = WaitReason.INSUFFICIENT_RESOURCES
POLICIES = ("fifo", "fifo-backfill", "tiresias", "edl", "elastic")


def job(user: str, name: str, at: float, *, prio: int = 0, gpus: int = 1) -> JobRequest:
    return JobRequest(key=f"{user}/{name}", user=user, priority=prio, submitted_at=at, pservers=0,
                      pserver=Resources(), trainers=1, trainer=GPU.times(gpus))  # fmt: skip


def running(j: JobRequest, node: str, gpu: int) -> JobRequest:
    return JobRequest(
        **{**j.__dict__, "running": 1, "placement": (WorkerPlacement("trainer", 0, node, (gpu,)),)}
    )


def node(gpus: int, used: int = 0) -> NodeState:
    return NodeState("n0", Resources(64000, 256 * GI, gpus), GPU.times(used), tuple(range(used, gpus)))


def plain(j: JobRequest) -> tuple[int, float, str]:
    return (-j.priority, j.submitted_at, j.key)


def demand(j: JobRequest) -> tuple[int, int, int]:
    return held(j) if j.running else started(j, j.trainers)


# ----------------------------------------------------------------------------------- the order


@pytest.mark.parametrize(
    ("jobs", "base", "expect"),
    [
        pytest.param(  # one user: the policy's own order, untouched
            [job("a", "3", 3), job("a", "1", 1), job("a", "2", 2)], {}, ["a/1", "a/2", "a/3"], id="one-user"
        ),
        pytest.param(  # the later user's only job comes second, not fifth
            [*(job("a", f"{i}", i) for i in range(4)), job("b", "x", 9)], {},
            ["a/0", "b/x", "a/1", "a/2", "a/3"], id="many-then-one",
        ),
        pytest.param(  # equal shares: earlier submit first, then key
            [job("b", "y", 5), job("a", "x", 5), job("c", "z", 4)], {}, ["c/z", "a/x", "b/y"], id="ties",
        ),
        pytest.param(  # what a user's running jobs hold counts: the one holding more waits
            [job("a", "1", 1), job("b", "2", 2)], {"a": (0, 0, 2)}, ["b/2", "a/1"], id="holdings",
        ),
        pytest.param(  # dominant resource: b's 1 GPU of 4 outweighs a's 3 cpu of 64
            [job("a", "1", 1), job("b", "2", 2)], {"a": (3000, 0, 0), "b": (0, 0, 1)}, ["a/1", "b/2"],
            id="dominant",
        ),
        pytest.param(  # priority before share: a's urgent job first, then b, then a's others
            [job("a", "1", 1), job("a", "2", 2), job("b", "3", 3), job("a", "hi", 9, prio=1)], {},
            ["a/hi", "b/3", "a/1", "a/2"], id="priority-first",
        ),
        pytest.param(  # a bigger job counts more: after a's 2-GPU job, b's two jobs go
            [job("a", "1", 1, gpus=2), job("a", "2", 2), job("b", "3", 3), job("b", "4", 4)], {},
            ["a/1", "b/3", "b/4", "a/2"], id="by-size",
        ),
    ],
)  # fmt: skip
def test_fair_order(jobs: list[JobRequest], base: dict[str, tuple[int, int, int]], expect: list[str]) -> None:
    order = FairOrder(jobs, plain, demand, (64000, 256 * GI, 4), base)
    assert [j.key for j in order.jobs] == expect
    for user in {j.user for j in jobs}:  # first come, first served within a user
        mine = [j for j in order.jobs if j.user == user]
        assert mine == sorted(mine, key=plain)


def test_jobs_ahead_by_fair_share_are_counted() -> None:
    jobs = [*(job("a", f"{i}", i) for i in range(3)), job("b", "x", 9), job("c", "y", 10)]
    order = FairOrder(jobs, plain, demand, (0, 0, 4))
    assert [j.key for j in order.jobs] == ["a/0", "b/x", "c/y", "a/1", "a/2"]
    assert {j.key: order.ahead(j) for j in jobs} == {"a/0": 0, "b/x": 0, "c/y": 0, "a/1": 2, "a/2": 2}
    assert FairOrder(jobs[:3], plain, demand, (0, 0, 4)).ahead(jobs[2]) == 0  # one user: never


# -------------------------------------------------------------------------------- the policies


def schedule(
    name: str, nodes: tuple[NodeState, ...], queue: list[JobRequest], run: tuple[JobRequest, ...] = ()
) -> Plan:
    return policy(name).schedule(Snapshot(1, 100.0, nodes, tuple(queue), run))


#: alice submits 10 one-GPU jobs, then bob one; the cluster holds two
CONTENDED = [*(job("alice", f"a{i:02d}", i) for i in range(1, 11)), job("bob", "b01", 10)]


@pytest.mark.parametrize(
    ("name", "a03"),
    [("fifo", BH), ("fifo-backfill", FS), ("tiresias", FS), ("edl", FS), ("elastic", FS)],
)
def test_one_job_of_another_user_starts_before_the_first_users_later_jobs(name: str, a03: WaitReason) -> None:
    plan = schedule(name, (node(2),), CONTENDED)
    assert sorted(a.job for a in plan.admit) == ["alice/a01", "bob/b01"]
    waits = {w.job: w for w in plan.wait}
    assert set(waits) == {f"alice/a{i:02d}" for i in range(2, 11)}
    second = waits["alice/a02"]
    assert second.reason == FS
    assert second.message.startswith("behind 1 job of users with a smaller share of the cluster; needs ")
    assert waits["alice/a03"].reason == a03
    for w in waits.values():
        assert "\n" not in w.message


@pytest.mark.parametrize("name", POLICIES)
def test_the_same_jobs_of_one_user_stay_first_come_first_served(name: str) -> None:
    queue = [*CONTENDED[:-1], job("alice", "b01", 10)]
    plan = schedule(name, (node(2),), queue)
    assert sorted(a.job for a in plan.admit) == ["alice/a01", "alice/a02"]
    assert FS not in {w.reason for w in plan.wait}


@pytest.mark.parametrize(
    ("name", "preempted", "admitted", "b01"),
    [
        ("fifo", [], [], IR),
        ("fifo-backfill", [], [], IR),
        ("edl", [], [], IR),
        ("tiresias", ["alice/a3"], ["bob/b01"], None),
        ("elastic", ["alice/a3"], ["bob/b01"], None),
    ],
)
def test_preemptive_policies_take_from_the_user_holding_the_most(
    name: str, preempted: list[str], admitted: list[str], b01: WaitReason | None
) -> None:
    # alice holds 3 of 4 GPUs, carol 1 (the newest running job: last in the policies' own order);
    # without fair share bob's job, submitted last, would preempt no one
    holders = [("alice", "a1", 0), ("alice", "a2", 1), ("alice", "a3", 2), ("carol", "c1", 3)]
    run = tuple(running(job(u, n, t), "n0", g) for g, (u, n, t) in enumerate(holders))
    plan = schedule(name, (node(4, used=4),), [job("bob", "b01", 4)], run)
    assert [p.job for p in plan.preempt] == preempted
    assert [a.job for a in plan.admit] == admitted
    assert {w.job: w.reason for w in plan.wait} == ({"bob/b01": b01} if b01 else {})
    if admitted:
        assert plan.admit[0].placement[0].gpus == (2,)  # alice/a3's GPU


@pytest.mark.parametrize("name", POLICIES)
def test_priority_still_comes_first(name: str) -> None:
    queue = [*CONTENDED, job("alice", "urgent", 20, prio=1)]
    plan = schedule(name, (node(2),), queue)
    assert sorted(a.job for a in plan.admit) == ["alice/urgent", "bob/b01"]


def _head_by_head(
    jobs: list[JobRequest], base: dict[str, tuple[int, int, int]], cap: tuple[int, int, int]
) -> list[str]:
    """The order as the module docstring defines it, step by step: among the jobs of the highest
    priority left, the head of each user (by ``plain``); the one whose user has the smallest dominant
    share goes next (ties: the head first by ``plain``), and counts towards that share from then on."""
    used = {u: list(v) for u, v in base.items()}
    left, out = sorted(jobs, key=plain), []
    while left:
        top = max(j.priority for j in left)
        heads: dict[str, JobRequest] = {}
        for j in left:
            if j.priority == top:
                heads.setdefault(j.user, j)

        def share(j: JobRequest) -> float:
            acc = used.get(j.user, [0, 0, 0])
            return max(a / c for a, c in zip(acc, cap, strict=True) if c)

        nxt = min(heads.values(), key=lambda j: (share(j), left.index(j)))
        acc = used.setdefault(nxt.user, [0, 0, 0])
        for d, x in enumerate(demand(nxt)):
            acc[d] += x
        left.remove(nxt)
        out.append(nxt.key)
    return out


@pytest.mark.parametrize("seed", range(10))
def test_fair_order_is_taking_the_head_of_the_smallest_share(seed: int) -> None:
    """Random jobs of a few users, priorities and sizes (shares often tie): the order is the one its
    definition gives, one head at a time."""
    import random

    rng = random.Random(seed)
    users = ["a", "b", "c", "d"][: rng.randrange(2, 5)]
    prios = (0,) if seed % 2 else (0, 1, 2)
    jobs = [
        job(rng.choice(users), f"{i}", rng.randrange(20), prio=rng.choice(prios), gpus=rng.choice((1, 1, 2)))
        for i in range(rng.randrange(5, 40))
    ]
    base = {u: (0, 0, rng.randrange(3)) for u in users if rng.random() < 0.5}
    cap = (64000, 256 * GI, 8)
    assert [j.key for j in FairOrder(jobs, plain, demand, cap, base).jobs] == _head_by_head(jobs, base, cap)
