"""The backend contract (``backends/base.py``), checked the same way on every backend of ``HARNESSES``:
start, sync, stop and nothing left; a worker's failure reported for its job only; logs; every
optional operation either works (declared) or raises ``NotSupported`` (not declared); adopt after a
server restart where declared."""

from __future__ import annotations

import collections

import pytest

from paddlecloud.backends.base import Capability, LogRequest
from paddlecloud.backends.errors import BackendError, NotSupported
from paddlecloud.core.phases import WorkerState
from paddlecloud.scheduler import WorkerPlacement
from tests.conformance.conftest import declares
from tests.conformance.harness import Harness, wait_for

pytestmark = pytest.mark.timeout(120)

ENDED = {WorkerState.SUCCEEDED, WorkerState.FAILED, WorkerState.STOPPED, WorkerState.LOST}


def stopped(h: Harness, key: str) -> None:
    h.backend.stop(key, 1.0)
    status = wait_for(f"{key} finished", lambda: (s := h.backend.sync(key)).finished and s)
    assert all(w.state in ENDED for w in status.workers), status.workers
    assert wait_for(f"nothing of {key} left", lambda: h.leftovers(key) == []), h.leftovers(key)


def test_confinement_is_said_and_honest(harness: Harness) -> None:
    """``up`` prints it: a backend whose workers run unsandboxed must not claim they are confined."""
    c = harness.backend.confinement()
    assert c.description.strip()
    if harness.backend.name in ("local", "slurm"):  # the local harness unconfined, Slurm's sandboxed
        assert c.confined == harness.backend.isolation.sandboxed  # type: ignore[attr-defined]
        assert c.description.startswith(harness.backend.isolation.mode)  # type: ignore[attr-defined]


def test_nodes_have_capacity(harness: Harness) -> None:
    nodes = harness.backend.nodes()
    assert nodes and all(n.capacity.cpu_m > 0 and n.capacity.memory > 0 for n in nodes)
    for n in nodes:
        assert n.foreign.fits_in(n.capacity)


def test_start_sync_stop_leaves_nothing_running(harness: Harness) -> None:
    launch = harness.launch("fit", pservers=1, trainers=2)
    harness.backend.start(launch)
    status = harness.all_running(launch.key)
    assert sorted(w.name for w in status.workers) == ["pserver-0", "trainer-0", "trainer-1"]
    assert {w.role for w in status.workers} == {"pserver", "trainer"}
    assert not status.finished and status.failure is None
    stopped(harness, launch.key)
    harness.backend.stop(launch.key, 1.0)  # idempotent
    harness.backend.forget(launch.key)
    assert harness.backend.sync(launch.key).finished


def test_a_failed_worker_fails_its_job_alone(harness: Harness) -> None:
    a, b = harness.launch("a", trainers=2), harness.launch("b", trainers=1)
    harness.backend.start(a)
    harness.backend.start(b)
    harness.all_running(a.key)
    harness.all_running(b.key)
    harness.exit(a.key, "trainer-0", 3)
    failed = wait_for("a's failure", lambda: (s := harness.backend.sync(a.key)).failure and s)
    worker = next(w for w in failed.workers if w.name == "trainer-0")
    assert worker.state == WorkerState.FAILED and worker.exit_code == 3
    other = harness.backend.sync(b.key)
    assert other.failure is None and [w.state for w in other.workers] == [WorkerState.RUNNING]
    stopped(harness, a.key)
    stopped(harness, b.key)


def test_a_trainer_that_succeeds_is_reported(harness: Harness) -> None:
    launch = harness.launch("ok", trainers=1)
    harness.backend.start(launch)
    harness.all_running(launch.key)
    harness.exit(launch.key, "trainer-0", 0)
    done = wait_for("trainer-0 succeeded", lambda: (s := harness.backend.sync(launch.key)).finished and s)
    assert [(w.state, w.exit_code) for w in done.workers] == [(WorkerState.SUCCEEDED, 0)]
    assert done.failure is None


def test_logs(harness: Harness) -> None:
    launch = harness.launch("logs", trainers=2)
    harness.backend.start(launch)
    harness.all_running(launch.key)
    one = b"".join(harness.backend.read_log(LogRequest(launch.key, ("trainer-1",))))
    assert b"hello from trainer-1" in one and b"trainer-0" not in one
    both = b"".join(harness.backend.read_log(LogRequest(launch.key, ("trainer-0", "trainer-1"))))
    assert b"[trainer-0] hello from trainer-0" in both and b"[trainer-1] hello from trainer-1" in both
    for flag, capability in (("previous", Capability.LOGS_PREVIOUS), ("follow", Capability.LOGS_FOLLOW)):
        if not declares(harness, capability):
            with pytest.raises(NotSupported):
                list(harness.backend.read_log(LogRequest(launch.key, ("trainer-0",), **{flag: True})))
    if declares(harness, Capability.LOGS_FOLLOW):  # follow ends when the worker ends
        harness.exit(launch.key, "trainer-0", 0)
        followed = b"".join(harness.backend.read_log(LogRequest(launch.key, ("trainer-0",), follow=True)))
        assert b"hello from trainer-0" in followed
    stopped(harness, launch.key)


def test_resize_only_where_declared(harness: Harness) -> None:
    launch = harness.launch("elastic", trainers=1)
    harness.backend.start(launch)
    harness.all_running(launch.key)
    node = launch.placement[0].node
    with pytest.raises(NotSupported):  # never a pserver, whatever the backend declares
        harness.backend.add_trainer(launch.key, WorkerPlacement("pserver", 1, node))
    if not declares(harness, Capability.RESIZE):
        with pytest.raises(NotSupported):
            harness.backend.add_trainer(launch.key, WorkerPlacement("trainer", 1, node))
        with pytest.raises(NotSupported):
            harness.backend.remove_trainer(launch.key, 1.0)
    else:
        harness.backend.add_trainer(launch.key, WorkerPlacement("trainer", 1, node))
        wait_for(
            "trainer-1 running",
            lambda: any(
                w.name == "trainer-1" and w.state == WorkerState.RUNNING
                for w in harness.backend.sync(launch.key).workers
            ),
        )
    stopped(harness, launch.key)


def test_adopt_only_where_declared(harness: Harness) -> None:
    launch = harness.launch("kept", pservers=1, trainers=1)
    harness.backend.start(launch)
    before = harness.all_running(launch.key)
    again = harness.reopen()  # the server restarted; the engine's work goes on
    if not declares(harness, Capability.ADOPT):
        with pytest.raises(NotSupported):
            again.adopt(launch)
        return
    again.adopt(launch)
    after = harness.all_running(launch.key)
    assert sorted(w.name for w in after.workers) == sorted(w.name for w in before.workers)
    stopped(harness, launch.key)


def test_errors_are_the_contracts_kinds(harness: Harness) -> None:
    """What a backend raises on purpose is a BackendError (here: a trainer for a job it never saw)."""
    launch = harness.launch("ghost", trainers=1)
    if declares(harness, Capability.RESIZE):
        with pytest.raises(BackendError):
            harness.backend.add_trainer(launch.key, WorkerPlacement("trainer", 1, launch.placement[0].node))


def _bytes(h: Harness, key: str) -> int:
    return collections.deque(h.backend.disk_usage(key), maxlen=1)[0]


def test_disk_usage_counts_a_jobs_folders_and_its_scratch_goes_when_it_ends(harness: Harness) -> None:
    """``disk-usage``: what a worker writes into its working directory counts while the job runs,
    is gone once the job has ended (its logs stay readable), and nothing is left after ``forget``."""
    launch = harness.launch("disk", trainers=1)
    harness.backend.start(launch)
    harness.all_running(launch.key)
    if not declares(harness, Capability.DISK_USAGE):
        with pytest.raises(NotSupported):
            list(harness.backend.disk_usage(launch.key))
        stopped(harness, launch.key)
        return
    before = _bytes(harness, launch.key)
    harness.write_scratch(launch.key, "trainer-0", 4 * 2**20)
    during = _bytes(harness, launch.key)
    assert during >= before + 4 * 2**20
    harness.exit(launch.key, "trainer-0", 0)
    wait_for("the job finished", lambda: harness.backend.sync(launch.key).finished)
    wait_for("its scratch removed", lambda: _bytes(harness, launch.key) <= during - 4 * 2**20)
    log = b"".join(harness.backend.read_log(LogRequest(launch.key, ("trainer-0",))))
    assert b"hello from trainer-0" in log  # retention: the logs of a finished job stay
    harness.backend.forget(launch.key)
    assert _bytes(harness, launch.key) == 0
