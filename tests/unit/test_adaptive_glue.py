"""Adaptive batch size in the live loop (memory backend, manual clock): reports become the scheduler's
``JobRequest.batches`` / ``speedup`` (the goodput table of the fitted step time and the smoothed noise
scale), and the plan's batch reaches the job's state, its events and its workers' environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from memory_platform import MemoryWorld
from sqlalchemy import select
from task_helpers import hold_trainers

from paddlecloud.api.adaptive import AdaptiveReport
from paddlecloud.backends.base import NodeInfo
from paddlecloud.client import Client
from paddlecloud.controller.loop.effects import apply_plan
from paddlecloud.controller.model.job_rows import job_request
from paddlecloud.controller.model.jobtokens import issue_job_token
from paddlecloud.controller.services.adaptive import REPORT_INTERVAL_S
from paddlecloud.core.resources import Resources
from paddlecloud.runtime import contract as c
from paddlecloud.scheduler import Plan, Resize, WorkerPlacement
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, goodput_table
from paddlecloud.server import create_app
from paddlecloud.store.tables import JobRow

pytestmark = pytest.mark.timeout(60)

GI = 2**30
#: the step time the reports follow: 0.1 s + 1 ms per local sample, + 20 ms all-reduce on one node
MODEL = FittedStepTime(base=0.1, per_sample=0.001, sync_local=0.02, sync_net=0.02)
GRAD_SQR, GRAD_VAR = 1.0, 100.0  # noise scale 64 x 100 = 6,400 samples
BATCH = {"size": 64, "adaptive": {"min": 32, "max": 4096}}


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "train.py").write_text("print('unused: nothing runs on the memory backend')\n")
    return root


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path, nodes=(NodeInfo("mem-0", Resources(4000, 8 * GI)),))
    yield w
    w.close()


def submit(world: MemoryWorld, client: Client, name: str, package: Path, **spec: Any) -> None:
    trainers = {"count": 1, "min": 1, "max": 4, "cpu": "1", "memory": "1Gi"}
    world.submit(client, name, package, trainers=trainers, **spec)


def worker(world: MemoryWorld, name: str) -> Client:
    """A client with a token of alice's job ``name``, as its workers get one."""
    with world.platform.ctx.session() as s:
        job_id = s.scalar(select(JobRow.id).where(JobRow.user == "alice", JobRow.name == name))
        assert job_id is not None
        token = issue_job_token(s, job_id, world.clock.now())
        s.commit()
    return Client(
        endpoint="http://testserver", token=token, http=TestClient(create_app(world.platform, run_loop=False))
    )


def report_model(world: MemoryWorld, job: Client, name: str) -> None:
    """Reports that follow ``MODEL``: one replica at two local batches, two replicas on one node
    (each made while the job holds that many trainers)."""
    for replicas, local in ((1, 64.0), (1, 128.0), (2, 64.0), (1, 96.0)):
        nodes = 1
        step = MODEL.step_time(replicas, nodes, local)
        body = {
            "replicas": replicas, "local_bsz": local, "step_time_s": step, "grad_sqr": GRAD_SQR,
            "grad_var": GRAD_VAR, "lr_gain": 1.0, "batch_size": int(local * replicas),
        }  # fmt: skip
        hold_trainers(world.platform, "alice", name, replicas)  # only reports at its trainers are fitted
        job.adaptive_report(name, AdaptiveReport.model_validate(body))
        world.clock.advance(REPORT_INTERVAL_S)
    hold_trainers(world.platform, "alice", name, 0)  # queued, as it was


def request_of(world: MemoryWorld, name: str) -> Any:
    ctx = world.platform.ctx
    with ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == "alice", JobRow.name == name))
        assert row is not None
        return job_request(row, True, specs=ctx.specs, plans=ctx.batch_plans)


def test_without_reports_an_adaptive_job_keeps_its_batch(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    submit(world, alice, "ada", package, batch=BATCH)
    submit(world, alice, "fixed", package, batch={"size": 64})
    req = request_of(world, "ada")
    assert req.batches == (64, 64, 64, 64) and req.speedup == ()
    assert request_of(world, "fixed").batches == ()
    world.tick()
    assert alice.adaptive("ada").batch_size == 64
    env = world.engine.jobs["alice/ada"].launch.env
    assert (env[c.BATCH_SIZE], env[c.BATCH_MIN], env[c.BATCH_MAX], env[c.BATCH_INIT]) == (
        "64",
        "32",
        "4096",
        "64",
    )
    assert env[c.LR_RULE] == "adascale"
    assert c.BATCH_SIZE not in world.engine.jobs["alice/fixed"].launch.env
    assert not any(e.reason == "BatchSize" for e in alice.job("ada").events)  # unchanged: no event


def test_reports_grow_the_batch_with_the_trainers_and_the_plan_assigns_it(
    world: MemoryWorld, package: Path
) -> None:
    alice = world.client("alice")
    submit(world, alice, "ada", package, batch=BATCH)
    report_model(world, worker(world, "ada"), "ada")
    req = request_of(world, "ada")
    expected = goodput_table(MODEL, AdaptiveBatch(64, 32, 4096), 64 * GRAD_VAR / GRAD_SQR, [1, 1, 1, 1])
    assert req.batches == expected.batches
    assert req.speedup == pytest.approx(expected.speedup)
    assert list(req.batches) == sorted(req.batches) and req.batches[0] < req.batches[-1]
    assert req.batches[-1] > 64  # four trainers: a larger batch than the job's own
    assert req.speedup[-1] > 1.0
    assert req.batch_size == 0  # not running: no batch of its own yet
    world.tick()
    snap, plan = world.platform.reconciler.last_round  # type: ignore[misc]
    assert snap.queue[0].batches == req.batches  # what the loop gave the policy
    assert make_policy(world.platform.reconciler.policy.name).schedule(snap) == plan  # the simulator's too
    (admit,) = plan.admit
    n = sum(p.role == "trainer" for p in admit.placement)
    assert admit.batch_size == req.batch(n) > 0
    state = alice.adaptive("ada")
    assert (state.batch_size, state.trainers, state.reports) == (admit.batch_size, n, 4)
    assert state.noise_scale == pytest.approx(6400.0)
    env = world.engine.jobs["alice/ada"].launch.env
    assert env[c.BATCH_SIZE] == str(admit.batch_size)
    (event,) = [e for e in alice.job("ada").events if e.reason == "BatchSize"]
    assert event.message.startswith(
        f"global batch 64 -> {admit.batch_size} on {n} trainers (noise scale 6,400"
    )
    assert alice.job("ada").adaptive == state  # describe carries the same


def on_one_trainer(world: MemoryWorld, package: Path) -> Client:
    """alice's adaptive job ``ada`` (1..4 trainers) running on the one CPU that her 3-trainer
    ``blocker`` leaves free, after reports that follow ``MODEL``; alice's client."""
    alice = world.client("alice")
    world.submit(alice, "blocker", package, trainers={"count": 3, "cpu": "1", "memory": "1Gi"})
    world.tick()
    submit(world, alice, "ada", package, batch=BATCH)
    report_model(world, worker(world, "ada"), "ada")
    world.tick()
    return alice


def test_a_grow_assigns_the_batch_of_the_trainers_it_got(world: MemoryWorld, package: Path) -> None:
    """A grow that adds only some trainers assigns the batch for the count it has, not 0 (the
    fixed-batch value) and not the one planned for the full count."""
    alice = on_one_trainer(world, package)
    assert alice.adaptive("ada").trainers == 1
    one = alice.adaptive("ada").batch_size
    backend = world.platform.ctx.backend
    real_add = backend.add_trainer
    calls: list[int] = []

    def add_once(key: str, placement: Any) -> None:
        calls.append(placement.index)
        if len(calls) > 1:
            raise RuntimeError("node went away")
        real_add(key, placement)

    backend.add_trainer = add_once  # type: ignore[method-assign]
    alice.kill("blocker")
    world.tick(3)
    state = alice.adaptive("ada")
    plan = request_of(world, "ada")
    assert len(calls) >= 2, calls  # the grow was tried for more than one trainer
    assert state.trainers == 2
    assert state.batch_size == plan.batch(2) != one
    assert plan.batch_size == state.batch_size  # what it runs at: elastic's batch-only resize reads it
    job = alice.job("ada")
    assert any("only 1 of" in e.message for e in job.events if e.reason == "Resized")
    assert any(
        e.message.startswith(f"global batch {one} -> {state.batch_size} on 2 trainers") for e in job.events
    )


def test_the_console_job_page_shows_the_live_state(world: MemoryWorld, package: Path) -> None:
    token = world.platform.ensure_user("alice")
    alice = Client(
        endpoint="http://testserver", token=token, http=TestClient(create_app(world.platform, run_loop=False))
    )
    submit(world, alice, "ada", package, batch={**BATCH, "lr_rule": "linear"})
    job = worker(world, "ada")
    report_model(world, job, "ada")
    world.tick()
    page = TestClient(create_app(world.platform, run_loop=False), base_url="http://127.0.0.1:8080")
    auth = {"Authorization": f"Bearer {token}"}
    state = alice.adaptive("ada")
    html = page.get("/ui/jobs/ada", headers=auth).text
    assert "starts at 64, adaptive 32..4096, LR rule linear" in html
    assert (
        f'<dd class="adaptive-batch"><strong>{state.batch_size}</strong> on {state.trainers} trainer' in html
    )
    assert '<dd class="adaptive-noise">6,400</dd>' in html
    assert "(4 reports)" in html
    live = page.get("/ui/jobs/ada/_live", headers=auth).text
    since = live.split("/_live?since=", 1)[1].split('"', 1)[0]
    assert page.get("/ui/jobs/ada/_live", params={"since": since}, headers=auth).status_code == 204
    job.adaptive_report(
        "ada", AdaptiveReport(replicas=1, local_bsz=64.0, step_time_s=0.3, lr_gain=2.0, batch_size=64)
    )
    changed = page.get("/ui/jobs/ada/_live", params={"since": since}, headers=auth)
    assert changed.status_code == 200 and '<dd class="adaptive-gain">2</dd>' in changed.text


def test_a_batch_only_resize_starts_nothing_and_counts_as_a_rebatch(
    world: MemoryWorld, package: Path
) -> None:
    """A Resize to the trainers the job holds stores the new batch (the workers poll it and switch
    without a restart): no backend call, a BatchSize event but no Resized one, a ``Rebatch`` decision."""
    alice = world.client("alice")
    submit(world, alice, "ada", package, batch=BATCH)
    world.tick()
    ctx = world.platform.ctx
    calls: list[Any] = []
    backend = ctx.backend
    backend.add_trainer = lambda *a: calls.append(a)  # type: ignore[method-assign]
    backend.remove_trainer = lambda *a: calls.append(a)  # type: ignore[method-assign]
    with ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == "alice", JobRow.name == "ada"))
        assert row is not None and row.placement is not None
        held = tuple(
            WorkerPlacement(p["role"], p["index"], p["node"], tuple(p["gpus"]))
            for p in row.placement
            if p["role"] == "trainer"
        )
        plan = Plan(99, resize=[Resize("alice/ada", len(held), held, "new batch", 256)])
        apply_plan(ctx, s, plan, {"alice/ada": row})
    assert calls == []
    assert alice.adaptive("ada").batch_size == 256
    reasons = [e.reason for e in alice.job("ada").events]
    assert "Resized" not in reasons and reasons.count("BatchSize") == 1
    assert (
        ctx.metrics.registry.get_sample_value(
            "paddlecloud_scheduler_decisions_total", {"kind": "resize", "reason": "Rebatch"}
        )
        == 1
    )


def _run_at(world: MemoryWorld, name: str, batch: int) -> None:
    """Set the batch alice's job ``name`` runs at, as if its noise scale had moved since it was
    assigned (the goodput table's best batch is then x1.5 or more away from it: stale)."""
    with world.platform.ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == "alice", JobRow.name == name))
        assert row is not None and row.adaptive is not None
        row.adaptive.batch_size = batch
        s.commit()


def _rebatches(world: MemoryWorld) -> float:
    registry = world.platform.ctx.metrics.registry
    labels = {"kind": "resize", "reason": "Rebatch"}
    return registry.get_sample_value("paddlecloud_scheduler_decisions_total", labels) or 0.0


def test_a_rebatch_waits_for_the_rebatch_cooldown_and_a_grow_does_not(
    world: MemoryWorld, package: Path
) -> None:
    """A batch-only resize starts the re-batch cooldown (``adaptive_states.rebatched_at``): a second
    one within ``resize_cooldown`` is refused, one after it is made; it does not start the grow
    cooldown: the job grows at once when trainers free up."""
    alice = on_one_trainer(world, package)
    best = request_of(world, "ada").batch(1)
    assert (alice.adaptive("ada").trainers, alice.adaptive("ada").batch_size) == (1, best)
    cooldown = world.platform.reconciler.policy.resize_cooldown  # type: ignore[attr-defined]
    _run_at(world, "ada", 4 * best)
    world.tick()  # never re-batched: at once
    assert (alice.adaptive("ada").batch_size, _rebatches(world)) == (best, 1)
    world.clock.advance(cooldown - 1)
    _run_at(world, "ada", 4 * best)
    world.tick()  # re-batched cooldown - 1 s ago: not yet
    assert (alice.adaptive("ada").batch_size, _rebatches(world)) == (4 * best, 1)
    world.clock.advance(1)
    world.tick()
    assert (alice.adaptive("ada").batch_size, _rebatches(world)) == (best, 2)
    assert alice.job("ada").adaptive == alice.adaptive("ada")

    alice.kill("blocker")  # right after the re-batch (the clock does not move): the job grows
    world.tick(3)
    state = alice.adaptive("ada")
    assert state.trainers == 4 and state.batch_size == request_of(world, "ada").batch(4), state
    assert any(e.reason == "Resized" and "trainers 1 -> 4" in e.message for e in alice.job("ada").events)
