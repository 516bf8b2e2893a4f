"""scheduler: the ``pods`` baseline (workers bound one by one, no gang: the EDL report's OFF case)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import Admit, JobRequest, NodeState, Plan, PodsPolicy, Snapshot, WaitReason, policy

GI = 2**30
PS = Resources(500, GI // 2, 0)


def node(name: str, cpu: float = 4) -> NodeState:
    return NodeState(name=name, capacity=Resources(int(cpu * 1000), 64 * GI, 0))


def job(
    name: str, trainers: int, *, cpu: float = 1, pservers: int = 0, at: float = 0.0, user: str = "u"
) -> JobRequest:
    return JobRequest(
        key=f"{user}/{name}", user=user, priority=0, submitted_at=at, pservers=pservers, pserver=PS,
        trainers=trainers, trainer=Resources(int(cpu * 1000), GI, 0),
    )  # fmt: skip


def after(snap: Snapshot, plan: Plan) -> Snapshot:
    """The next cycle's snapshot once ``plan``'s admissions and resizes are carried out."""
    used: Counter[str] = Counter()
    running = {j.key: j for j in snap.running}
    queue = []
    admits = {a.job: a for a in plan.admit}
    for j in snap.queue:
        a = admits.get(j.key)
        if a is None:
            queue.append(j)
            continue
        running[j.key] = dataclasses.replace(
            j, running=sum(p.role == "trainer" for p in a.placement), placement=a.placement
        )
    for r in plan.resize:
        j = running[r.job]
        ps = tuple(p for p in j.placement if p.role != "trainer")
        running[r.job] = dataclasses.replace(j, running=r.trainers, placement=(*ps, *r.placement))
    for j in running.values():
        for p in j.placement:
            used[p.node] += (j.trainer if p.role == "trainer" else j.pserver).cpu_m
    nodes = tuple(dataclasses.replace(n, allocated=Resources(used[n.name], 0, 0)) for n in snap.nodes)
    return dataclasses.replace(
        snap, cycle=snap.cycle + 1, nodes=nodes, queue=tuple(queue), running=tuple(running.values())
    )


def trainers(admit: Admit) -> int:
    return sum(p.role == "trainer" for p in admit.placement)


def test_a_job_starts_with_the_trainers_that_fit_and_gets_the_rest_as_room_frees() -> None:
    snap = Snapshot(cycle=1, now=0.0, nodes=(node("a"), node("b")), queue=(job("big", 6, pservers=1),))
    plan = PodsPolicy().schedule(snap)
    (a,) = plan.admit
    # 8 CPUs: the pserver (0.5) and 7 one-CPU trainers would fit, but it asked for 6: all 6, no gang needed
    assert trainers(a) == 6 and sum(p.role == "pserver" for p in a.placement) == 1

    snap = Snapshot(cycle=1, now=0.0, nodes=(node("a"),), queue=(job("big", 6, pservers=1),))
    (a,) = PodsPolicy().schedule(snap).admit
    assert trainers(a) == 3  # 4 CPUs: the pserver and 3 trainers; fifo would leave it waiting whole
    assert not policy("fifo").schedule(snap).admit
    # more room: the running job gets its missing trainers, one resize, nothing else admitted
    nxt = after(snap, PodsPolicy().schedule(snap))
    nxt = dataclasses.replace(nxt, nodes=(*nxt.nodes, node("b")))
    plan = PodsPolicy().schedule(nxt)
    assert not plan.admit and [(r.job, r.trainers) for r in plan.resize] == [("u/big", 6)]


def test_older_jobs_pods_bind_first_and_an_unschedulable_pod_blocks_no_one() -> None:
    nodes = (node("a"), node("b"))
    first = Snapshot(cycle=1, now=0.0, nodes=nodes, queue=(job("old", 10, at=1.0),))
    snap = after(first, PodsPolicy().schedule(first))  # old holds all 8 CPUs, wants 2 more
    assert [j.running for j in snap.running] == [8]
    # a CPU frees (some other pod ended): the old job's pending trainer takes it before a newer job
    snap = dataclasses.replace(
        snap, nodes=(snap.nodes[0], dataclasses.replace(node("b", cpu=5), allocated=Resources(4000, 0, 0)))
    )
    snap = dataclasses.replace(snap, queue=(job("new", 1, at=5.0),))
    plan = PodsPolicy().schedule(snap)
    assert [(r.job, r.trainers) for r in plan.resize] == [("u/old", 9)]
    assert not plan.admit and {w.job: w.reason for w in plan.wait} == {
        "u/new": WaitReason.INSUFFICIENT_RESOURCES
    }
    # a waiting job whose pserver cannot fit anywhere now does not stop a later one that fits
    snap = Snapshot(
        cycle=1, now=0.0, nodes=(node("a", cpu=2),),
        queue=(job("wide", 1, pservers=1, cpu=2, at=1.0), job("small", 1, at=2.0)),
    )  # fmt: skip
    plan = PodsPolicy().schedule(snap)
    assert [a.job for a in plan.admit] == ["u/small"]
    assert {w.job: w.reason for w in plan.wait} == {"u/wide": WaitReason.INSUFFICIENT_RESOURCES}


def test_never_fits_and_quota_wait_with_their_reasons() -> None:
    snap = Snapshot(
        cycle=1, now=0.0, nodes=(node("a"),),
        queue=(job("huge", 1, cpu=8), job("capped", 4, user="q"), job("ok", 1, at=3.0)),
        quotas={"q": Resources(2000, 64 * GI, 0)},
    )  # fmt: skip
    plan = PodsPolicy().schedule(snap)
    assert {w.job: w.reason for w in plan.wait} == {"u/huge": WaitReason.EXCEEDS_NODE_CAPACITY}
    got = {a.job: trainers(a) for a in plan.admit}
    assert got == {"q/capped": 2, "u/ok": 1}  # the quota stops its trainers at 2 CPUs, not its start


def test_the_policy_is_named_for_the_simulator_only() -> None:
    assert policy("pods").name == "pods"
    from paddlecloud.cli import system  # up --policy does not offer the baseline

    params = {p.name: p for p in system.up.params}
    choices = params["policy"].type.choices  # type: ignore[attr-defined]
    assert "pods" not in choices and {"elastic", "goodput"} <= set(choices)
