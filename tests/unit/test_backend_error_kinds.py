"""The controller treats what a backend raises by its kind, and uses only declared capabilities.

On the in-memory backend (no processes): a transient error (``BackendUnavailable``) keeps the job and
the call is tried again next cycle, one event per streak, bounded by ``backend_retry_s``; a rejection
fails the job with the engine's words; an ``adopt`` is asked only of a backend that declares it (else
the job is queued again after a restart); ``logs --previous`` / ``-f`` are refused with 422
``not_supported`` where not declared; a shared engine's foreign load is counted and named.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_platform import GI, MemoryWorld

from paddlecloud.api.errors import ErrorCode, InvalidInput
from paddlecloud.backends.base import Capability, NodeInfo
from paddlecloud.backends.errors import BackendUnavailable, JobRejected
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.core.resources import Resources

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "train.py").write_text("print('unused: nothing runs on the memory backend')\n")
    return root


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path)
    yield w
    w.close()


def reasons(world: MemoryWorld, client: object, name: str) -> list[str]:
    return [e.reason for e in world.job(client, name).events]  # type: ignore[arg-type]


def test_a_transient_start_error_requeues_the_job_and_a_later_cycle_starts_it(
    world: MemoryWorld, package: Path
) -> None:
    alice = world.client("alice")
    world.engine.fail("start", "alice/a", BackendUnavailable("slurmctld: connection refused"), times=2)
    world.submit(alice, "a", package)
    world.tick()
    a = world.job(alice, "a")
    assert (a.phase, a.reason) == ("Queued", "BackendUnavailable")
    world.tick()  # the second failure: no second event
    world.tick()
    a = world.job(alice, "a")
    assert a.phase in ("Starting", "Running")
    got = reasons(world, alice, "a")
    assert got.count("BackendUnavailable") == 1 and "BackendAvailable" in got
    unavailable = next(e for e in a.events if e.reason == "BackendUnavailable")
    assert "slurmctld: connection refused; trying again each cycle for up to 300 s" in unavailable.message
    world.tick()
    assert world.job(alice, "a").phase == "Running"
    assert world.engine.running("alice/a") == ["alice/a/trainer-0"]


def test_a_transient_error_past_the_bound_fails_the_job(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick(2)
    assert world.job(alice, "a").phase == "Running"
    world.engine.fail("sync", "alice/a", BackendUnavailable("squeue: timed out"), times=-1)
    world.tick()
    world.clock.advance(299)
    world.tick()
    assert world.job(alice, "a").phase == "Running"  # kept while within backend_retry_s
    world.clock.advance(2)
    world.tick()
    a = world.job(alice, "a")
    assert (a.phase, a.reason) == ("Failed", "BackendUnavailable")
    assert "observing the job (tried for 301 s) failed: squeue: timed out" in a.message
    assert world.engine.running("alice/a") == []  # stopped on the engine


def test_a_rejection_fails_that_job_alone_with_the_engines_message(world: MemoryWorld, package: Path) -> None:
    alice, bob = world.client("alice"), world.client("bob")
    world.engine.fail("start", "bob/b", JobRejected("sbatch: error: QOSMaxCpuPerUserLimit"))
    world.submit(bob, "b", package)
    world.submit(alice, "a", package, trainers={"count": 1, "cpu": "1"})
    world.tick(2)
    b = world.job(bob, "b")
    assert (b.phase, b.reason) == ("Failed", "BackendRejected")
    assert b.message == "starting the job failed: sbatch: error: QOSMaxCpuPerUserLimit"
    assert world.job(alice, "a").phase == "Running"


def test_a_transient_sync_error_keeps_a_running_job(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick(2)
    world.engine.fail("sync", "alice/a", BackendUnavailable("squeue: timed out"), times=3)
    world.tick(4)
    a = world.job(alice, "a")
    assert a.phase == "Running"
    assert [e.reason for e in a.events][-2:] == ["BackendUnavailable", "BackendAvailable"]
    world.engine.exit("alice/a", "trainer-0", 0)
    world.tick()
    assert world.job(alice, "a").phase == "Succeeded"


def test_a_backend_without_adopt_is_not_asked_and_its_jobs_are_queued_again(
    world: MemoryWorld, package: Path
) -> None:
    world.reopen(capabilities=ALL - {Capability.ADOPT})
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick(2)
    assert world.job(alice, "a").phase == "Running"
    world.reopen()  # adopt_all: no adopt call (it would raise NotSupported)
    alice = world.client("alice")
    a = world.job(alice, "a")
    assert (a.phase, a.reason) == ("Queued", "NotAdopted")
    assert "the memory backend cannot take over started jobs (it does not declare adopt)" in a.message
    world.tick(2)
    a = world.job(alice, "a")
    assert a.phase == "Running" and a.events[-1].reason != "AdoptFailed"


def test_a_backend_with_adopt_takes_its_jobs_over(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick(2)
    world.engine.fail("adopt", "alice/a", BackendUnavailable("slurmctld restarting"))
    world.reopen()
    alice = world.client("alice")
    assert world.job(alice, "a").phase == "Running"  # kept; adopted by the next cycle
    world.tick()
    a = world.job(alice, "a")
    assert "Adopted" in [e.reason for e in a.events] and a.phase == "Running"
    world.engine.exit("alice/a", "trainer-0", 0)
    world.tick()
    assert world.job(alice, "a").phase == "Succeeded"


def test_logs_previous_and_follow_only_where_declared(world: MemoryWorld, package: Path) -> None:
    world.reopen(capabilities=ALL - {Capability.LOGS_PREVIOUS, Capability.LOGS_FOLLOW})
    alice = world.client("alice")
    world.submit(alice, "a", package)
    world.tick(2)
    world.engine.log("alice/a", "trainer-0", "hello")
    assert list(alice.logs("a", worker="trainer-0")) == ["hello\n"]
    for flag in ("previous", "follow"):
        with pytest.raises(InvalidInput) as err:
            list(alice.logs("a", worker="trainer-0", **{flag: True}))
        assert err.value.code == ErrorCode.NOT_SUPPORTED and err.value.field == flag
        assert f"ask without --{flag}" in str(err.value)


def test_a_shared_engines_foreign_load_is_counted_and_named(tmp_path: Path, package: Path) -> None:
    nodes = (NodeInfo("n1", Resources(4000, 8 * GI)),)
    world = MemoryWorld(tmp_path, capabilities=ALL | {Capability.SHARED_CAPACITY}, nodes=nodes)
    try:
        alice = world.client("alice")
        world.engine.foreign["n1"] = Resources(3000, 2 * GI)
        world.submit(alice, "a", package, trainers={"count": 1, "cpu": "2"})
        world.tick()
        a = world.job(alice, "a")
        assert a.phase == "Queued"
        assert "node n1: 3 of 4 CPUs, 2Gi of 8Gi memory held by other users' jobs" in a.message
        world.engine.foreign.clear()  # the other user's job ended
        world.tick(2)
        assert world.job(alice, "a").phase == "Running"
    finally:
        world.close()


def test_an_elastic_job_starts_smaller_beside_foreign_load_says_why_and_grows_back(
    tmp_path: Path, package: Path
) -> None:
    nodes = (NodeInfo("n1", Resources(4000, 8 * GI)), NodeInfo("n2", Resources(4000, 8 * GI)))
    world = MemoryWorld(tmp_path, capabilities=ALL | {Capability.SHARED_CAPACITY}, nodes=nodes)
    try:
        alice = world.client("alice")
        world.engine.foreign["n1"] = Resources(4000, 2 * GI)  # another Slurm user's job
        world.submit(alice, "a", package, trainers={"count": 3, "min": 1, "max": 3, "cpu": "2"})
        world.tick(2)
        a = world.job(alice, "a")
        assert a.phase == "Running" and len(world.engine.running("alice/a")) == 2
        admitted = next(e.message for e in a.events if e.reason == "Admitted")
        assert "admitted with 2 trainers on n2, 3 wanted" in admitted, admitted
        assert "node n1: 4 of 4 CPUs, 2Gi of 8Gi memory held by other users' jobs" in admitted
        world.engine.foreign.clear()  # the other user's job ended
        world.tick(2)
        a = world.job(alice, "a")
        assert len(world.engine.running("alice/a")) == 3
        resized = next(e.message for e in a.events if e.reason == "Resized")
        assert resized.startswith("trainers 2 -> 3") and "wanted" not in resized, resized
    finally:
        world.close()


def test_foreign_load_is_ignored_without_the_capability(world: MemoryWorld, package: Path) -> None:
    alice = world.client("alice")
    world.engine.foreign["mem-0"] = Resources(4000, 8 * GI)  # never reported: no shared-capacity
    world.submit(alice, "a", package, trainers={"count": 1, "cpu": "2"})
    world.tick(2)
    assert world.job(alice, "a").phase == "Running"


def test_a_transient_stop_error_during_a_preemption_is_retried(world: MemoryWorld, package: Path) -> None:
    alice, bob = world.client("alice"), world.client("bob")
    world.submit(alice, "low", package, trainers={"count": 1, "cpu": "4"}, priority="low")
    world.tick(2)
    assert world.job(alice, "low").phase == "Running"
    world.engine.fail("stop", "alice/low", BackendUnavailable("scancel: slurmctld not responding"))
    world.submit(bob, "high", package, trainers={"count": 1, "cpu": "4"}, priority="high")
    deadline = time.monotonic() + 20
    while world.job(bob, "high").phase != "Running":
        assert time.monotonic() < deadline, world.job(alice, "low")
        world.tick()
        time.sleep(0.05)  # the preemption's stop runs in a thread of its own
    low = world.job(alice, "low")
    reasons = [e.reason for e in low.events]
    assert low.phase == "Queued" and reasons.index("BackendUnavailable") < reasons.index("Preempted")
    assert world.engine.running("alice/low") == []
