"""A backend call that raises fails that one job, never the reconcile cycle (issue 11).

On 005407f an exception from ``sync``, ``stop``, ``remove_trainer`` or ``adopt`` aborted the whole
cycle (every second, for as long as the job existed), so no other job was observed or admitted.
Here the real local backend runs real processes, and one of its methods is made to raise for one job
only, as an unexpected error of any backend (Kubernetes too) would: that job ends Failed with a
stable reason and the error in its message, its processes are stopped, its placement is freed, and
the other user's job is admitted in the same ``tick`` that does not raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from paddlecloud.api.errors import ErrorCode, PaddleCloudError
from paddlecloud.api.models import JobDetail
from paddlecloud.backends.local import NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.store.tables import JobRow

pytestmark = pytest.mark.timeout(90)

MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]
WaitGone = Callable[..., list[int]]
Asgi = Callable[[Platform], httpx.Client]
CPU4 = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)
PKG = {"main.py": "print('unused')\n"}


def explode(monkeypatch: pytest.MonkeyPatch, platform: Platform, method: str, key: str) -> None:
    """Make ``backend.<method>`` raise for job ``key`` only (``start`` takes a launch, not a key)."""
    backend = platform.ctx.backend
    real = getattr(backend, method)

    def call(first: Any, *args: Any, **kwargs: Any) -> Any:
        if (first if isinstance(first, str) else first.key) == key:
            raise RuntimeError(f"{method} exploded")
        return real(first, *args, **kwargs)

    monkeypatch.setattr(backend, method, call)


def sdk(platform: Platform, asgi: Asgi, user: str) -> Client:
    """An SDK client of ``user`` on ``platform`` (one the test opened itself)."""
    return Client(endpoint="http://testserver", token=platform.ensure_user(user), http=asgi(platform))


def job(client: Client, pkg: Path, name: str, **spec: Any) -> None:
    body = {"name": name, "entry": "sleep 60", "trainers": {"cpu": "100m"}, **spec}
    client.submit(body, package_dir=pkg)


def tick_until(platform: Platform, client: Client, name: str, phases: set[str]) -> JobDetail:
    deadline = time.monotonic() + 30
    while True:
        platform.reconciler.tick()  # raises if the cycle fails
        got = client.job(name)
        if got.phase in phases:
            return got
        assert time.monotonic() < deadline, f"{name}: {got.phase} {got.reason} {got.message}"
        time.sleep(0.1)


def pids(detail: JobDetail) -> list[int]:
    return [w.pid for w in detail.workers if w.pid is not None]


def test_an_observe_error_fails_that_job_and_stops_its_processes(
    platform: Platform,
    alice: Client,
    bob: Client,
    make_package: MakePackage,
    drive: Drive,
    wait_gone: WaitGone,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pkg = make_package(PKG)
    job(bob, pkg, "b")
    running = drive(bob, "b", {"Running"})
    explode(monkeypatch, platform, "sync", "bob/b")
    job(alice, pkg, "a")
    a = tick_until(platform, alice, "a", {"Running"})
    b = bob.job("b")
    assert (b.phase, b.reason) == ("Failed", "ObserveFailed")
    assert "observing the job failed: RuntimeError: sync exploded" in b.message
    assert wait_gone(pids(running)) == []  # its processes were stopped
    assert a.phase == "Running"


def test_a_start_error_fails_that_job_and_the_other_is_admitted(
    platform: Platform, alice: Client, bob: Client, make_package: MakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = make_package(PKG)
    explode(monkeypatch, platform, "start", "bob/b")
    job(bob, pkg, "b")
    job(alice, pkg, "a")
    tick_until(platform, alice, "a", {"Running"})
    b = bob.job("b")
    assert (b.phase, b.reason) == ("Failed", "StartFailed")
    assert "starting the job failed: RuntimeError: start exploded" in b.message


def test_a_stop_error_during_a_preemption_fails_the_preempted_job_only(
    platform_factory: Callable[..., Platform],
    asgi: Asgi,
    make_package: MakePackage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    platform = platform_factory(nodes=CPU4, policy="tiresias", shrink_grace=1.0)
    alice, bob = sdk(platform, asgi, "alice"), sdk(platform, asgi, "bob")
    pkg = make_package(PKG)
    job(bob, pkg, "low", trainers={"cpu": "4"}, priority="low")
    tick_until(platform, bob, "low", {"Running"})
    explode(monkeypatch, platform, "stop", "bob/low")
    job(alice, pkg, "urgent", trainers={"cpu": "4"}, priority="high")
    tick_until(platform, alice, "urgent", {"Running"})
    low = bob.job("low")
    assert (low.phase, low.reason) == ("Failed", "StopFailed")
    assert "stopping the job to preempt it failed: RuntimeError: stop exploded" in low.message


def test_a_stop_error_during_a_shrink_fails_the_shrunk_job_only(
    platform_factory: Callable[..., Platform],
    asgi: Asgi,
    make_package: MakePackage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    platform = platform_factory(nodes=CPU4, policy="elastic", shrink_grace=1.0)
    alice, bob = sdk(platform, asgi, "alice"), sdk(platform, asgi, "bob")
    pkg = make_package(PKG)
    job(bob, pkg, "flex", trainers={"cpu": "1", "count": 4, "min": 1, "max": 4})
    tick_until(platform, bob, "flex", {"Running"})
    explode(monkeypatch, platform, "remove_trainer", "bob/flex")
    job(alice, pkg, "fixed", trainers={"cpu": "2"})
    tick_until(platform, alice, "fixed", {"Running"})
    flex = bob.job("flex")
    assert (flex.phase, flex.reason) == ("Failed", "StopFailed")
    assert "retiring a trainer failed: RuntimeError: remove_trainer exploded" in flex.message


def test_an_adopt_error_after_a_restart_fails_that_job_and_adopts_the_others(
    platform_factory: Callable[..., Platform],
    asgi: Asgi,
    make_package: MakePackage,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    first = platform_factory(data_dir=tmp_path / "data")
    pkg = make_package(PKG)
    for user, name in (("bob", "b"), ("alice", "a")):
        job(sdk(first, asgi, user), pkg, name)
        tick_until(first, sdk(first, asgi, user), name, {"Running"})
    first.reconciler.stop()  # the server goes away; the jobs' processes stay

    again = platform_factory(data_dir=tmp_path / "data")
    explode(monkeypatch, again, "adopt", "bob/b")
    again.reconciler.adopt_all()  # raises if one job's failure aborts the adoption of all
    b, a = sdk(again, asgi, "bob").job("b"), sdk(again, asgi, "alice").job("a")
    assert (b.phase, b.reason) == ("Failed", "AdoptFailed")
    assert "re-adopting the job failed: RuntimeError: adopt exploded" in b.message
    assert a.phase == "Running" and "Adopted" in [e.reason for e in a.events]


def test_a_kill_whose_stop_raises_still_ends_the_job(
    platform: Platform, bob: Client, make_package: MakePackage, drive: Drive, monkeypatch: pytest.MonkeyPatch
) -> None:
    job(bob, make_package(PKG), "b")
    drive(bob, "b", {"Running"})
    explode(monkeypatch, platform, "stop", "bob/b")
    killed = bob.kill("b")
    assert killed.phase == "Killed"
    assert "stopping its workers failed: RuntimeError: stop exploded" in killed.message


def test_a_stored_spec_that_cannot_be_read_fails_that_job_only(
    platform: Platform, alice: Client, bob: Client, make_package: MakePackage
) -> None:
    pkg = make_package(PKG)
    job(bob, pkg, "b")
    with platform.ctx.session() as s:  # as a damaged row, or one a version with other rules wrote
        spec = s.query(JobRow).filter_by(name="b").one().spec
        spec["trainers"]["cpu"] = "lots"
        s.execute(update(JobRow).where(JobRow.name == "b").values(spec=spec))
        s.commit()
    job(alice, pkg, "a")
    tick_until(platform, alice, "a", {"Running"})
    with platform.ctx.session() as s:
        row = s.query(JobRow).filter_by(name="b").one()
        assert (row.phase, row.reason) == ("Failed", "InvalidSpec")
        assert "reading the job's spec failed: ValidationError" in row.message
        assert "'lots' is not a valid cpu quantity" in row.message
    # describing it says what is wrong and what to do (409 spec_unreadable, never a 500)
    with pytest.raises(PaddleCloudError) as err:
        bob.job("b")
    assert err.value.code == ErrorCode.SPEC_UNREADABLE
    assert "not a valid cpu quantity" in str(err.value) and "kill --rm b" in str(err.value)
    assert "b" in {j.name for j in bob.jobs(all=True)}  # listed, and removable
    bob.delete("b")
    assert "b" not in {j.name for j in bob.jobs(all=True)}
