"""scheduler: cache-aware placement (``JobRequest.cache_nodes``, the nodes holding a job's SampleSet
cache) in every policy that places jobs: admissions, gangs over several nodes, grow-resizes, and the
decision's message saying where the trainers went and whether the cache nodes had room."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Snapshot, WorkerPlacement, policy

GI = 2**30
POLICIES = ("fifo", "fifo-backfill", "tiresias", "edl", "elastic")
ELASTIC = ("edl", "elastic")


def node(name: str, cpu: float = 4, used_cpu: float = 0) -> NodeState:
    return NodeState(name, Resources(int(cpu * 1000), 16 * GI, 0), Resources(int(used_cpu * 1000), 0, 0))


def job(
    name: str, trainers: int = 1, *, lo: int = 0, hi: int = 0, pservers: int = 0, cache: Iterable[str] = ()
) -> JobRequest:
    return JobRequest(
        key=f"u/{name}", user="u", priority=0, submitted_at=0.0, pservers=pservers,
        pserver=Resources(500, GI // 2, 0), trainers=trainers, trainer=Resources(1000, GI, 0),
        min_trainers=lo, max_trainers=hi, cache_nodes=frozenset(cache),
    )  # fmt: skip


def snap(
    nodes: Sequence[NodeState], queue: Iterable[JobRequest] = (), running: Iterable[JobRequest] = ()
) -> Snapshot:
    return Snapshot(cycle=1, now=1000.0, nodes=tuple(nodes), queue=tuple(queue), running=tuple(running))


def running(
    j: JobRequest, on: Sequence[str], nodes: Sequence[NodeState]
) -> tuple[JobRequest, list[NodeState]]:
    """``j`` running one trainer per name in ``on``, and ``nodes`` with what it holds allocated."""
    placement = tuple(WorkerPlacement("trainer", i, n) for i, n in enumerate(on))
    held = [dataclasses.replace(n, allocated=n.allocated + j.trainer.times(on.count(n.name))) for n in nodes]
    return dataclasses.replace(j, running=len(on), placement=placement), held


def trainer_nodes(plan: Plan, key: str) -> list[str]:
    (admit,) = [a for a in plan.admit if a.job == key]
    return [p.node for p in admit.placement if p.role == "trainer"]


def message(plan: Plan, key: str) -> str:
    (admit,) = [a for a in plan.admit if a.job == key]
    return admit.message


@pytest.mark.parametrize("name", POLICIES)
def test_of_two_free_nodes_the_one_with_the_cache_is_chosen(name: str) -> None:
    nodes = [node("node-1"), node("node-2")]
    plain = policy(name).schedule(snap(nodes, [job("a")]))
    assert trainer_nodes(plain, "u/a") == ["node-1"]  # without a cache: the first node
    plan = policy(name).schedule(snap(nodes, [job("a", cache=["node-2"])]))
    assert trainer_nodes(plan, "u/a") == ["node-2"]
    assert message(plan, "u/a").endswith("placed on node-2 (holds the SampleSet cache)")


@pytest.mark.parametrize("name", POLICIES)
def test_a_pserver_job_gets_its_trainers_on_the_cache_node(name: str) -> None:
    nodes = [node("node-1"), node("node-2")]
    plan = policy(name).schedule(snap(nodes, [job("a", 2, pservers=1, cache=["node-2"])]))
    assert trainer_nodes(plan, "u/a") == ["node-2", "node-2"]
    assert "placed on node-2 (holds the SampleSet cache)" in message(plan, "u/a")


@pytest.mark.parametrize("name", POLICIES)
def test_a_full_cache_node_sends_the_job_elsewhere_and_says_so(name: str) -> None:
    nodes = [node("node-1"), node("node-2", used_cpu=3.5)]  # no room for a 1-cpu trainer
    plan = policy(name).schedule(snap(nodes, [job("a", cache=["node-2"])]))
    assert trainer_nodes(plan, "u/a") == ["node-1"]
    assert message(plan, "u/a").endswith("no node holding the SampleSet cache had room: placed on node-1")


@pytest.mark.parametrize("name", POLICIES)
def test_a_gang_over_several_nodes_takes_the_cache_nodes_first(name: str) -> None:
    nodes = [node(f"node-{i}") for i in range(1, 5)]  # 4 x 4 cpu, trainers of 1 cpu
    fixed = {"lo": 6, "hi": 6}
    plain = policy(name).schedule(snap(nodes, [job("a", 6, **fixed)]))
    assert sorted(set(trainer_nodes(plain, "u/a"))) == ["node-1", "node-2"]
    plan = policy(name).schedule(snap(nodes, [job("a", 6, **fixed, cache=["node-2", "node-4"])]))
    got = trainer_nodes(plan, "u/a")
    assert sorted(got) == ["node-2"] * 4 + ["node-4"] * 2 or sorted(got) == ["node-2"] * 2 + ["node-4"] * 4
    assert "placed on node-2, node-4 (hold the SampleSet cache)" in message(plan, "u/a")


@pytest.mark.parametrize("name", POLICIES)
def test_a_gang_larger_than_the_cache_nodes_spills_over_and_says_where(name: str) -> None:
    nodes = [node(f"node-{i}") for i in range(1, 4)]
    plan = policy(name).schedule(snap(nodes, [job("a", 6, lo=6, hi=6, cache=["node-3"])]))
    got = trainer_nodes(plan, "u/a")
    assert got.count("node-3") == 4  # the cache node is filled first
    assert message(plan, "u/a").endswith(
        "placed on node-3 (holds the SampleSet cache) and, no other node holding it having room, on node-1"
    )


@pytest.mark.parametrize("name", ELASTIC)
def test_a_grown_trainer_goes_to_a_cache_node_and_the_resize_says_so(name: str) -> None:
    nodes = [node("node-1"), node("node-2"), node("node-3")]
    for cache, where in ((["node-3"], "node-3"), ([], "node-1")):  # without a cache: beside its own
        j, held = running(job("a", 1, lo=1, hi=2, cache=cache), ["node-1"], nodes)
        plan = policy(name).schedule(snap(held, running=[j]))
        (resize,) = plan.resize
        assert resize.trainers == 2 and resize.placement[1].node == where
        if cache:
            assert resize.message.endswith("placed on node-3 (holds the SampleSet cache)")
        else:
            assert "SampleSet" not in resize.message


@pytest.mark.parametrize("name", POLICIES)
def test_unknown_cache_nodes_are_ignored(name: str) -> None:
    nodes = [node("node-1"), node("node-2")]
    plan = policy(name).schedule(snap(nodes, [job("a", cache=["gone"])]))
    assert trainer_nodes(plan, "u/a") == ["node-1"]
    assert message(plan, "u/a").endswith("no node holding the SampleSet cache had room: placed on node-1")


@pytest.mark.parametrize("name", POLICIES)
def test_every_node_holding_the_cache_places_as_without_one(name: str) -> None:
    """The preference only reorders nodes: when all hold the cache, every placement is the same."""
    nodes = [node("node-1", used_cpu=1), node("node-2", cpu=8), node("node-3", used_cpu=2.5), node("node-4")]
    r, held = running(job("r", 2, lo=1, hi=5), ["node-3", "node-1"], nodes)
    queue = [job("a", 3, pservers=1), job("b", 5, lo=2, hi=7), job("c", 1), job("d", 4, lo=4, hi=4)]
    names = [n.name for n in nodes]

    def cached(j: JobRequest) -> JobRequest:
        return dataclasses.replace(j, cache_nodes=frozenset(names))

    plain = policy(name).schedule(snap(held, queue, [r]))
    plan = policy(name).schedule(snap(held, [cached(j) for j in queue], [cached(r)]))
    assert plain.admit or plain.resize
    assert [(a.job, a.placement) for a in plan.admit] == [(a.job, a.placement) for a in plain.admit]
    assert [(x.job, x.placement) for x in plan.resize] == [(x.job, x.placement) for x in plain.resize]
    assert plan.wait == plain.wait
