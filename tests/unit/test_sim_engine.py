"""sim.engine and sim.runner: exact JCTs of tiny simulations, the live scheduler package driving them,
and workload-1 against the Pollux paper's Tiresias figure.

The tiny simulations use a fake :class:`~paddlecloud.sim.profiles.ThroughputModel` (10 samples/s per
replica, whatever the placement), so every JCT below is worked out by hand: jobs start only at round
boundaries (every 60 s from the first submission), a job that finishes inside a round finishes at the
exact moment, and every start costs ``restart_s`` seconds without progress.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import paddlecloud.scheduler as scheduler
import paddlecloud.scheduler.apply as scheduler_apply
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Snapshot, WorkerPlacement
from paddlecloud.sim import ClusterSpec, SimJob, engine, load_result, runner
from paddlecloud.sim.engine import SimConfig, SimResult, simulate
from paddlecloud.sim.runner import RunSpec

GI = 2**30
POLLUX = Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux"
NODE = Resources(cpu_m=64_000, memory=256 * GI, gpu=4)
ONE_NODE = ClusterSpec(nodes=1, node=NODE)


class Linear:
    """10 samples/s per replica, on any placement; 4 replicas at most."""

    name = "linear"

    def throughput(self, replicas: int, nodes: int, global_bsz: float) -> float:
        return 10.0 * replicas

    def work(self, global_bsz: float) -> float:
        return 600.0

    def max_replicas(self, global_bsz: float) -> int:
        return 4


MODELS: dict[str, Any] = {"linear": Linear()}


def sjob(name: str, at: float, replicas: int, work: float | None, lo: int = 0, hi: int = 0) -> SimJob:
    return SimJob(name, at, "linear", replicas, 64, min_replicas=lo, max_replicas=hi, work=work)


def sim(jobs: list[SimJob], name: str, restart_s: float = 0.0, cluster: ClusterSpec = ONE_NODE) -> SimResult:
    return simulate(
        jobs, MODELS, scheduler.policy(name), SimConfig(cluster, round_s=60.0, restart_s=restart_s)
    )


class Spy:
    """A policy wrapper that records every snapshot and plan."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[tuple[Snapshot, Plan]] = []

    def schedule(self, snap: Snapshot) -> Plan:
        plan = self.inner.schedule(snap)
        self.seen.append((snap, plan))
        return plan


# ------------------------------------------------------------------------------ exact, by hand

# A (2 replicas, 20/s) 0..120; B (4 replicas, 40/s, submitted at 10) only fits once A is gone: it starts
# at the 120 s boundary and takes 30 s; C (2 replicas, 20/s, submitted at 20) waits behind it and starts
# at 180; D arrives at 1,000 on an idle cluster (the clock jumps to it) and needs 30 s on 1 replica.
# With restart_s = 30 every run starts 30 s late: A ends at 150 (so B starts at 180, ends at 240),
# C starts at 240, ends at 300.
FIFO_JOBS = [sjob("A", 0, 2, 2400), sjob("B", 10, 4, 1200), sjob("C", 20, 2, 600), sjob("D", 1000, 1, 300)]


@pytest.mark.parametrize(
    ("restart_s", "jct", "queue_delay", "makespan"),
    [
        pytest.param(0.0, {"A": 120, "B": 140, "C": 190, "D": 30},
                     {"A": 0, "B": 110, "C": 160, "D": 0}, 1030, id="no-restart-cost"),
        pytest.param(30.0, {"A": 150, "B": 230, "C": 280, "D": 60},
                     {"A": 0, "B": 170, "C": 220, "D": 0}, 1060, id="restart-30s"),
    ],
)  # fmt: skip
def test_fifo_jcts_by_hand(
    restart_s: float, jct: dict[str, float], queue_delay: dict[str, float], makespan: float
) -> None:
    r = sim(FIFO_JOBS, "fifo", restart_s)
    assert r.jct == pytest.approx(jct, abs=1e-6)
    assert r.queue_delay == pytest.approx(queue_delay, abs=1e-6)
    assert r.makespan == pytest.approx(makespan, abs=1e-6)
    assert r.unfinished == [] and r.resizes == 0 and r.preemptions == 0
    summary = r.summary(capacity_gpus=4)
    assert summary["avg_jct_s"] == pytest.approx(sum(jct.values()) / 4, abs=1e-6)
    assert summary["jobs"] == 4


def test_jobs_that_fit_together_run_together() -> None:
    # 1 + 1 + 2 replicas on 4 GPUs: all start at 0; 600 / 10 = 60, 1200 / 10 = 120, 600 / 20 = 30.
    jobs = [sjob("a", 0, 1, 600), sjob("b", 0, 1, 1200), sjob("c", 0, 2, 600)]
    r = sim(jobs, "fifo")
    assert r.jct == pytest.approx({"a": 60, "b": 120, "c": 30}, abs=1e-6)
    assert r.queue_delay == {"a": 0, "b": 0, "c": 0}


def test_work_defaults_to_the_model() -> None:
    # no explicit work: Linear.work() = 600 samples at 10/s on 1 replica
    assert sim([sjob("m", 5, 1, None)], "fifo").jct == pytest.approx({"m": 60.0}, abs=1e-6)


def test_a_job_past_the_horizon_is_unfinished() -> None:
    r = simulate(
        [sjob("long", 0, 1, 10**9)], MODELS, scheduler.policy("fifo"), SimConfig(ONE_NODE, horizon_s=600)
    )
    assert r.unfinished == ["long"] and r.jct == {}


def test_preempted_job_resumes_with_its_progress() -> None:
    # tiresias, 4 GPUs. L (4 replicas, 40/s) runs alone from 0 and has 4 x 1,020 = 4,080 GPU-s of service at
    # the 1,020 s boundary (LAS queue 1, threshold 3,600); S (4 replicas, submitted at 1,000, queue 0)
    # preempts it there and runs 1,020..1,080. L has done 40 x 1,020 = 40,800 of 60,000 samples, resumes at
    # the 1,080 boundary and needs 19,200 / 40 = 480 s more: it ends at 1,560.
    r = sim([sjob("L", 0, 4, 60_000), sjob("S", 1000, 4, 2400)], "tiresias")
    assert r.jct == pytest.approx({"L": 1560, "S": 80}, abs=1e-6)
    assert r.queue_delay == pytest.approx({"L": 0, "S": 20}, abs=1e-6)
    assert r.preemptions == 1


def test_fifo_never_preempts_the_long_job() -> None:
    # the same workload under fifo: L runs to 60,000 / 40 = 1,500; S starts at the 1,500 boundary.
    r = sim([sjob("L", 0, 4, 60_000), sjob("S", 1000, 4, 2400)], "fifo")
    assert r.jct == pytest.approx({"L": 1500, "S": 560}, abs=1e-6)
    assert r.preemptions == 0


# ----------------------------------------------------------------------- elastic vs fifo, contended

CONTENDED = [
    sjob("A", 0, 2, 24_000, 1, 4),
    sjob("B", 0, 2, 12_000, 1, 4),
    sjob("C", 100, 2, 6_000, 1, 4),
    sjob("D", 200, 1, 3_000, 1, 4),
]


def rigid(jobs: list[SimJob]) -> list[SimJob]:
    return [dataclasses.replace(j, min_replicas=0, max_replicas=0) for j in jobs]


def test_elastic_beats_fifo_on_a_contended_workload() -> None:
    fifo = simulate(rigid(CONTENDED), MODELS, scheduler.policy("fifo"), SimConfig(ONE_NODE))
    spy = Spy(scheduler.policy("elastic"))
    elastic = simulate(CONTENDED, MODELS, spy, SimConfig(ONE_NODE))
    assert not fifo.unfinished and not elastic.unfinished
    assert max(fifo.queue_delay.values()) > 0  # it is contended: fifo queues someone
    fifo_avg = fifo.summary(4)["avg_jct_s"]
    elastic_avg = elastic.summary(4)["avg_jct_s"]
    assert elastic_avg <= fifo_avg
    # resizes are counted: one per Resize decision the policy made
    decided = sum(len(plan.resize) for _, plan in spy.seen)
    assert elastic.resizes == decided > 0
    assert elastic.summary(4)["resizes"] == decided
    assert fifo.resizes == 0


def test_restart_cost_lengthens_an_elastic_workload() -> None:
    # admissions and resizes both pay here; test_a_resize_alone_pays_the_restart_cost isolates resizes
    free = simulate(CONTENDED, MODELS, scheduler.policy("elastic"), SimConfig(ONE_NODE, restart_s=0.0))
    costly = simulate(CONTENDED, MODELS, scheduler.policy("elastic"), SimConfig(ONE_NODE, restart_s=30.0))
    assert costly.resizes > 0
    assert costly.summary(4)["avg_jct_s"] > free.summary(4)["avg_jct_s"]


class Scripted:
    """A policy that admits job ``E`` once (``first`` trainers at t=0) and resizes it to ``then``
    trainers at ``at``: the job is never queued again, so any restart cost after ``at`` is the resize's."""

    name = "scripted"

    def __init__(self, first: int, then: int, at: float) -> None:
        self.first, self.then, self.at = first, then, at

    def schedule(self, snap: Snapshot) -> Plan:
        plan = Plan(cycle=snap.cycle)
        if snap.queue:
            plan.admit.append(scheduler.Admit("E", _trainers(self.first), "scripted"))
        elif snap.now == self.at:
            plan.resize.append(scheduler.Resize("E", self.then, _trainers(self.then), "scripted"))
        return plan


def _trainers(n: int) -> tuple[WorkerPlacement, ...]:
    return tuple(WorkerPlacement("trainer", i, "node-0", (i,)) for i in range(n))


# E has 3,000 samples to do at 10/s per trainer, restart_s = 30.
# grow 1 -> 2 at 120: 0..30 paused, 30..120 = 900 on one trainer; the resize pauses it 120..150, then
#   150..240 = 1,800 on two (2,700), the last 300 take 15 s: 255. Without the resize's pause: 225.
# shrink 2 -> 1 at 60: 30..60 = 600 on two; paused 60..90, then 10/s: 2,400 more take 240 s: 330.
#   Without the resize's pause: 300.
@pytest.mark.parametrize(
    ("first", "then", "at", "jct"),
    [(1, 2, 120.0, 255.0), (2, 1, 60.0, 330.0)],
    ids=["grow", "shrink"],
)
def test_a_resize_alone_pays_the_restart_cost(first: int, then: int, at: float, jct: float) -> None:
    job = sjob("E", 0, first, 3000, lo=1, hi=4)
    r = simulate([job], MODELS, Scripted(first, then, at), SimConfig(ONE_NODE, restart_s=30.0))
    assert (r.resizes, r.preemptions) == (1, 0)
    assert r.jct == pytest.approx({"E": jct}, abs=1e-6)


# -------------------------------------------------------- the simulator drives the live scheduler


def test_engine_uses_the_scheduler_packages_types() -> None:
    assert engine.Snapshot is scheduler.Snapshot
    assert engine.JobRequest is scheduler.JobRequest
    assert engine.NodeState is scheduler.NodeState
    # plans are applied by the scheduler package's bookkeeping, the one start-time forecasts use
    assert engine.advance_states is scheduler_apply.advance_states
    assert issubclass(engine._Run, scheduler_apply.JobState)
    assert runner.make_policy is scheduler.policy


def test_runner_simulates_with_the_live_policy_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[Any] = []

    def fake(jobs: Any, models: Any, pol: Any, cfg: SimConfig) -> SimResult:
        used.append(pol)
        return SimResult(policy=pol.name, jct={"x": 1.0})

    monkeypatch.setattr(runner, "simulate", fake)
    names = ["fifo", "fifo-backfill", "tiresias", "edl", "elastic"]
    out = runner.run(RunSpec([], names, format="edl", passes=1))
    assert list(out) == names
    assert [type(p) for p in used] == [type(scheduler.policy(n)) for n in names]
    assert used == [scheduler.policy(n) for n in names]


@pytest.mark.parametrize("name", ["fifo", "tiresias", "edl", "elastic"])
def test_every_simulated_plan_is_the_live_policys_plan(name: str) -> None:
    spy = Spy(scheduler.policy(name))
    simulate(CONTENDED, MODELS, spy, SimConfig(ONE_NODE))
    assert len(spy.seen) > 3
    for snap, plan in spy.seen:
        assert type(snap) is Snapshot
        assert scheduler.policy(name).schedule(snap) == plan


def test_engine_snapshot_equals_the_hand_built_one() -> None:
    a = sjob("A", 0, 2, 2400)
    b = sjob("B", 30, 2, 1200, lo=1, hi=4)
    on = (WorkerPlacement("trainer", 0, "node-0", (0,)), WorkerPlacement("trainer", 1, "node-0", (1,)))
    runs = {
        "A": engine._Run(
            a, 2400.0, done=600.0, placement=on, first_start=0.0, attained=120.0, resized_at=0.0
        ),
        "B": engine._Run(b, 1200.0),
    }
    built = engine._snapshot(5, 60.0, ONE_NODE, ["node-0"], runs, ["B"], ["A"], MODELS, {})
    one_gpu = Resources(0, 0, 1)
    hand = Snapshot(
        cycle=5,
        now=60.0,
        nodes=(NodeState("node-0", NODE, Resources(0, 0, 2), (2, 3)),),
        queue=(
            JobRequest(
                key="B", user="sim", priority=0, submitted_at=30.0, pservers=0, pserver=Resources(),
                trainers=2, trainer=one_gpu, min_trainers=1, max_trainers=4, attained=0.0,
                speedup=(1.0, 2.0, 3.0, 4.0), running=0, placement=(), resized_at=float("-inf"),
            ),
        ),
        running=(
            JobRequest(
                key="A", user="sim", priority=0, submitted_at=0.0, pservers=0, pserver=Resources(),
                trainers=2, trainer=one_gpu, min_trainers=2, max_trainers=2, attained=120.0,
                speedup=(1.0, 2.0), running=2, placement=on, resized_at=0.0,
            ),
        ),
    )  # fmt: skip
    assert built == hand
    for name in ("fifo", "tiresias", "edl", "elastic"):
        plan = scheduler.policy(name).schedule(built)
        assert plan == scheduler.policy(name).schedule(hand)
        assert [a.job for a in plan.admit] == ["B"]


# ------------------------------------------------------------------------- against the paper


def test_tiresias_workload_1_is_within_10_percent_of_the_paper() -> None:
    workload = POLLUX / "workloads" / "workload-1.csv"
    assert workload.is_file(), f"shared data missing: {workload}"
    out = runner.run(RunSpec([str(workload)], ["tiresias"]))
    ours = out["tiresias"]["mean"]["avg_jct_s"]
    assert out["tiresias"]["workload-1"]["avg_jct_s"] == ours
    assert out["tiresias"]["mean"]["unfinished"] == 0
    assert out["tiresias"]["mean"]["jobs"] == 160
    paper = load_result(POLLUX / "results-jobload", "tiresias", 1.0).avg_jct["workload-1"]
    assert paper == pytest.approx(2473.65, abs=0.01)
    assert abs(ours - paper) / paper <= 0.10, (ours, paper)


def test_a_batch_only_resize_pays_the_rebatch_cost_not_a_restart() -> None:
    """A Resize to the trainers a job holds (a new batch only: the live workers switch at a step
    boundary) pauses it ``rebatch_s``; a Resize that moves trainers pays ``restart_s``; neither
    shortens a pause still running (a start-up)."""
    from paddlecloud.scheduler import Admit, Resize

    two = tuple(WorkerPlacement("trainer", i, "n0") for i in range(2))
    jobs = {"a": scheduler_apply.JobState(), "b": scheduler_apply.JobState()}
    queue, running = ["a", "b"], list[str]()
    admit = Plan(0, admit=[Admit("a", two, "", 64), Admit("b", two[:1], "", 64)])
    scheduler_apply.advance_states(admit, jobs, queue, running, 0.0, 30.0, 5.0)
    assert jobs["a"].paused_until == jobs["b"].paused_until == 30.0
    early = Plan(1, resize=[Resize("a", 2, two, "", 128)])
    scheduler_apply.advance_states(early, jobs, queue, running, 10.0, 30.0, 5.0)
    assert jobs["a"].paused_until == 30.0 and jobs["a"].batch == 128  # still starting: no shorter
    later = Plan(2, resize=[Resize("a", 2, two, "", 256), Resize("b", 2, two, "", 128)])
    scheduler_apply.advance_states(later, jobs, queue, running, 100.0, 30.0, 5.0)
    assert (jobs["a"].paused_until, jobs["a"].batch) == (105.0, 256)  # batch only: 5 s
    assert (jobs["b"].paused_until, jobs["b"].batch) == (130.0, 128)  # a grow: a restart
    scheduler_apply.advance_states(later, jobs, queue, running, 200.0, 30.0)  # no rebatch cost given
    assert jobs["a"].paused_until == 230.0  # as any resize (the forecast's default)


def test_a_resize_of_any_kind_sets_rebatched_at_and_only_a_move_resized_at() -> None:
    """The re-batch cooldown (``rebatched_at``) starts at every Resize (a restart re-batches too);
    the grow cooldown (``resized_at``) only at one that moves trainers; an admission sets only
    ``resized_at`` (its batch was chosen with what the scheduler knew then)."""
    from paddlecloud.scheduler import Admit, Resize

    two = tuple(WorkerPlacement("trainer", i, "n0") for i in range(2))
    jobs = {"a": scheduler_apply.JobState()}
    queue, running = ["a"], list[str]()
    scheduler_apply.advance_states(
        Plan(0, admit=[Admit("a", two[:1], "", 64)]), jobs, queue, running, 0.0, 30.0, 5.0
    )
    assert (jobs["a"].resized_at, jobs["a"].rebatched_at) == (0.0, float("-inf"))
    rebatch = Plan(1, resize=[Resize("a", 1, two[:1], "", 128)])
    scheduler_apply.advance_states(rebatch, jobs, queue, running, 400.0, 30.0, 5.0)
    assert (jobs["a"].resized_at, jobs["a"].rebatched_at) == (0.0, 400.0)
    grow = Plan(2, resize=[Resize("a", 2, two, "", 256)])
    scheduler_apply.advance_states(grow, jobs, queue, running, 500.0, 30.0, 5.0)
    assert (jobs["a"].resized_at, jobs["a"].rebatched_at) == (500.0, 500.0)
