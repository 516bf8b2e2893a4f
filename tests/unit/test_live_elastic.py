"""The live elastic loop: the scheduler's resize and preempt decisions applied to real processes.

In-process platform (real controller, local backend, OS processes) on one 4-CPU virtual node, the
reconcile loop ticked by hand. Trainers run ``worker.py`` below: they record which trainer count
they started with, and on SIGTERM (a graceful shrink or a preemption) print ``retiring`` and exit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from paddlecloud.api.models import JobDetail
from paddlecloud.backends.local import NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import WorkerState
from paddlecloud.scheduler import JobRequest, Snapshot
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.scheduler.goodput import AdaptiveBatch, FittedStepTime, goodput_table

pytestmark = pytest.mark.timeout(90)

MakePackage = Callable[[dict[str, str]], Path]
Asgi = Callable[[Platform], httpx.Client]

WORKER = {
    "worker.py": """\
import os, signal, sys, threading, time
from paddlecloud.runtime import membership

# one write(2) per line: the watcher thread and the SIGTERM handler never interleave inside a line
def line(text):
    os.write(1, (text + "\\n").encode())

def retire(signum, frame):
    line("retiring " + os.environ["PADDLECLOUD_WORKER"])
    sys.exit(0)

def watch():
    for m in membership.changes(poll=0.1):
        line(f"members {m.trainers} {','.join(m.trainer_endpoints)}")

signal.signal(signal.SIGTERM, retire)
print("started", os.environ["PADDLECLOUD_WORKER"], "of", os.environ["PADDLECLOUD_TRAINERS"], flush=True)
threading.Thread(target=watch, daemon=True).start()
seconds = float(sys.argv[1])
deadline = time.time() + seconds
while time.time() < deadline:
    time.sleep(0.05)
print("done", flush=True)
"""
}
CPU4 = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)


def _alice(platform: Platform, asgi: Asgi) -> Client:
    return Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=asgi(platform))


def _submit(client: Client, package: Path, name: str, seconds: float, **trainers: int) -> None:
    spec = {"name": name, "entry": f"python worker.py {seconds}", "trainers": {"cpu": "1", **trainers}}
    client.submit(spec, package_dir=package)


def _until(platform: Platform, client: Client, name: str, check: Callable[[JobDetail], bool]) -> JobDetail:
    """Tick until ``check(job)`` holds (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        platform.reconciler.tick()
        job = client.job(name)
        if check(job):
            return job
        assert time.monotonic() < deadline, f"{name}: {job.phase} {job.reason} {job.message} {job.events}"
        time.sleep(0.1)


def _started(client: Client, job: str, worker: str) -> bool:
    return any(line.startswith("started") for line in client.logs(job, worker=worker))


def _reasons(job: JobDetail) -> list[str]:
    return [e.reason for e in job.events]


def _running(job: JobDetail) -> set[str]:
    return {w.name for w in job.workers if w.state == WorkerState.RUNNING}


def test_elastic_job_grows_when_capacity_frees_and_shrinks_for_a_new_job(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory(nodes=CPU4, policy="elastic", shrink_grace=5.0)
    alice = _alice(platform, asgi)
    pkg = make_package(WORKER)
    _submit(alice, pkg, "fixed", 2.0, count=3)
    _until(platform, alice, "fixed", lambda j: j.phase == "Running")
    _submit(alice, pkg, "flex", 60.0, count=1, min=1, max=4)
    flex = _until(platform, alice, "flex", lambda j: j.phase == "Running")
    assert flex.trainers.desired == 1  # only one CPU was free

    # "fixed" ends: the elastic job takes the freed CPUs without restarting its first trainer
    first_pid = next(w.pid for w in flex.workers if w.name == "trainer-0")
    flex = _until(platform, alice, "flex", lambda j: len(_running(j)) == 4)
    assert flex.trainers.desired == 4
    assert next(w.pid for w in flex.workers if w.name == "trainer-0") == first_pid
    assert "Resized" in _reasons(flex)
    assert any(e.message.startswith("trainers 1 -> 4") for e in flex.events)
    _until(platform, alice, "flex", lambda j: _started(alice, "flex", "trainer-3"))
    assert "started trainer-3 of 4\n" in list(alice.logs("flex", worker="trainer-3"))
    # the trainer that started alone is told of the growth (runtime.membership)
    endpoints = ",".join(w.endpoint for w in sorted(flex.workers, key=lambda w: w.index))
    _until(
        platform,
        alice,
        "flex",
        lambda j: f"members 4 {endpoints}\n" in alice.logs("flex", worker="trainer-0"),
    )

    # a new fixed job of 2 trainers: the elastic job is shrunk (not preempted) to make room
    _submit(alice, pkg, "second", 2.0, count=2)
    second = _until(platform, alice, "second", lambda j: j.phase == "Running")
    flex = _until(platform, alice, "flex", lambda j: {"trainer-2", "trainer-3"}.isdisjoint(_running(j)))
    assert flex.phase == "Running" and "Preempted" not in _reasons(flex)
    assert flex.trainers.desired == 2
    assert any(e.message.startswith("trainers 4 -> 2") for e in flex.events)
    flex = _until(
        platform,
        alice,
        "flex",
        lambda j: (
            {w.state for w in j.workers if w.name in ("trainer-2", "trainer-3")} == {WorkerState.STOPPED}
        ),
    )
    # the retired trainer stopped gracefully and its log is still there
    assert list(alice.logs("flex", worker="trainer-3"))[-1] == "retiring trainer-3\n"
    assert second.trainers.desired == 2
    _until(
        platform,
        alice,
        "flex",
        lambda j: any(ln.startswith("members 2 ") for ln in alice.logs("flex", worker="trainer-0")),
    )
    quota = alice.quota()
    assert quota.used.cpu == "4"  # 2 (flex, shrunk) + 2 (second)


def test_preempted_job_is_queued_again_and_keeps_its_earlier_logs(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    platform = platform_factory(nodes=CPU4, policy="tiresias", shrink_grace=5.0)
    alice = _alice(platform, asgi)
    pkg = make_package(WORKER)
    _submit(alice, pkg, "low", 2.5, count=4)
    _until(platform, alice, "low", lambda j: len(_running(j)) == 4)
    _until(
        platform, alice, "low", lambda j: _started(alice, "low", "trainer-0")
    )  # its SIGTERM handler is set
    spec = {
        "name": "urgent",
        "entry": "python worker.py 1",
        "trainers": {"cpu": "1", "count": 2},
        "priority": 10,
    }
    alice.submit(spec, package_dir=pkg)
    low = _until(platform, alice, "low", lambda j: j.phase == "Queued")
    assert "Preempted" in _reasons(low)
    assert low.reason in ("Preempted", "InsufficientResources", "LowerPriority")
    urgent = _until(platform, alice, "urgent", lambda j: j.phase == "Succeeded")
    assert urgent.trainers.succeeded == 2
    low = _until(platform, alice, "low", lambda j: j.phase == "Succeeded")
    assert _reasons(low).count("Admitted") == 2
    assert any(e.message.endswith("(start 2)") for e in low.events)
    # the run before the preemption is `logs --previous`; the last run ran to the end
    assert list(alice.logs("low", worker="trainer-0", previous=True))[-1] == "retiring trainer-0\n"
    assert list(alice.logs("low", worker="trainer-0"))[-1] == "done\n"


STUBBORN = {
    "stubborn.py": """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # takes the whole grace period to stop
print("started", flush=True)
time.sleep(120)
"""
}


def test_a_preemption_holds_neither_the_loop_nor_api_writes(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    """The preempted job's processes ignore SIGTERM, so stopping it takes the whole 4 s grace: the
    cycle that preempts and the API writes made meanwhile return at once; its CPUs stay counted as
    held (Preempting) until its processes are gone, and only then does the urgent job start."""
    platform = platform_factory(nodes=CPU4, policy="tiresias", shrink_grace=4.0)
    alice = _alice(platform, asgi)
    alice.submit(
        {"name": "low", "entry": "python stubborn.py", "trainers": {"cpu": "1", "count": 4}},
        package_dir=make_package(STUBBORN),
    )
    _until(platform, alice, "low", lambda j: _started(alice, "low", "trainer-3"))
    pkg = make_package(WORKER)
    urgent = {"name": "urgent", "entry": "python worker.py 1", "trainers": {"cpu": "1", "count": 2}}
    alice.submit({**urgent, "priority": 10}, package_dir=pkg)
    _submit(alice, pkg, "bystander", 30.0, count=1)  # waits behind both

    t0 = time.monotonic()
    platform.reconciler.tick()  # preempts "low"
    cycle = time.monotonic() - t0
    assert alice.job("low").phase == "Preempting"
    t0 = time.monotonic()
    alice.kill("bystander")  # an unrelated API write while "low" is being stopped
    write = time.monotonic() - t0
    assert cycle < 1.0 and write < 1.0, f"cycle {cycle:.2f} s, write {write:.2f} s"

    # while its processes stop, "low" holds its CPUs: "urgent" waits and says why
    platform.reconciler.tick()
    waiting = alice.job("urgent")
    assert waiting.phase == "Queued" and waiting.reason == "PreemptionInProgress", waiting.message
    assert alice.job("low").phase == "Preempting"
    assert alice.quota().used.cpu == "4"

    low = _until(platform, alice, "low", lambda j: j.phase == "Queued")
    assert {w.state for w in low.workers} == {WorkerState.STOPPED}
    assert [r for r in _reasons(low) if r.startswith("Preempt")] == ["Preempting", "Preempted"]
    gone = next(e.time for e in low.events if e.reason == "Preempted")
    urgent_job = _until(platform, alice, "urgent", lambda j: j.phase in ("Running", "Succeeded"))
    admitted = [e.time for e in urgent_job.events if e.reason == "Admitted"]
    assert admitted and admitted[0] >= gone  # never started beside the stopping job
    assert (gone - next(e.time for e in low.events if e.reason == "Preempting")).total_seconds() >= 3.5


LINGERING_PSERVER = {
    **WORKER,
    "serve.py": """\
import os, signal, socket, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the job stays Stopping for the whole grace period
s = socket.socket()
s.bind(("127.0.0.1", int(os.environ["PADDLECLOUD_PORT"])))
s.listen()
time.sleep(120)
""",
}


def test_a_job_whose_trainers_are_done_is_never_grown_while_it_stops(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    """Its trainers succeeded and its pserver takes the whole cleanup grace to stop: the free CPUs
    beside it must not be given to it (a trainer added then would never run, and the job would end
    as Failed instead of Succeeded)."""
    platform = platform_factory(nodes=CPU4, policy="elastic")
    alice = _alice(platform, asgi)
    spec = {
        "name": "flex",
        "entry": 'if [ "$PADDLECLOUD_ROLE" = pserver ]; then python serve.py; else python worker.py 1; fi',
        "pservers": {"count": 1, "cpu": "1"},
        "trainers": {"cpu": "1", "count": 1, "min": 1, "max": 3},
    }
    blocker = {"name": "blocker", "entry": "python worker.py 60", "trainers": {"cpu": "2", "count": 1}}
    pkg = make_package(LINGERING_PSERVER)
    alice.submit(blocker, package_dir=pkg)
    _until(platform, alice, "blocker", lambda j: j.phase == "Running")
    alice.submit(spec, package_dir=pkg)
    _until(platform, alice, "flex", lambda j: j.phase == "Running")
    stopping = _until(platform, alice, "flex", lambda j: j.reason == "Stopping")
    assert stopping.trainers.desired == 1
    alice.kill("blocker", grace=0)  # capacity frees while flex is stopping
    for _ in range(5):
        platform.reconciler.tick()
        time.sleep(0.2)
    done = _until(platform, alice, "flex", lambda j: j.phase in ("Succeeded", "Failed"))
    assert done.phase == "Succeeded", done.message
    assert "Resized" not in _reasons(done)
    assert {w.name for w in done.workers} == {"pserver-0", "trainer-0"}


@pytest.mark.parametrize("name", ["elastic", "goodput"])
def test_live_snapshot_gives_the_same_plan_to_the_simulator_policy(
    name: str, platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    """The live loop's own snapshot, handed to the policy the simulator constructs, yields the same plan."""
    platform = platform_factory(nodes=CPU4, policy=name)
    assert platform.reconciler.policy.name == name
    alice = _alice(platform, asgi)
    pkg = make_package(WORKER)
    _submit(alice, pkg, "a", 30.0, count=2, min=1, max=3)
    _submit(alice, pkg, "b", 30.0, count=2)
    _submit(alice, pkg, "c", 30.0, count=3)
    platform.reconciler.tick()
    assert platform.reconciler.last_round is not None
    snap, live_plan = platform.reconciler.last_round
    assert isinstance(snap, Snapshot) and len(snap.queue) == 3
    assert make_policy(name).schedule(snap) == live_plan
    assert {a.job for a in live_plan.admit} == {"alice/a", "alice/b"}
    assert [(w.job, str(w.reason)) for w in live_plan.wait] == [("alice/c", "InsufficientResources")]


@pytest.mark.parametrize("name", ["elastic", "goodput"])
def test_live_snapshot_with_adaptive_jobs_gives_the_same_plan_to_the_simulator_policy(
    name: str, platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage
) -> None:
    """Adaptive-batch jobs as the live loop will describe them (goodput table from the fitted step
    times and the reported noise scale): the live loop's policy and the one the simulator constructs
    decide the same, batches included, for a waiting adaptive job and for a running one whose best
    batch moved (a batch-only resize)."""
    platform = platform_factory(nodes=CPU4, policy=name)
    assert platform.reconciler.policy.name == name
    alice = _alice(platform, asgi)
    pkg = make_package(WORKER)
    _submit(alice, pkg, "a", 30.0, count=2, min=1, max=3)
    _submit(alice, pkg, "b", 30.0, count=1)
    platform.reconciler.tick()
    assert platform.reconciler.last_round is not None
    snap, _ = platform.reconciler.last_round
    fitted = FittedStepTime.fit([(1, 1, 32.0, 0.2), (1, 1, 64.0, 0.35), (2, 1, 32.0, 0.25)])
    assert fitted is not None
    table = goodput_table(fitted, AdaptiveBatch(init=64, lo=32, hi=512), 5000.0, [1, 1, 1])

    def adaptive(job: JobRequest, batch_size: int = 0) -> JobRequest:
        if job.key != "alice/a":
            return job
        return dataclasses.replace(job, batches=table.batches, speedup=table.speedup, batch_size=batch_size)

    waiting = dataclasses.replace(snap, queue=tuple(adaptive(j) for j in snap.queue))
    live_plan = platform.reconciler.policy.schedule(waiting)
    assert make_policy(name).schedule(waiting) == live_plan
    admit = next(a for a in live_plan.admit if a.job == "alice/a")
    trainers = sum(p.role == "trainer" for p in admit.placement)
    assert (
        admit.batch_size == table.batch(trainers) > 0 and f"global batch {admit.batch_size}" in admit.message
    )

    _until(platform, alice, "a", lambda j: j.phase == "Running")
    snap, _ = platform.reconciler.last_round
    running = next(j for j in snap.running if j.key == "alice/a")
    stale = dataclasses.replace(running, resized_at=snap.now - 3600, rebatched_at=snap.now - 3600)
    moved = dataclasses.replace(
        snap, running=tuple(adaptive(stale if j.key == "alice/a" else j, 16) for j in snap.running)
    )
    live_plan = platform.reconciler.policy.schedule(moved)
    assert make_policy(name).schedule(moved) == live_plan
    resize = next(r for r in live_plan.resize if r.job == "alice/a")
    assert resize.batch_size == table.batch(resize.trainers) and "global batch 16 ->" in resize.message
