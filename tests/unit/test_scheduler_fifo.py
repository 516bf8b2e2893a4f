"""scheduler: the pure fifo / fifo-backfill policies and gang placement."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import (
    Admit,
    FifoPolicy,
    JobRequest,
    NodeState,
    Plan,
    Snapshot,
    Wait,
    WaitReason,
    policy,
)

GI = 2**30


def node(
    name: str, cpu: float = 4, mem_gi: int = 8, gpus: tuple[int, ...] = (), used_cpu: float = 0
) -> NodeState:
    return NodeState(
        name=name,
        capacity=Resources(int(cpu * 1000), mem_gi * GI, len(gpus)),
        allocated=Resources(int(used_cpu * 1000), 0, 0),
        free_gpus=gpus,
    )


def job(
    name: str,
    trainers: int = 1,
    cpu: float = 1,
    mem_gi: int = 1,
    gpu: int = 0,
    *,
    pservers: int = 0,
    ps_cpu: float = 0.5,
    priority: int = 0,
    at: float = 0.0,
) -> JobRequest:
    return JobRequest(
        key=f"u/{name}",
        user="u",
        priority=priority,
        submitted_at=at,
        pservers=pservers,
        pserver=Resources(int(ps_cpu * 1000), GI // 2, 0),
        trainers=trainers,
        trainer=Resources(int(cpu * 1000), mem_gi * GI, gpu),
    )


def run(nodes: list[NodeState], jobs: list[JobRequest], backfill: bool = False) -> Plan:
    snap = Snapshot(cycle=7, now=100.0, nodes=tuple(nodes), queue=tuple(jobs))
    return FifoPolicy(backfill=backfill).schedule(snap)


def admitted(plan: Plan) -> list[str]:
    return [a.job.removeprefix("u/") for a in plan.admit]


def waits(plan: Plan) -> dict[str, WaitReason]:
    return {w.job.removeprefix("u/"): w.reason for w in plan.wait}


def the_admit(plan: Plan, name: str) -> Admit:
    return next(a for a in plan.admit if a.job == f"u/{name}")


def the_wait(plan: Plan, name: str) -> Wait:
    return next(w for w in plan.wait if w.job == f"u/{name}")


IR = WaitReason.INSUFFICIENT_RESOURCES
EX = WaitReason.EXCEEDS_NODE_CAPACITY
BH = WaitReason.BEHIND_EARLIER_JOB


@pytest.mark.parametrize(
    ("nodes", "jobs", "backfill", "want_admit", "want_wait"),
    [
        pytest.param([node("n0")], [], False, [], {}, id="empty-queue"),
        pytest.param(
            [node("n0", cpu=4)],
            [job("b", cpu=1, at=2), job("a", cpu=1, at=1), job("c", cpu=1, at=3)],
            False, ["a", "b", "c"], {}, id="submit-order",
        ),
        pytest.param(
            [node("n0", cpu=2)],
            [job("old", cpu=2, at=1), job("vip", cpu=2, at=5, priority=10)],
            False, ["vip"], {"old": IR}, id="priority-first",
        ),
        pytest.param(
            [node("n0", cpu=2)],
            [job("b", cpu=2, at=1), job("a", cpu=2, at=1)],
            False, ["a"], {"b": IR}, id="tie-broken-by-key",
        ),
        pytest.param(
            [node("n0", cpu=2), node("n1", cpu=2)],
            [job("gang", trainers=5, cpu=1)],
            False, [], {"gang": IR}, id="gang-all-or-nothing",
        ),
        pytest.param(
            [node("n0", cpu=4)],
            [job("huge", cpu=8, at=1), job("small", cpu=1, at=2)],
            False, ["small"], {"huge": EX}, id="too-big-for-any-node-does-not-block",
        ),
        pytest.param(
            [node("n0", cpu=4)],
            [job("big", trainers=2, cpu=3, at=1), job("small", cpu=1, at=2)],
            False, [], {"big": IR, "small": BH}, id="strict-fifo-small-waits-behind",
        ),
        pytest.param(
            [node("n0", cpu=4)],
            [job("big", trainers=2, cpu=3, at=1), job("small", cpu=1, at=2)],
            True, ["small"], {"big": IR}, id="backfill-lets-small-through",
        ),
        pytest.param(
            [node("n0", cpu=4)],
            [job("big", trainers=2, cpu=3, at=1), job("huge", cpu=9, at=2), job("small", cpu=1, at=3)],
            False, [], {"big": IR, "huge": EX, "small": BH}, id="exceeds-reported-even-behind-head",
        ),
        pytest.param(
            [node("n0", cpu=4, used_cpu=3)],
            [job("a", cpu=2)],
            False, [], {"a": IR}, id="allocated-capacity-is-not-free",
        ),
        pytest.param(
            [node("n0", cpu=4)],
            [job("a", cpu=2, at=1), job("b", cpu=2, at=2), job("c", cpu=1, at=3)],
            True, ["a", "b"], {"c": IR}, id="admitted-jobs-use-up-capacity",
        ),
        pytest.param(
            [node("n0", cpu=2, mem_gi=2)],
            [job("mem", cpu=1, mem_gi=4)],
            False, [], {"mem": EX}, id="memory-exceeds-node",
        ),
        pytest.param(
            [node("n0", cpu=8, gpus=(0, 1))],
            [job("g", trainers=1, gpu=4)],
            False, [], {"g": EX}, id="gpu-exceeds-node",
        ),
        pytest.param(
            [node("n0", cpu=8, gpus=(0, 1)), node("n1", cpu=8, gpus=(2, 3))],
            [job("g3", trainers=1, gpu=3)],
            False, [], {"g3": EX}, id="gpus-of-one-worker-never-split",
        ),
        pytest.param(
            [node("n0", cpu=1)],
            [job("ps", trainers=1, cpu=0.5, pservers=2, ps_cpu=0.5)],
            False, [], {"ps": IR}, id="pservers-count-too",
        ),
        pytest.param(
            [],
            [job("a")],
            False, [], {"a": EX}, id="no-nodes",
        ),
    ],
)  # fmt: skip
def test_fifo_table(
    nodes: list[NodeState],
    jobs: list[JobRequest],
    backfill: bool,
    want_admit: list[str],
    want_wait: dict[str, WaitReason],
) -> None:
    plan = run(nodes, jobs, backfill)
    assert admitted(plan) == want_admit
    assert waits(plan) == want_wait
    assert plan.cycle == 7


def test_every_job_gets_exactly_one_decision() -> None:
    jobs = [job(f"j{i}", cpu=1.5, at=i) for i in range(6)] + [job("x", cpu=99, at=9)]
    plan = run([node("n0", cpu=4), node("n1", cpu=2)], jobs, backfill=True)
    keys = [a.job for a in plan.admit] + [w.job for w in plan.wait]
    assert sorted(keys) == sorted(j.key for j in jobs)


def test_insufficient_message_mentions_the_numbers() -> None:
    plan = run([node("n0", cpu=4)], [job("big", trainers=2, cpu=3)])
    msg = the_wait(plan, "big").message
    assert "cpu 6" in msg and "> 4 free" in msg and "2 workers" in msg


def test_fragmented_capacity_says_no_single_node_fits() -> None:
    # 4 cpu free in total, but split 2 + 2: a 3-cpu trainer fits neither now (each node is 3 cpu big).
    plan = run([node("n0", cpu=3, used_cpu=1), node("n1", cpu=3, used_cpu=1)], [job("a", cpu=3)])
    assert waits(plan) == {"a": IR}
    assert "no single node" in the_wait(plan, "a").message


def test_exceeds_message_names_role_and_largest_node() -> None:
    plan = run([node("n0", cpu=2), node("n1", cpu=4)], [job("huge", cpu=8)])
    msg = the_wait(plan, "huge").message
    assert "trainer needs cpu 8" in msg and "largest node has cpu 4" in msg


def test_behind_message_names_the_head_job() -> None:
    plan = run([node("n0", cpu=4)], [job("big", trainers=2, cpu=3, at=1), job("small", at=2)])
    assert "u/big" in the_wait(plan, "small").message


def test_admit_message_names_the_nodes() -> None:
    plan = run([node("n0", cpu=1), node("n1", cpu=1)], [job("a", trainers=2, cpu=1)])
    assert the_admit(plan, "a").message == "admitted on n0, n1"


def test_gpu_placement_assigns_distinct_indices_on_one_node_per_worker() -> None:
    nodes = [node("n0", cpu=16, gpus=(0, 1, 2, 3)), node("n1", cpu=16, gpus=(4, 5, 6, 7))]
    plan = run(nodes, [job("g", trainers=4, cpu=1, gpu=2)])
    placement = the_admit(plan, "g").placement
    assert [p.index for p in placement] == [0, 1, 2, 3]
    gpu_home = {"n0": {0, 1, 2, 3}, "n1": {4, 5, 6, 7}}
    for p in placement:
        assert len(p.gpus) == 2
        assert set(p.gpus) <= gpu_home[p.node]
    all_gpus = [g for p in placement for g in p.gpus]
    assert sorted(all_gpus) == list(range(8))


def test_gpu_placement_uses_only_free_indices() -> None:
    n0 = NodeState("n0", Resources(8000, 8 * GI, 4), allocated=Resources(0, 0, 2), free_gpus=(1, 3))
    plan = run([n0], [job("g", trainers=1, gpu=2)])
    assert the_admit(plan, "g").placement[0].gpus == (1, 3)


def test_two_jobs_in_one_cycle_never_share_a_gpu() -> None:
    plan = run([node("n0", cpu=8, gpus=(0, 1, 2))], [job("a", gpu=1, at=1), job("b", gpu=2, at=2)])
    a, b = the_admit(plan, "a").placement[0], the_admit(plan, "b").placement[0]
    assert set(a.gpus).isdisjoint(b.gpus)
    assert len(a.gpus) + len(b.gpus) == 3


def test_trainers_are_packed_on_as_few_nodes_as_possible() -> None:
    nodes = [node("small", cpu=2), node("large", cpu=8), node("mid", cpu=4)]
    plan = run(nodes, [job("p", trainers=4, cpu=1)])
    assert {p.node for p in the_admit(plan, "p").placement} == {"large"}


def test_overflow_goes_to_the_next_largest_node() -> None:
    nodes = [node("small", cpu=2), node("large", cpu=4), node("mid", cpu=3)]
    plan = run(nodes, [job("p", trainers=6, cpu=1)])
    assert Counter(p.node for p in the_admit(plan, "p").placement) == {"large": 4, "mid": 2}


def test_cpu_only_job_is_not_spread_onto_a_gpu_node() -> None:
    nodes = [node("gpu-node", cpu=2, gpus=(0,)), node("cpu-node", cpu=8)]
    plan = run(nodes, [job("p", trainers=4, cpu=1)])
    assert {p.node for p in the_admit(plan, "p").placement} == {"cpu-node"}


def test_pservers_and_trainers_are_both_placed() -> None:
    plan = run([node("n0", cpu=4)], [job("ps", trainers=2, cpu=1, pservers=2, ps_cpu=0.5)])
    roles = Counter((p.role, p.index) for p in the_admit(plan, "ps").placement)
    assert roles == {("pserver", 0): 1, ("pserver", 1): 1, ("trainer", 0): 1, ("trainer", 1): 1}


def test_gang_that_does_not_fit_leaves_capacity_for_others() -> None:
    # "gang" would take 3 of the 4 cpus with its first trainers before failing; backfill must still
    # see all 4 free for "pair".
    plan = run(
        [node("n0", cpu=4)],
        [job("gang", trainers=5, cpu=1, at=1), job("pair", trainers=4, cpu=1, at=2)],
        backfill=True,
    )
    assert admitted(plan) == ["pair"]


def test_schedule_does_not_mutate_the_snapshot() -> None:
    nodes = (node("n0", cpu=4, gpus=(0, 1)), node("n1", cpu=2))
    queue = (job("a", trainers=2, cpu=1, gpu=1), job("b", trainers=3, cpu=1, at=1), job("c", cpu=99, at=2))
    snap = Snapshot(cycle=1, now=5.0, nodes=nodes, queue=queue)
    before = copy.deepcopy(snap)
    FifoPolicy(backfill=True).schedule(snap)
    FifoPolicy().schedule(snap)
    assert snap == before
    assert snap.nodes[0].free_gpus == (0, 1)


def test_schedule_is_deterministic() -> None:
    snap = Snapshot(1, 0.0, (node("n0"), node("n1")), tuple(job(f"j{i}", cpu=1.5, at=i) for i in range(5)))
    assert FifoPolicy().schedule(snap) == FifoPolicy().schedule(snap)


@pytest.mark.parametrize(("name", "backfill"), [("fifo", False), ("fifo-backfill", True)])
def test_policy_by_name(name: str, backfill: bool) -> None:
    p = policy(name)
    assert p.name == name
    assert isinstance(p, FifoPolicy) and p.backfill is backfill


@pytest.mark.parametrize("name", ["nope", "", "FIFO", "backfill"])
def test_unknown_policy_raises(name: str) -> None:
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        policy(name)
