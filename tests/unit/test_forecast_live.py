"""The live start-time forecast (controller.loop.forecasts) through the API, the CLI's cells and the
spec field ``expected_duration_s``, on the in-memory backend (no processes)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from memory_platform import MemoryWorld

import paddlecloud
from paddlecloud.api.errors import InvalidInput
from paddlecloud.cli.output import estimate_line, eta_cell
from paddlecloud.core.durations import human_duration, parse_duration


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "train.py").write_text("print('unused: nothing runs on the memory backend')\n")
    return root


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path)  # one node of 4 CPUs
    yield w
    w.close()


def test_a_queued_job_is_told_when_the_job_ahead_of_it_ends(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    world.submit(alice, "a", package, trainers={"count": 4, "cpu": "1"}, expected_duration_s=1800)
    world.tick()
    world.submit(alice, "b", package, trainers={"count": 2, "cpu": "1"})
    world.tick()
    forecaster = world.platform.forecaster
    assert forecaster is not None and forecaster.refresh()
    now = world.clock.now()
    a, b = world.job(alice, "a"), world.job(alice, "b")
    assert a.phase in ("Starting", "Running") and b.phase == "Queued"
    assert a.estimate is not None and b.estimate is not None
    # a declared 30 min: it ends then, and b starts (rounds are 60 s apart: 1,800 s is a round; the
    # default policy, elastic, would preempt a for b if a reached its first LAS threshold, 10,000
    # trainer-seconds, before: 4 x 1,800 = 7,200 does not)
    assert a.estimate.end == a.estimate.made_at + timedelta(seconds=1800)
    assert (a.estimate.end_basis, b.estimate.start_basis) == ("declared", "declared")
    assert b.estimate.start == a.estimate.end
    # b declared nothing: an hour assumed after its 10 s start-up, and it says so
    assert b.estimate.end == b.estimate.start + timedelta(seconds=3610)
    assert b.estimate.end_basis == "unknown"
    assert a.estimate.made_at.timestamp() == now
    # the listing carries the same estimate (its cache was dropped by the new forecast)
    listed = {j.name: j for j in alice.jobs()}
    assert listed["b"].estimate == b.estimate
    at = b.estimate.made_at
    assert eta_cell(listed["b"], at) == "starts in 30m"
    assert eta_cell(listed["a"], at) == "ends in 30m"
    assert eta_cell(listed["b"], at + timedelta(hours=1)) == "starts now"
    line = estimate_line(b)
    assert line is not None and "(declared)" in line and "(unknown)" in line
    # nothing changed: no new forecast; forced: one
    assert not forecaster.refresh() and forecaster.refresh(force=True)


def test_expected_duration_is_bounded_and_shown(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    with pytest.raises(InvalidInput, match="expected_duration_s"):
        world.submit(alice, "short", package, expected_duration_s=5)
    with pytest.raises(InvalidInput, match="expected_duration_s"):
        world.submit(alice, "text", package, expected_duration_s="2h")
    world.submit(alice, "ok", package, expected_duration_s=5400)
    assert world.job(alice, "ok").spec.expected_duration_s == 5400
    job = paddlecloud.train(
        package, name="sdk", entry="python train.py", expected_duration_s=90.0, client=alice
    )
    assert job.spec.expected_duration_s == 90.0


def test_a_finished_job_has_no_estimate_and_no_forecast_without_jobs(
    world: MemoryWorld, package: Path
) -> None:
    forecaster = world.platform.forecaster
    assert forecaster is not None and not forecaster.refresh()  # nothing waits or runs
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick()
    assert forecaster.refresh()
    alice.kill("a")
    world.tick(3)
    assert world.job(alice, "a").estimate is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("45m", 2700.0), ("1h30m", 5400.0), ("3d", 259200.0)]
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1h1h", "-5", "1h 30m"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="90s, 45m, 2h"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("s", "text"), [(0, "0s"), (59.2, "1m"), (3600, "1h"), (3660, "1h1m"), (90000, "1d1h")]
)
def test_human_durations_round_up(s: float, text: str) -> None:
    assert human_duration(s) == text


def test_the_console_shows_the_estimates(world: MemoryWorld, package: Path) -> None:
    """The Jobs page's Starts / Ends columns and the Job page's lines (no inline style or script:
    the console's markup test covers every page)."""
    from fastapi.testclient import TestClient

    from paddlecloud.server.app import create_app

    alice = world.client("alice")
    world.submit(alice, "a", package, trainers={"count": 4, "cpu": "1"}, expected_duration_s=1800)
    world.tick()
    world.submit(alice, "b", package, trainers={"count": 2, "cpu": "1"})
    world.tick()
    assert world.platform.forecaster is not None and world.platform.forecaster.refresh()
    token = world.platform.ensure_user("alice")
    c = TestClient(create_app(world.platform, run_loop=False), base_url="http://127.0.0.1:8080")
    headers = {"Authorization": f"Bearer {token}"}
    jobs = c.get("/ui/", headers=headers).text
    assert "<th>Starts</th>" in jobs and "<th>Ends</th>" in jobs
    # the page renders with the real clock, the forecast with the test's: the start is in the past
    assert jobs.count('class="eta eta-declared"') == 2  # b's start, a's end
    job = c.get("/ui/jobs/b", headers=headers).text
    assert "<dt>Starts</dt>" in job and "declared" in job and "unknown" in job


def test_a_running_job_s_task_progress_is_learned(world: MemoryWorld, package: Path) -> None:
    """A job whose task master has 3 of 10 tasks of its first of 2 passes done (15 % of its work)
    after 600 s at its size is expected to need 600 x 0.85 / 0.15 = 3,400 s more, `learned`; its
    declared duration is then set aside."""
    from sqlalchemy import select

    from paddlecloud.store.tables import JobRow, TaskQueueRow, TaskRow

    alice = world.client("alice")
    tasks = {"items": [f"t{i}" for i in range(10)], "num_passes": 2}
    world.submit(alice, "a", package, trainers={"count": 2, "cpu": "1"}, tasks=tasks, expected_duration_s=900)
    world.tick()
    with world.platform.ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.name == "a"))
        assert row is not None and row.placement
        row.attained = 2 * 600.0  # 600 s on its 2 trainers
        queue = s.scalar(select(TaskQueueRow).where(TaskQueueRow.job_id == row.id))
        assert queue is not None
        for t in s.scalars(select(TaskRow).where(TaskRow.queue_id == queue.id, TaskRow.index < 3)):
            t.state = "done"
        s.commit()
    forecaster = world.platform.forecaster
    assert forecaster is not None and forecaster.refresh(force=True)
    est = world.job(alice, "a").estimate
    assert est is not None and est.end_basis == "learned"
    assert est.end == est.made_at + timedelta(seconds=3400)
