"""A job whose workers cannot be started fails alone; another user's job starts meanwhile.

Found on 005407f (issue 11): a spec accepted with 201 whose entry or env held a NUL byte, or whose
env was 20,000 values of 1 kB (``E2BIG``), made ``Popen`` raise inside the local backend's ``sync``:
every reconcile cycle aborted ("reconcile cycle N failed", once a second), the bad job hung in
Starting and another user's plain job stayed Queued until the bad one was deleted.

The submit API now refuses such specs (tests/unit/test_spec_limits.py), so the bad job here is
submitted as an earlier version accepted it: straight to the controller, its spec read with the
``stored`` validation context (what the database holds). The platform runs as ``paddlecloud up``
runs it: the reconcile loop in its own thread, real processes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.api.models import JobDetail, JobSpec
from paddlecloud.client import Client
from paddlecloud.controller import Identity, Platform

pytestmark = pytest.mark.timeout(120)

MakePackage = Callable[[dict[str, str]], Path]

#: what a job may take from submit to Running while another user's bad job fails (issue 11's goal)
GOAL_S = 2.0
#: what the test asserts: the goal with room for a loaded machine (2.39 s seen at load ~8 on 2 cores:
#: two CPU hogs, the chaos check and the other test lane beside it); before the fix the job never
#: started at all
ASSERTED_S = 2 * GOAL_S
DEADLINE_S = 30.0

#: spec changes, the error the OS gave, whether the 2 s goal is asserted
BAD_SPECS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "nul-in-entry": ({"entry": "sleep 30\x00; echo"}, "embedded null byte", True),
    "nul-in-env": ({"env": {"TOKEN": "a\x00b"}}, "embedded null byte", True),
    # just over ARG_MAX (2 MiB here): E2BIG
    "e2big-env": ({"env": {f"V{i}": "x" * 1000 for i in range(2_200)}}, "Argument list too long", True),
    # the finding's own 20 MB spec: it fails alone all the same, but every commit that touches its
    # row makes SQLite rewrite 20 MB (~0.1 s each), so the loop is that much slower while it exists
    # (1.5-3 s to the good job's start here under load); the body and spec limits now keep any
    # spec under 1 MiB
    "e2big-env-20mb": (
        {"env": {f"V{i}": "x" * 1000 for i in range(20_000)}},
        "Argument list too long",
        False,
    ),
}


def _until(client: Client, name: str, phases: set[str]) -> JobDetail:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        job = client.job(name)
        if job.phase in phases:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} still {job.phase} ({job.reason}: {job.message})")
        time.sleep(0.02)


def _seconds_to_running(job: JobDetail) -> float:
    """Server-side: from the job's Submitted event to its Running event."""
    times = {e.reason: e.time for e in job.events}
    return (times["Running"] - times["Submitted"]).total_seconds()


@pytest.mark.parametrize("bad", list(BAD_SPECS))
def test_a_job_that_cannot_start_fails_alone_while_another_users_job_starts(
    platform: Platform,
    client_for: Callable[..., Client],
    make_package: MakePackage,
    caplog: pytest.LogCaptureFixture,
    bad: str,
) -> None:
    caplog.set_level(logging.WARNING)
    alice, bob = client_for("alice"), client_for("bob")
    pkg = make_package({"main.py": "print('unused')\n"})
    platform.start()  # the reconcile loop in its thread, as `paddlecloud up` runs it
    alice.submit({"name": "warm-up", "entry": "true", "trainers": {"cpu": "100m"}}, package_dir=pkg)
    _until(alice, "warm-up", {"Succeeded"})  # the environment is built (cached for both jobs below)

    over, error, timed = BAD_SPECS[bad]
    package = bob.upload_package(pkg, "bad").path
    data = {"name": "bad", "package": package, "entry": "sleep 30", "trainers": {"cpu": "100m"}, **over}
    as_stored = JobSpec.model_validate(data, context={"stored": True})  # what an earlier version accepted
    platform.jobs.submit(Identity("bob", is_admin=False), as_stored)
    alice.submit({"name": "good", "entry": "sleep 30", "trainers": {"cpu": "100m"}}, package_dir=pkg)

    good = _until(alice, "good", {"Running", "Failed"})
    failed = _until(bob, "bad", {"Failed", "Succeeded", "Running"})
    took = _seconds_to_running(good)
    print(f"\n{bad}: alice's job Running {took:.2f} s after its submit while bob's job failed")

    assert good.phase == "Running", good.message
    assert (failed.phase, failed.reason) == ("Failed", "StartFailed"), failed.message
    assert error in failed.message and "trainer-0" in failed.message
    assert took < ASSERTED_S or not timed
    cycle_failures = [r.getMessage() for r in caplog.records if "reconcile cycle" in r.getMessage()]
    assert cycle_failures == []
    assert bob.quota().jobs_running == 0  # the failed job holds nothing
