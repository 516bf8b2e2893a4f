"""The recorded history the console charts (``controller.model.history``): bounded memory, injected time,
a point per change; what the reconcile loop records into it; and its API's tenancy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_platform import MemoryWorld

from paddlecloud.api.errors import NotFound
from paddlecloud.api.history import ClusterPoint
from paddlecloud.controller.model.history import History

pytestmark = pytest.mark.timeout(60)


def _trainers(h: History, key: str) -> list[tuple[float, int, int]]:
    return [(p.t, p.trainers, p.running) for p in h.job_trainers_history(key)]


def test_cluster_points_are_a_ring_buffer_of_the_last_span() -> None:
    h = History(interval_s=10.0, span_s=60.0)
    for i in range(20):
        assert h.due(i * 10.0)
        h.record_cluster(_point(i * 10.0, queued=i))
    points = h.cluster_history()
    assert len(points) == 7  # 60 s at one per 10 s, both ends kept
    assert [p.t for p in points] == [130.0, 140.0, 150.0, 160.0, 170.0, 180.0, 190.0]
    assert points[-1].queued == 19
    assert not h.due(195.0) and h.due(200.0)
    assert h.due(100.0)  # a clock that went back: record again rather than stall
    view = h.cluster_view()
    assert (view.interval_s, view.span_s, len(view.items)) == (10.0, 60.0, 7)


def _point(t: float, queued: int = 0) -> ClusterPoint:
    return ClusterPoint(
        t=t, cpu_allocated=1.0, cpu_capacity=4.0, memory_allocated=1, memory_capacity=2, gpu_allocated=0,
        gpu_capacity=0, queued=queued, running=1,
    )  # fmt: skip


def test_a_jobs_trainers_are_a_point_per_change_and_reach_the_present() -> None:
    h = History()
    h.observe_job("alice/a", 1, 0.0, trainers=2, running=0)
    h.observe_job("alice/a", 1, 5.0, trainers=2, running=0)  # no change: no point
    h.observe_job("alice/a", 1, 10.0, trainers=2, running=2)
    assert _trainers(h, "alice/a") == [(0.0, 2, 0), (10.0, 2, 2)]
    h.observe_job("alice/a", 1, 30.0, trainers=2, running=2)
    assert _trainers(h, "alice/a") == [(0.0, 2, 0), (10.0, 2, 2), (30.0, 2, 2)]  # ... up to now
    h.observe_job("alice/a", 1, 40.0, trainers=4, running=2)  # grown
    h.end_jobs(set(), 50.0)  # gone from the holding jobs: 0 from then on, and nothing after
    h.end_jobs(set(), 60.0)
    assert _trainers(h, "alice/a") == [(0.0, 2, 0), (10.0, 2, 2), (40.0, 4, 2), (50.0, 0, 0)]
    assert h.job_trainers_history("alice/unknown") == []
    # removed and submitted again under the same name: the new job's own series
    assert h.job_trainers_history("alice/a", job_id=2) == []
    h.observe_job("alice/a", 2, 70.0, trainers=1, running=0)
    assert _trainers(h, "alice/a") == [(70.0, 1, 0)]


def test_job_series_are_bounded_in_length_and_number() -> None:
    h = History(job_points=3, max_jobs=2)
    for i in range(10):
        h.observe_job("u/a", 1, float(i), trainers=i % 2 + 1, running=0)
    assert [p.t for p in h.job_trainers_history("u/a")] == [7.0, 8.0, 9.0]
    h.observe_job("u/b", 2, 10.0, 1, 1)
    h.observe_job("u/a", 1, 11.0, 1, 1)  # a is the most recently observed now
    h.observe_job("u/c", 3, 12.0, 1, 1)  # a third job: the least recently observed (b) goes
    assert h.job_trainers_history("u/b") == []
    assert h.job_trainers_history("u/a") and h.job_trainers_history("u/c")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path)
    yield w
    w.close()


def test_the_loop_records_cluster_use_queue_and_trainers(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    world.submit(alice, "first", pkg, trainers={"count": 1, "cpu": "3"})
    world.submit(alice, "second", pkg, trainers={"count": 1, "cpu": "3"})  # waits: 4 CPUs in all
    start = world.clock.now()
    world.tick(2)  # first admitted, then running
    for _ in range(3):
        world.clock.advance(4.0)
        world.tick()
    history = world.platform.history
    points = history.cluster_history()
    assert [p.t - start for p in points] == [0.0, 12.0]  # one per 10 s at most
    last = points[-1]
    assert (last.cpu_allocated, last.cpu_capacity, last.queued, last.running) == (3.0, 4.0, 1, 1)
    assert last.memory_capacity == 8 * 2**30 and last.memory_allocated > 0
    assert [(t - start, n, r) for t, n, r in _trainers(history, "alice/first")] == [(0.0, 1, 1), (12.0, 1, 1)]
    assert history.job_trainers_history("alice/second") == []

    alice.kill("first")
    world.clock.advance(10.0)
    world.tick(2)  # first gone, second admitted in its place
    assert _trainers(history, "alice/first")[-1][1:] == (0, 0)
    assert _trainers(history, "alice/second")[-1][1:] == (1, 1)
    last = history.cluster_history()[-1]
    assert (last.t - start, last.cpu_allocated, last.queued) == (22.0, 3.0, 0)


def test_the_history_api_has_the_tenancy_of_job_routes(world: MemoryWorld, tmp_path: Path) -> None:
    alice, bob = world.client("alice"), world.client("bob")
    root = world.client("root", admin=True)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    world.submit(alice, "mine", pkg)
    world.tick(2)

    got = alice.request("GET", "/jobs/mine/history").json()
    assert (got["user"], got["job"]) == ("alice", "mine")
    assert [(p["trainers"], p["running"]) for p in got["items"]] == [(1, 1)]
    # another user's job is not found, exactly as one that does not exist
    with pytest.raises(NotFound) as theirs:
        bob.request("GET", "/jobs/mine/history")
    with pytest.raises(NotFound) as nobodys:
        bob.request("GET", "/jobs/no-such-job/history")
    assert theirs.value.code == nobodys.value.code == "job_not_found"
    assert str(theirs.value).replace("mine", "X") == str(nobodys.value).replace("no-such-job", "X")
    # admins name the owner
    assert root.request("GET", "/jobs/mine/history", params={"user": "alice"}).json() == got
    # the cluster's aggregate numbers (no names): any signed-in user
    cluster = bob.request("GET", "/cluster/history").json()
    assert cluster["interval_s"] == 10.0 and len(cluster["items"]) == 1
    assert set(cluster["items"][0]) == {
        "t", "cpu_allocated", "cpu_capacity", "memory_allocated", "memory_capacity", "gpu_allocated",
        "gpu_capacity", "queued", "running",
    }  # fmt: skip
