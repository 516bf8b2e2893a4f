"""A ``Resize`` that moves trainers the job keeps (``ElasticPolicy.pack``: a growing job
re-placed on fewer nodes) is carried out by the live controller: the trainers from the lowest moved
index up are retired and added again where the plan put them (memory backend, manual clock)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_platform import MemoryWorld
from sqlalchemy import select

from paddlecloud.backends.base import NodeInfo
from paddlecloud.client import Client
from paddlecloud.controller.loop.effects import apply_plan
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import Plan, Resize, WorkerPlacement
from paddlecloud.store.tables import JobRow

pytestmark = pytest.mark.timeout(60)

GI = 2**30


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    nodes = (NodeInfo("mem-0", Resources(2000, 8 * GI)), NodeInfo("mem-1", Resources(4000, 8 * GI)))
    w = MemoryWorld(tmp_path, nodes=nodes)
    yield w
    w.close()


def _trainers(row: JobRow) -> list[tuple[int, str]]:
    return sorted((p["index"], p["node"]) for p in row.placement or [] if p["role"] == "trainer")


def _one_trainer(world: MemoryWorld, tmp_path: Path) -> Client:
    """alice's job ``job`` admitted with one trainer (a fixed count: only the plans below resize it)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text("print('unused')\n")
    alice = world.client("alice")
    world.submit(alice, "job", package, trainers={"count": 1, "cpu": "1"})
    world.tick()
    return alice


def test_a_resize_that_moves_kept_trainers_retires_and_adds_them_again(
    world: MemoryWorld, tmp_path: Path
) -> None:
    """Trainers 0 and 1 on mem-0 and mem-1, grown to 3 all on mem-1: trainer-0 moves, so both
    trainers it had are retired (the highest first) and all three added on mem-1; the job's
    placement, its workers and the Resized event say so."""
    alice = _one_trainer(world, tmp_path)
    ctx = world.platform.ctx
    calls: list[tuple[str, Any]] = []
    backend = ctx.backend
    add, remove = backend.add_trainer, backend.remove_trainer

    def adding(key: str, p: WorkerPlacement) -> None:
        calls.append(("add", (p.index, p.node)))
        add(key, p)

    def removing(key: str, grace: float) -> None:
        calls.append(("remove", key))
        remove(key, grace)

    backend.add_trainer = adding  # type: ignore[method-assign]
    backend.remove_trainer = removing  # type: ignore[method-assign]
    with ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == "alice", JobRow.name == "job"))
        assert row is not None
        zero = next(p for p in row.placement or [] if p["role"] == "trainer")
        # first a plain grow: trainer-1 on the other node
        other = "mem-1" if zero["node"] == "mem-0" else "mem-0"
        spread = (
            WorkerPlacement("trainer", 0, zero["node"], ()),
            WorkerPlacement("trainer", 1, other, ()),
        )
        apply_plan(ctx, s, Plan(1, resize=[Resize("alice/job", 2, spread, "grown")]), {"alice/job": row})
        assert calls == [("add", (1, other))]
        calls.clear()
        packed = tuple(WorkerPlacement("trainer", i, "mem-1", ()) for i in range(3))
        plan = Plan(2, resize=[Resize("alice/job", 3, packed, "grown from 2 to 3 trainers")])
        apply_plan(ctx, s, plan, {"alice/job": row})
        moved = 0 if zero["node"] == "mem-0" else 1  # the lowest index that changes node
        assert calls == [("remove", "alice/job")] * (2 - moved) + [
            ("add", (i, "mem-1")) for i in range(moved, 3)
        ]
        assert _trainers(row) == [(0, "mem-1"), (1, "mem-1"), (2, "mem-1")]
        assert {w.name: w.node for w in row.workers if w.role == "trainer"} == {
            f"trainer-{i}": "mem-1" for i in range(3)
        }
        assert all(w.state == WorkerState.PENDING for w in row.workers if w.index >= moved)
    engine = world.engine.jobs["alice/job"]
    trainers = [w for w in engine.workers.values() if w.role == "trainer"]
    live = {w.name: w.node for w in trainers if w.state != WorkerState.STOPPED}
    assert live == {f"trainer-{i}": "mem-1" for i in range(3)}
    events = [e.message for e in alice.job("job").events if e.reason == "Resized"]
    assert events[-1].startswith("trainers 2 -> 3")


def test_a_move_at_the_same_count_is_a_resized_event_not_a_rebatch(
    world: MemoryWorld, tmp_path: Path
) -> None:
    """trainer-0 moved to the other node at one trainer: a Resized event ("moved") and a ``Move``
    decision, not the batch-only resize a Resize to the same count would otherwise be."""
    alice = _one_trainer(world, tmp_path)
    ctx = world.platform.ctx
    with ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == "alice", JobRow.name == "job"))
        assert row is not None
        zero = next(p for p in row.placement or [] if p["role"] == "trainer")
        other = "mem-1" if zero["node"] == "mem-0" else "mem-0"
        there = (WorkerPlacement("trainer", 0, other, ()),)
        apply_plan(ctx, s, Plan(1, resize=[Resize("alice/job", 1, there, "moved")]), {"alice/job": row})
        assert _trainers(row) == [(0, other)]
    events = [e.message for e in alice.job("job").events if e.reason == "Resized"]
    assert events == ["trainers 1 moved: moved"]
    registry = ctx.metrics.registry
    assert (
        registry.get_sample_value(
            "paddlecloud_scheduler_decisions_total", {"kind": "resize", "reason": "Move"}
        )
        == 1
    )
