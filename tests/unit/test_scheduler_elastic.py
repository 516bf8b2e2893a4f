"""scheduler: the preemptive and elastic policies ``tiresias``, ``edl``, ``elastic`` (``fifo`` for contrast).

Every case builds a small :class:`Snapshot` (GPU nodes, running jobs with real placements, a queue), asks
``policy(name)`` for a plan, checks the invariants every plan must keep (:func:`check`: gang, GPUs,
capacity, min/max, one decision per waiting job) and then compares the outcome to the hand-derived one.
Known bugs are pinned by strict xfail tests (``reason="BUG: ..."``).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import (
    EdlPolicy,
    ElasticPolicy,
    FifoPolicy,
    JobRequest,
    NodeState,
    Plan,
    Snapshot,
    WaitReason,
    WorkerPlacement,
    policy,
)

GI = 2**30
NOW = 10_000.0
INF = float("inf")

IR = WaitReason.INSUFFICIENT_RESOURCES
LP = WaitReason.LOWER_PRIORITY  # jobs ahead of it in the order hold what it needs
EX = WaitReason.EXCEEDS_NODE_CAPACITY
BH = WaitReason.BEHIND_EARLIER_JOB
LP = WaitReason.LOWER_PRIORITY

PREEMPTIVE = ("tiresias", "elastic")
SMART = ("tiresias", "edl", "elastic")
ALL = ("fifo", *SMART)

#: attained service that puts a job in the 2nd / 3rd LAS queue of both ladders (tiresias: 3,600 /
#: 36,000 s; elastic: 10,000 / 30,000 / 90,000 s)
SERVED = 12_000.0
MUCH_SERVED = 40_000.0


# ------------------------------------------------------------------------------------------ builders


def gnode(name: str, gpus: int = 4, cpu: float = 64) -> NodeState:
    """An empty node; :func:`snap` fills in what running jobs hold."""
    return NodeState(name, Resources(int(cpu * 1000), 256 * GI, gpus), Resources(), tuple(range(gpus)))


def job(
    name: str,
    trainers: int = 1,
    lo: int = 0,
    hi: int = 0,
    *,
    gpu: int = 1,
    cpu: float = 1,
    at: float = 0.0,
    prio: int = 0,
    attained: float = 0.0,
    speedup: tuple[float, ...] = (),
    resized_at: float = -INF,
) -> JobRequest:
    return JobRequest(
        key=name, user="u", priority=prio, submitted_at=at, pservers=0, pserver=Resources(),
        trainers=trainers, trainer=Resources(int(cpu * 1000), GI, gpu), min_trainers=lo,
        max_trainers=hi, attained=attained, speedup=speedup, resized_at=resized_at,
    )  # fmt: skip


def elastic(name: str, trainers: int, lo: int, hi: int, **kw: Any) -> JobRequest:
    return job(name, trainers, lo, hi, **kw)


Running = tuple[JobRequest, Sequence[str]]


def snap(
    nodes: Iterable[NodeState],
    queue: Iterable[JobRequest] = (),
    running: Iterable[Running] = (),
    now: float = NOW,
) -> Snapshot:
    """``running``: (job, one node name per trainer); GPUs are handed out lowest index first, and the
    nodes' ``allocated`` / ``free_gpus`` are derived, as the controller and the simulator do."""
    nodes = tuple(nodes)
    free = {n.name: list(n.free_gpus) for n in nodes}
    held = {n.name: n.allocated for n in nodes}
    jobs = []
    for j, on in running:
        placement = []
        for i, name in enumerate(on):
            gpus = tuple(free[name][: j.trainer.gpu])
            del free[name][: j.trainer.gpu]
            held[name] = held[name] + j.trainer
            placement.append(WorkerPlacement("trainer", i, name, gpus))
        jobs.append(dataclasses.replace(j, running=len(on), placement=tuple(placement)))
    nodes = tuple(
        dataclasses.replace(n, allocated=held[n.name], free_gpus=tuple(free[n.name])) for n in nodes
    )
    return Snapshot(cycle=3, now=now, nodes=nodes, queue=tuple(queue), running=tuple(jobs))


def bounds(name: str, j: JobRequest) -> tuple[int, int]:
    """Trainer counts a policy may give ``j``: the rigid ones run exactly what was asked."""
    return (j.lo, j.hi) if name in ("edl", "elastic") else (j.trainers, j.trainers)


def check(name: str, s: Snapshot, plan: Plan) -> None:
    """Invariants of every plan, whatever the policy."""
    queue = {j.key: j for j in s.queue}
    running = {j.key: j for j in s.running}
    admitted = [a.job for a in plan.admit]
    resized = [r.job for r in plan.resize]
    preempted = [p.job for p in plan.preempt]
    assert len(set(admitted)) == len(admitted) and set(admitted) <= set(queue)
    assert len(set(resized)) == len(resized) and set(resized) <= set(running)
    assert len(set(preempted)) == len(preempted) and set(preempted) <= set(running)
    assert not set(resized) & set(preempted)
    if name == "fifo":
        assert not plan.resize and not plan.preempt
    if name in ("fifo", "edl"):
        assert not plan.preempt
    # every waiting job gets exactly one decision: admitted, or a typed reason with numbers in it
    waited = [w.job for w in plan.wait if w.job in queue]
    assert sorted(admitted + waited) == sorted(queue)
    for w in plan.wait:
        assert isinstance(w.reason, WaitReason)
        assert w.job in queue or w.job in preempted, f"Wait for a job that keeps running: {w}"
        if name != "fifo" or w.reason is not BH:
            assert re.search(r"\d", w.message), w.message
    # what every job holds after the plan: gang (min..max), whole trainers on one node, distinct GPUs
    final: dict[str, tuple[JobRequest, tuple[WorkerPlacement, ...]]] = {}
    for j in s.running:
        if j.key not in preempted:
            final[j.key] = (j, j.placement)
    for r in plan.resize:
        old = running[r.job]
        assert r.trainers == len(r.placement)
        if r.trainers == old.running:  # a batch-only resize: same trainers, a new batch
            assert r.placement == old.placement and 0 < r.batch_size != old.batch_size, r
        keep = min(old.running, r.trainers)
        assert r.placement[:keep] == old.placement[:keep], "a resize must keep the lowest trainers in place"
        final[r.job] = (old, r.placement)
    for a in plan.admit:
        final[a.job] = (queue[a.job], a.placement)
    node = {n.name: n for n in s.nodes}
    gpu_ids = {n.name: set(n.free_gpus) for n in s.nodes}
    for j in s.running:
        for p in j.placement:
            gpu_ids[p.node] |= set(p.gpus)
    used = {n: Resources() for n in node}
    taken: dict[str, list[int]] = {n: [] for n in node}
    for key, (j, placement) in final.items():
        trainers = [p for p in placement if p.role == "trainer"]
        lo, hi = bounds(name, j)
        if key in queue or key in resized:
            assert lo <= len(trainers) <= hi, f"{key}: {len(trainers)} trainers, allowed {lo}..{hi}"
        assert [p.index for p in trainers] == list(range(len(trainers)))
        for p in trainers:
            assert len(p.gpus) == j.trainer.gpu == len(set(p.gpus))
            used[p.node] = used[p.node] + j.trainer
            taken[p.node].extend(p.gpus)
    for n in node:
        assert sorted(taken[n]) == sorted(set(taken[n])), f"{n}: a GPU given twice: {taken[n]}"
        assert set(taken[n]) <= gpu_ids[n]
        assert used[n].fits_in(node[n].capacity), f"{n}: {used[n]} over {node[n].capacity}"


def decide(name: str, s: Snapshot) -> Plan:
    plan = policy(name).schedule(s)
    check(name, s, plan)
    return plan


def outcome(s: Snapshot, plan: Plan) -> dict[str, Any]:
    """Admitted / resized trainer counts, preempted jobs and waiting jobs' reasons (queue jobs only)."""
    queue = {j.key for j in s.queue}
    return {
        "admit": {a.job: sum(p.role == "trainer" for p in a.placement) for a in plan.admit},
        "resize": {r.job: r.trainers for r in plan.resize},
        "preempt": sorted(p.job for p in plan.preempt),
        "wait": {w.job: w.reason for w in plan.wait if w.job in queue},
    }


def want(
    admit: dict[str, int] | None = None,
    resize: dict[str, int] | None = None,
    preempt: Sequence[str] = (),
    wait: dict[str, WaitReason] | None = None,
) -> dict[str, Any]:
    return {"admit": admit or {}, "resize": resize or {}, "preempt": sorted(preempt), "wait": wait or {}}


def nodes_of(plan: Plan, key: str) -> list[str]:
    a = next(a for a in plan.admit if a.job == key)
    return [p.node for p in a.placement if p.role == "trainer"]


# ------------------------------------------------------------------------------------- the table

N1 = [gnode("n0")]
N2 = [gnode("n0"), gnode("n1")]
HIGH = {"prio": 5}  # a running job ahead of everything else in every policy's order


def case(pol: str, case_id: str, nodes: list[NodeState], queue: list[JobRequest],
         running: list[Running], expected: dict[str, Any]) -> Any:  # fmt: skip
    return pytest.param(pol, nodes, queue, running, expected, id=f"{pol}-{case_id}")


CASES = [
    # ---- gang: at least min trainers, or nothing
    *(
        case(p, "gang-min-does-not-fit-waits", N1, [elastic("N", 3, 3, 4)],
             [(job("H", 2, **HIGH), ["n0", "n0"])], want(wait={"N": IR if p == "edl" else LP}))
        for p in SMART
    ),
    *(
        case(p, "gang-admitted-at-min-when-only-min-fits", N1, [elastic("N", 3, 2, 4)],
             [(job("H", 2, **HIGH), ["n0", "n0"])], want(admit={"N": 2}))
        for p in ("edl", "elastic")
    ),
    case("tiresias", "rigid-needs-all-it-asked", N1, [elastic("N", 3, 2, 4)],
         [(job("H", 2, **HIGH), ["n0", "n0"])], want(wait={"N": LP})),
    *(
        case(p, "two-gpu-trainers-never-split", N2, [job("N", 3, gpu=2)],
             [(job("H", 2, **HIGH), ["n0", "n1"])], want(wait={"N": LP if p in PREEMPTIVE else IR}))
        for p in ALL
    ),
    *(
        case(p, "two-gpu-trainers-one-per-node", N2, [job("N", 2, gpu=2)],
             [(job("H", 2, **HIGH), ["n0", "n1"])], want(admit={"N": 2}))
        for p in ALL
    ),
    # ---- priority and least attained service
    *(
        case(p, "higher-priority-first", [gnode("n0", gpus=2)],
             [job("old", 2, at=1), job("vip", 2, at=5, prio=10)], [],
             want(admit={"vip": 2}, wait={"old": IR}))
        for p in ALL
    ),
    *(
        case(p, "less-served-preempts-more-served", N1, [job("N", 2, at=100)],
             [(job("R", 4, attained=MUCH_SERVED), ["n0"] * 4)], want(admit={"N": 2}, preempt=["R"]))
        for p in PREEMPTIVE
    ),
    *(
        case(p, "never-preempts", N1, [job("N", 2, at=100)],
             [(job("R", 4, attained=MUCH_SERVED), ["n0"] * 4)], want(wait={"N": IR}))
        for p in ("fifo", "edl")
    ),
    *(
        case(p, "fits-without-preempting", N1, [job("N", 2, at=100)],
             [(job("R", 2, attained=MUCH_SERVED), ["n0"] * 2)], want(admit={"N": 2}))
        for p in PREEMPTIVE
    ),
    *(
        case(p, "same-las-queue-earlier-job-keeps-running", N1, [job("N", 2, at=100)],
             [(job("R", 4, attained=3_000.0), ["n0"] * 4)], want(wait={"N": LP}))
        for p in PREEMPTIVE
    ),
    *(
        case(p, "higher-priority-never-preempted-by-less-served", N1, [job("N", 2, at=100)],
             [(job("H", 4, attained=MUCH_SERVED, prio=1), ["n0"] * 4)], want(wait={"N": LP}))
        for p in PREEMPTIVE
    ),
    *(
        case(p, "most-served-is-preempted-first", N1, [job("N", 2, at=100)],
             [(job("A", 2, attained=SERVED), ["n0"] * 2), (job("B", 2, attained=MUCH_SERVED), ["n0"] * 2)],
             want(admit={"N": 2}, preempt=["B"]))
        for p in PREEMPTIVE
    ),
    # ---- elastic: shrink before preempting
    case("elastic", "shrinks-instead-of-preempting", N1, [job("N", 2, at=100)],
         [(elastic("E", 4, 1, 4, attained=MUCH_SERVED), ["n0"] * 4)], want(admit={"N": 2}, resize={"E": 2})),
    case("tiresias", "rigid-policy-preempts-the-elastic-job", N1, [job("N", 2, at=100)],
         [(elastic("E", 4, 1, 4, attained=MUCH_SERVED), ["n0"] * 4)], want(admit={"N": 2}, preempt=["E"])),
    case("elastic", "shrink-not-enough-then-preempt-the-last", N1, [job("N", 3, at=100)],
         [(elastic("E", 3, 1, 3, attained=MUCH_SERVED), ["n0"] * 3),
          (job("R", 1, at=1, attained=MUCH_SERVED), ["n0"])],
         want(admit={"N": 3}, resize={"E": 1}, preempt=["R"])),
    case("elastic", "shrinks-an-earlier-job-down-to-min", N1, [job("N", 2, at=100)],
         [(elastic("E", 2, 2, 4, prio=1), ["n0"] * 4)], want(admit={"N": 2}, resize={"E": 2})),
    case("elastic", "never-below-min-never-preempts-earlier", N1, [job("N", 3, at=100)],
         [(elastic("E", 2, 2, 4, prio=1), ["n0"] * 4)], want(wait={"N": LP})),
    case("elastic", "preempts-later-job-when-its-min-is-not-enough", N1, [job("N", 3, at=100)],
         [(elastic("E", 2, 2, 4, attained=MUCH_SERVED), ["n0"] * 4)], want(admit={"N": 3}, preempt=["E"])),
    # ---- elastic: growth by marginal speed-up, up to max, not within the resize cooldown
    case("elastic", "linear-speedup-gets-the-spare-gpus", N1,
         [elastic("F", 1, 1, 4, speedup=(1.0, 1.0, 1.0, 1.0)), elastic("L", 1, 1, 4, at=1)], [],
         want(admit={"F": 1, "L": 3})),
    case("elastic", "concave-loses-to-linear", N1,
         [elastic("C", 1, 1, 4, speedup=(1.0, 1.5, 1.8, 2.0)), elastic("L", 1, 1, 4, at=1)], [],
         want(admit={"C": 1, "L": 3})),
    case("elastic", "growth-bounded-by-max", [gnode("n0", gpus=8)],
         [elastic("A", 1, 1, 3), elastic("B", 1, 1, 2, at=1)], [], want(admit={"A": 3, "B": 2})),
    case("elastic", "topped-up-to-requested-then-grown", [gnode("n0", gpus=8)],
         [elastic("A", 3, 1, 5)], [], want(admit={"A": 5})),
    case("elastic", "running-job-grown-after-cooldown", N1, [],
         [(elastic("E", 1, 1, 4, resized_at=NOW - 301), ["n0"])], want(resize={"E": 4})),
    case("elastic", "running-job-not-grown-within-cooldown", N1, [],
         [(elastic("E", 1, 1, 4, resized_at=NOW - 100), ["n0"])], want()),
    case("elastic", "cooldown-job-left-alone-other-grows", N1, [elastic("N", 1, 1, 4, at=100)],
         [(elastic("E", 1, 1, 4, resized_at=NOW - 100), ["n0"])], want(admit={"N": 3})),
    case("tiresias", "never-grows", N1, [elastic("N", 1, 1, 4)], [], want(admit={"N": 1})),
    # ---- edl: the seed's controller
    case("edl", "fifo-at-min-then-grow-while-load-le-097", [gnode("n0", gpus=8)],
         [elastic("A", 4, 2, 8), elastic("B", 4, 2, 8, at=1)], [], want(admit={"A": 4, "B": 3})),
    case("edl", "grows-least-fulfilled-first", N2, [],
         [(elastic("X", 3, 1, 5), ["n0"] * 3), (elastic("Y", 1, 1, 3), ["n1"])],
         want(resize={"X": 4, "Y": 3})),
    case("edl", "admission-does-not-block-on-a-big-head", N1,
         [job("A", 3), job("B", 2, at=1)], [(job("H", 2, **HIGH), ["n0"] * 2)],
         want(admit={"B": 2}, wait={"A": IR})),
    # the shrink the waiting min causes makes the room it starts in, in the same cycle (the seed's
    # pending pods were bound by Kubernetes as soon as the shrink freed room)
    case("edl", "waiting-min-shrinks-running-elastic-and-starts", N1, [job("W", 2, at=100)],
         [(elastic("E", 4, 1, 4), ["n0"] * 4)], want(resize={"E": 1}, admit={"W": 2})),
    # load 62 / 70 cores <= 0.97, but no node has 2 cores free (1 left on each): trainers are shed
    # until the waiting job fits, rather than leaving it to wait for a job to end
    case("edl", "sheds-trainers-when-free-cpu-is-only-fragments",
         [gnode(f"c{i}", gpus=0, cpu=7) for i in range(10)], [job("W", 1, gpu=0, cpu=2, at=100)],
         [(elastic("E", 30, 1, 30, gpu=0, cpu=2), [f"c{i // 3}" for i in range(30)])],
         want(resize={"E": 29}, admit={"W": 1})),
    # a waiting job with pservers: elastic jobs shrink until its pservers and trainers fit together
    # (shrinking until its trainer alone fit left both on the same 2 free cores: it waited for ever)
    *(
        case(p, "shrinks-until-pservers-and-trainers-fit", [gnode(f"c{i}", gpus=0, cpu=8) for i in range(2)],
             [dataclasses.replace(job("W", 1, gpu=0, cpu=2, at=100), pservers=1,
                                  pserver=Resources(2000, GI, 0))],
             [(elastic("E", 8, 1, 8, gpu=0, cpu=2), ["c0"] * 4 + ["c1"] * 4)],
             want(resize={"E": n}, admit={"W": 1}))
        for p, n in (("edl", 5), ("elastic", 6))  # edl keeps its 3 % headroom: (5 x 2 + 4) / 16 cores
    ),
    case("edl", "shrinks-never-below-min", N1, [job("W", 3, at=100)],
         [(elastic("E", 4, 2, 4), ["n0"] * 4)], want(resize={"E": 2}, wait={"W": IR})),
    case("edl", "rigid-running-jobs-are-never-resized", N1, [job("W", 2, at=100)],
         [(job("R", 3), ["n0"] * 3)], want(wait={"W": IR})),
    case("edl", "ignores-las-and-cooldown", N1, [],
         [(elastic("E", 1, 1, 4, attained=MUCH_SERVED, resized_at=NOW), ["n0"])], want(resize={"E": 3})),
    # ---- reasons: a job bigger than any node waits with ExceedsNodeCapacity and blocks nobody
    *(
        case(p, "too-big-for-any-node-does-not-block", N1, [job("huge", gpu=8), job("small", 2, at=1)],
             [], want(admit={"small": 2}, wait={"huge": EX}))
        for p in ALL
    ),
    # ---- CPU-only jobs
    *(
        case(p, "cpu-only", [gnode("c0", gpus=0, cpu=8), gnode("c1", gpus=0, cpu=8)],
             [elastic("C", 2, 1, 4, gpu=0, cpu=4)], [], want(admit={"C": n}))
        for p, n in (("fifo", 2), ("tiresias", 2), ("edl", 3), ("elastic", 4))
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "nodes", "queue", "running", "expected"), CASES)
def test_policy_table(
    name: str,
    nodes: list[NodeState],
    queue: list[JobRequest],
    running: list[Running],
    expected: dict[str, Any],
) -> None:
    s = snap(nodes, queue, running)
    assert outcome(s, decide(name, s)) == expected


# ------------------------------------------------------------------------------------------- gang


@pytest.mark.parametrize("name", ALL)
def test_trainers_are_packed_on_one_node_when_one_has_room(name: str) -> None:
    s = snap(N2, [job("N", 4, at=1)])
    assert nodes_of(decide(name, s), "N") == ["n0"] * 4


@pytest.mark.parametrize("name", ALL)
def test_trainers_go_to_the_node_that_holds_them_all(name: str) -> None:
    s = snap(N2, [job("N", 4, at=1)], [(job("H", 2, **HIGH), ["n0", "n0"])])
    assert nodes_of(decide(name, s), "N") == ["n1"] * 4


@pytest.mark.parametrize("name", ALL)
def test_trainers_spill_to_a_second_node_only_when_needed(name: str) -> None:
    s = snap(N2, [job("N", 6, at=1)])
    assert sorted(nodes_of(decide(name, s), "N")) == ["n0"] * 4 + ["n1"] * 2


@pytest.mark.parametrize("name", ALL)
def test_gpu_indices_are_the_free_ones_and_distinct(name: str) -> None:
    s = snap([gnode("n0", gpus=8)], [job("A", 1, gpu=2, at=1), job("B", 2, gpu=2, at=2)],
             [(job("H", 1, gpu=2, **HIGH), ["n0"])])  # fmt: skip
    plan = decide(name, s)
    given = [g for a in plan.admit for p in a.placement for g in p.gpus]
    assert sorted(given) == [2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("name", ("edl", "elastic"))
def test_a_waiting_job_is_admitted_with_at_least_its_min(name: str) -> None:
    s = snap(N2, [elastic(f"J{i}", 2, 2, 3, at=i) for i in range(5)])
    plan = decide(name, s)
    assert [a.job for a in plan.admit] and all(
        sum(p.role == "trainer" for p in a.placement) >= 2 for a in plan.admit
    )
    assert sum(len(a.placement) for a in plan.admit) <= 8


# --------------------------------------------------------------------------------------- reasons


@pytest.mark.parametrize("name", SMART)
def test_every_waiting_job_has_a_reason_with_numbers(name: str) -> None:
    queue = [job(f"w{i}", 3, at=100 + i) for i in range(4)] + [job("huge", gpu=16, at=99)]
    s = snap(N1, queue, [(elastic("R", 2, 2, 2, attained=SERVED, **HIGH), ["n0", "n0"])])
    plan = decide(name, s)
    assert {w.job for w in plan.wait} == {j.key for j in queue}
    huge = next(w for w in plan.wait if w.job == "huge")
    assert huge.reason is EX and "gpu 16" in huge.message and "gpu 4" in huge.message
    for w in plan.wait:
        if w.job != "huge":
            assert w.reason is (IR if name == "edl" else LP)  # R (priority) holds what they need
            assert "3 trainers" in w.message and "gpu 1" in w.message


@pytest.mark.parametrize("name", PREEMPTIVE)
def test_wait_message_counts_the_jobs_ahead(name: str) -> None:
    s = snap(N1, [job("N", 2, at=100)], [(job("H", 4, **HIGH), ["n0"] * 4)])
    (w,) = decide(name, s).wait
    assert "needs 2 trainers" in w.message and "1 job(s) ahead" in w.message


@pytest.mark.parametrize("name", PREEMPTIVE)
def test_blocked_by_a_higher_priority_job_waits_with_lower_priority(name: str) -> None:
    s = snap(N1, [job("N", 2, at=100)], [(job("H", 4, **HIGH), ["n0"] * 4)])
    assert outcome(s, decide(name, s))["wait"] == {"N": LP}


# ------------------------------------------------------------------------- purity and determinism


def busy_snapshot() -> Snapshot:
    return snap(
        N2,
        [
            job("N", 2, at=100),
            elastic("M", 2, 1, 4, at=101),
            job("huge", gpu=9, at=50),
            job("C", gpu=0, at=102),
        ],
        [
            (elastic("E", 3, 1, 6, attained=MUCH_SERVED, resized_at=NOW - 1000), ["n0", "n0", "n1"]),
            (job("R", 2, attained=SERVED, at=5), ["n1", "n1"]),
            (elastic("S", 1, 1, 4, at=6, speedup=(1.0, 1.5, 1.7, 1.8)), ["n0"]),
        ],
    )


@pytest.mark.parametrize("name", ALL)
def test_schedule_does_not_mutate_the_snapshot(name: str) -> None:
    s = busy_snapshot()
    before = copy.deepcopy(s)
    decide(name, s)
    decide(name, s)
    assert s == before


@pytest.mark.parametrize("name", ALL)
def test_same_snapshot_same_plan(name: str) -> None:
    first = decide(name, busy_snapshot())
    assert decide(name, busy_snapshot()) == first
    assert policy(name).schedule(busy_snapshot()) == first


def test_the_busy_snapshot_exercises_every_kind_of_decision() -> None:
    """So that the purity tests above cover admit, resize, wait (and preempt) paths."""
    plan = decide("elastic", busy_snapshot())
    assert plan.admit and plan.resize and plan.wait


_PLAN_SCRIPT = """
import dataclasses
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Snapshot, WorkerPlacement, policy
cap = Resources(64000, 2**38, 4)
nodes = tuple(NodeState(n, cap, Resources(1000, 2**30, 1), (1, 2, 3)) for n in ("n0", "n1"))
on = (WorkerPlacement("trainer", 0, "n0", (0,)), WorkerPlacement("trainer", 1, "n1", (0,)))
e = JobRequest(key="E", user="u", priority=0, submitted_at=0.0, pservers=0, pserver=Resources(), trainers=2,
               trainer=Resources(1000, 2**30, 1), min_trainers=1, max_trainers=3, running=2, placement=on)
print(policy("elastic").schedule(Snapshot(1, 0.0, nodes, (), (e,))))
"""


def test_plan_is_the_same_in_every_process() -> None:
    plans = set()
    for seed in ("0", "3"):  # two seeds that iterate {"n0", "n1"} in different orders today
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _PLAN_SCRIPT], env=env, capture_output=True, text=True,
                             check=True, timeout=60)  # fmt: skip
        plans.add(out.stdout)
    assert len(plans) == 1, plans


def test_an_adaptive_job_climbs_the_las_ladder_slower_than_a_fixed_batch_job() -> None:
    # both served 12,000 GPU-seconds: the fixed-batch job is in the 2nd queue, the adaptive one
    # (rate(1) = 1) counts 12,000 / ADAPTIVE_SERVICE_SCALE and is still in the 1st: it goes first
    # although it came later; at 3x that service both are in the 2nd queue and submit time decides
    fixed = job("F", 4, attained=SERVED, at=1)
    for served, first in ((SERVED, "A"), (3 * SERVED, "F")):
        adaptive = dataclasses.replace(job("A", 4, attained=served, at=2), batches=(32,) * 4)
        s = snap(N1, [fixed, adaptive])
        assert outcome(s, decide("elastic", s))["admit"] == {first: 4}


#: an adaptive job's goodput table: best global batch and goodput speed-up on 1..4 trainers
TABLE = {"batches": (64, 128, 256, 512), "speedup": (1.0, 1.9, 2.7, 3.4)}


def adaptive_running(batch_size: int, rebatched_at: float, resized_at: float = -INF) -> JobRequest:
    """An adaptive job (1..4 trainers) that runs at ``batch_size``, last re-batched at ``rebatched_at``."""
    a = elastic("A", 1, 1, 4, resized_at=resized_at)
    return dataclasses.replace(a, **TABLE, batch_size=batch_size, rebatched_at=rebatched_at)


@pytest.mark.parametrize(("since", "rebatched"), [(100.0, False), (299.0, False), (300.0, True)])
def test_a_rebatch_right_after_a_rebatch_waits_for_the_cooldown(since: float, rebatched: bool) -> None:
    # on its one GPU at batch 256 where its table's best on one trainer is 64 (x4: stale); its
    # trainers have never moved (resized_at -inf): only the re-batch ``since`` s ago holds it back
    s = snap([gnode("n0", 1)], running=[(adaptive_running(256, NOW - since), ["n0"])])
    plan = decide("elastic", s)
    if not rebatched:
        assert plan.resize == []
        return
    (r,) = plan.resize
    assert (r.job, r.trainers, r.batch_size) == ("A", 1, 64)
    assert "global batch 256 -> 64 on 1 trainers" in r.message


def test_a_grow_right_after_a_rebatch_is_allowed() -> None:
    # re-batched this instant on its one trainer (its batch is the table's), three GPUs free: the grow
    # cooldown reads resized_at (its trainers last moved long ago), so it grows to 4 at 4's batch
    s = snap(N1, running=[(adaptive_running(64, NOW, resized_at=NOW - 1000), ["n0"])])
    plan = decide("elastic", s)
    (r,) = plan.resize
    assert (r.job, r.trainers, r.batch_size) == ("A", 4, 512)
    # ... while a job whose trainers moved within the cooldown is not grown
    s = snap(N1, running=[(adaptive_running(64, NOW, resized_at=NOW - 100), ["n0"])])
    assert decide("elastic", s).resize == []


# ---------------------------------------------------------------------------------- known bugs


def test_elastic_does_not_grow_a_job_into_a_slowdown() -> None:
    s = snap(N1, [elastic("D", 1, 1, 4, speedup=(1.0, 0.8, 0.6, 0.5))])
    assert outcome(s, decide("elastic", s))["admit"] == {"D": 1}


@pytest.mark.parametrize("name", PREEMPTIVE)
def test_only_the_victims_that_are_needed_are_preempted(name: str) -> None:
    b = job("B", 3, attained=SERVED, at=1)
    c = job("C", 1, attained=MUCH_SERVED, at=2)
    s = snap(N1, [job("N", 3, at=100)], [(b, ["n0"] * 3), (c, ["n0"])])
    assert outcome(s, decide(name, s)) == want(admit={"N": 3}, preempt=["B"])


def test_a_trainer_shrunk_for_a_job_is_not_grown_back_elsewhere() -> None:
    # j gives its 2nd trainer to w (w needs n0's cpu); topping j up again would put that trainer on
    # n1 (2 GPUs free, cpu enough for j's trainers only) while the plan, with j still at 2, kept it on
    # n0 under w
    j = elastic("j", 2, 1, 2, attained=SERVED)
    s = snap([gnode("n0", 2), gnode("n1", 2, cpu=2)], [job("w", at=1, cpu=8)], [(j, ["n0", "n0"])])
    plan = decide("elastic", s)
    assert outcome(s, plan) == want(admit={"w": 1}, resize={"j": 1})
    assert [(p.node, p.gpus) for p in plan.admit[0].placement] == [("n0", (1,))]


def test_edl_a_job_that_never_fits_does_not_shrink_running_jobs() -> None:
    s = snap(N1, [job("huge", gpu=8)], [(elastic("E", 3, 1, 4), ["n0"] * 3)])
    assert outcome(s, decide("edl", s)) == want(wait={"huge": EX})


# ------------------------------------------------------------------------------------- the names


@pytest.mark.parametrize(
    ("name", "kind", "fields"),
    [
        ("tiresias", ElasticPolicy, {"elastic": False, "grow": False, "preempt": True}),
        ("elastic", ElasticPolicy, {"elastic": True, "grow": True, "preempt": True}),
        ("edl", EdlPolicy, {"max_load": 0.97}),
        ("fifo", FifoPolicy, {"backfill": False}),
    ],
)
def test_policy_by_name(name: str, kind: type, fields: dict[str, Any]) -> None:
    p = policy(name)
    assert type(p) is kind and p.name == name
    assert {k: getattr(p, k) for k in fields} == fields


def test_a_round_runs_with_the_garbage_collector_paused_and_restores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    from paddlecloud.scheduler import elastic as module

    seen: list[bool] = []
    minimums = module._Cycle.minimums

    def spy(self: Any) -> None:
        seen.append(gc.isenabled())
        minimums(self)

    monkeypatch.setattr(module._Cycle, "minimums", spy)
    s = snap([gnode("a", 4)], queue=[job("q", 2)])
    assert gc.isenabled()
    policy("elastic").schedule(s)
    assert seen == [False] and gc.isenabled()
    gc.disable()  # the caller's choice stands
    try:
        policy("elastic").schedule(s)
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()

    def boom(self: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(module._Cycle, "minimums", boom)
    with pytest.raises(RuntimeError):
        policy("elastic").schedule(s)
    assert gc.isenabled()


@pytest.mark.parametrize("which", ["trainer_at", "admit_of", "resize_of"])
def test_fast_constructors_make_what_the_dataclass_makes(which: str) -> None:
    import pickle

    from paddlecloud.scheduler.decisions import Admit, Resize, admit_of, resize_of, trainer_at

    p = (WorkerPlacement("trainer", 0, "n1", (0, 2)),)
    fast, made = {
        "trainer_at": lambda: (trainer_at(3, "n1", (0, 2)), WorkerPlacement("trainer", 3, "n1", (0, 2))),
        "admit_of": lambda: (admit_of("j1", p, "admitted", 64), Admit("j1", p, "admitted", 64)),
        "resize_of": lambda: (resize_of("j1", 1, p, "grown", 0), Resize("j1", 1, p, "grown", 0)),
    }[which]()
    assert type(fast) is type(made) and vars(fast) == vars(made) and list(vars(fast)) == list(vars(made))
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    assert dataclasses.asdict(fast) == dataclasses.asdict(made) and pickle.loads(pickle.dumps(fast)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.job = "n2"  # type: ignore[union-attr]
