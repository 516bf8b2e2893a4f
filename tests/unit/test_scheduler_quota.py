"""Per-user quotas in every policy: over-quota jobs wait with QuotaExceeded and block no one else."""

from __future__ import annotations

import pytest

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Snapshot, WaitReason, WorkerPlacement, policy

GPU = Resources(1000, 1 << 30, 1)
NODE = NodeState("n0", Resources(16000, 64 << 30, 8), Resources(), tuple(range(8)))


def job(key: str, user: str, n: int, at: float, *, lo: int = 0, hi: int = 0) -> JobRequest:
    return JobRequest(key=key, user=user, priority=0, submitted_at=at, pservers=0, pserver=Resources(),
                      trainers=n, trainer=GPU, min_trainers=lo, max_trainers=hi)  # fmt: skip


@pytest.mark.parametrize("name", ["fifo", "tiresias", "edl", "elastic"])
def test_over_quota_waits_and_others_go_on(name: str) -> None:
    running = JobRequest(**{**job("a0", "alice", 2, 0.0).__dict__, "running": 2,
                            "placement": (WorkerPlacement("trainer", 0, "n0", (0,)),
                                          WorkerPlacement("trainer", 1, "n0", (1,)))})  # fmt: skip
    node = NodeState("n0", NODE.capacity, GPU.times(2), tuple(range(2, 8)))
    snap = Snapshot(1, 10.0, (node,), (job("a1", "alice", 2, 1.0), job("b1", "bob", 2, 2.0)), (running,),
                    quotas={"alice": Resources(1 << 40, 1 << 62, 3)})  # fmt: skip
    plan = policy(name).schedule(snap)
    waits = {w.job: w for w in plan.wait}
    assert waits["a1"].reason == WaitReason.QUOTA_EXCEEDED
    assert "gpu 2/3 used" in waits["a1"].message and "alice" in waits["a1"].message
    assert "b1" in {a.job for a in plan.admit}  # bob is not held up behind alice's job


@pytest.mark.parametrize("name", ["elastic", "edl"])
def test_elastic_growth_stops_at_the_quota(name: str) -> None:
    snap = Snapshot(1, 10.0, (NODE,), (job("e", "carol", 1, 1.0, lo=1, hi=8),),
                    quotas={"carol": Resources(1 << 40, 1 << 62, 3)})  # fmt: skip
    plan = policy(name).schedule(snap)
    (admit,) = plan.admit
    assert sum(1 for p in admit.placement if p.role == "trainer") == 3  # 8 free GPUs, quota 3


def test_no_quota_means_unlimited() -> None:
    snap = Snapshot(1, 0.0, (NODE,), (job("x", "dave", 8, 1.0),))
    assert [a.job for a in policy("fifo").schedule(snap).admit] == ["x"]
