"""Shared fixtures of the unit suite.

The in-process platform fixtures drive the real controller, local backend and ASGI app through the SDK
(``Client(http=TestClient(app))``: the transport seam) with the reconcile loop ticked by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from tests.registry_bed import Bed, start_bed, stop_bed

from paddlecloud.api.models import JobDetail
from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Identity, Platform, PlatformConfig
from paddlecloud.core.phases import JobPhase
from paddlecloud.node import netns
from paddlecloud.server import create_app

# pyproject turns warnings into errors; Starlette warns at import time that its TestClient prefers
# ``httpx2`` over ``httpx``. That is about our test tooling, not the code under test.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NODE = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)
#: jobs of the in-process platforms run confined (``make test`` installs bubblewrap); without it the
#: platform refuses to open rather than run the suite unconfined
ISOLATION = "sandbox"
#: Longest a job may take to reach an expected phase (real processes, real venv build).
DEADLINE_S = 20.0
POLL_S = 0.1

Drive = Callable[..., JobDetail]
MakePackage = Callable[[dict[str, str]], Path]


@pytest.fixture(autouse=True)
def _isolated_client_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never read or write the developer's ~/.paddle/config or PADDLECLOUD_* settings."""
    monkeypatch.setenv("PADDLECLOUD_CONFIG", str(tmp_path / "client-config.yaml"))
    for var in ("PADDLECLOUD_ENDPOINT", "PADDLECLOUD_TOKEN", "PADDLECLOUD_DATACENTER"):
        monkeypatch.delenv(var, raising=False)


#: the local backend's settings ``platform_factory`` accepts beside ``PlatformConfig``'s own fields
LOCAL_FIELDS = tuple(f.name for f in dataclasses.fields(LocalSettings))


def _kill_everything(platform: Platform) -> None:
    """Kill every live job of every user, then SIGKILL any worker process group still there."""
    admin = Identity("teardown", is_admin=True)
    for view in platform.jobs.list_jobs(admin, all_jobs=False, all_users=True):
        with contextlib.suppress(Exception):
            platform.jobs.kill(Identity(view.user, False), view.name, 0.0)
    for view in platform.jobs.list_jobs(admin, all_jobs=True, all_users=True):
        for w in platform.jobs.workers(Identity(view.user, False), view.name):
            if w.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(w.pid, signal.SIGKILL)


@pytest.fixture
def platform_factory(tmp_path: Path) -> Iterator[Callable[..., Platform]]:
    opened: list[Platform] = []

    def make(**config: Any) -> Platform:
        """A platform on a fresh data dir, or on ``data_dir=`` of an earlier one (a server restart);
        the local backend's settings (``nodes``, ``isolation``, ...) may be given among the others,
        and ``clock=`` (default: the system's)."""
        clock = config.pop("clock", None)
        local = {k: config.pop(k) for k in LOCAL_FIELDS if k in config}
        local.setdefault("nodes", NODE)
        local.setdefault("isolation", ISOLATION)
        config.setdefault("backend_settings", LocalSettings(**local))
        config.setdefault("data_dir", tmp_path / f"data{len(opened)}")
        p = Platform.open(PlatformConfig(**config), clock=clock)
        opened.append(p)
        return p

    yield make
    for p in opened:
        try:
            _kill_everything(p)
        finally:
            p.close()
    _remove_namespaces(tmp_path)


def _remove_namespaces(tmp_path: Path) -> None:
    """The network namespaces the test's backends made (marked under ``cluster/netns/``) go, once
    the processes killed above have left them (bounded): a test that made a stop fail leaves its
    job's namespace to nobody."""
    for mark in tmp_path.glob("*/cluster/netns/pcj-*"):
        for _ in range(100):
            if not netns.exists(mark.name) or netns.remove(mark.name, if_unused=True):
                break
            time.sleep(0.05)


@pytest.fixture
def platform(platform_factory: Callable[..., Platform]) -> Platform:
    return platform_factory()


@pytest.fixture
def asgi() -> Iterator[Callable[[Platform], httpx.Client]]:
    """``asgi(platform)``: a started TestClient (an ``httpx.Client``) on a fresh app, closed at teardown."""
    with contextlib.ExitStack() as stack:

        def make(platform: Platform) -> httpx.Client:
            return stack.enter_context(TestClient(create_app(platform, run_loop=False)))

        yield make


@pytest.fixture
def client_for(platform: Platform, asgi: Callable[[Platform], httpx.Client]) -> Callable[..., Client]:
    """``client_for("alice")``: an SDK client for that user, each with its own ASGI transport.

    Each client gets its own TestClient because ``Client`` sets its headers on the one it is given.
    """

    def make(user: str | None, *, token: str | None = None) -> Client:
        if user is not None:
            token = platform.ensure_user(user)
        return Client(endpoint="http://testserver", token=token, http=asgi(platform))

    return make


@pytest.fixture
def raw_http(platform: Platform, asgi: Callable[[Platform], httpx.Client]) -> httpx.Client:
    """A bare HTTP client on the app, without the SDK's headers."""
    return asgi(platform)


@pytest.fixture
def alice(client_for: Callable[..., Client]) -> Client:
    return client_for("alice")


@pytest.fixture
def make_package(tmp_path: Path) -> MakePackage:
    counter = iter(range(1000))

    def make(files: dict[str, str]) -> Path:
        root = tmp_path / f"pkg{next(counter)}"
        for rel, text in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        return root

    return make


@pytest.fixture
def drive(platform: Platform) -> Drive:
    """Tick the reconcile loop until job ``name`` reaches one of ``phases``; bounded by a deadline."""

    def run(client: Client, name: str, phases: set[JobPhase], timeout: float = DEADLINE_S) -> JobDetail:
        deadline = time.monotonic() + timeout
        while True:
            platform.reconciler.tick()
            job = client.job(name)
            if job.phase in phases:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {name} is {job.phase} ({job.reason}: {job.message}) after {timeout} s, "
                    f"expected one of {sorted(phases)}"
                )
            time.sleep(POLL_S)

    return run


def _wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids that still exist after waiting up to ``timeout`` seconds for them all to go."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(POLL_S)


@pytest.fixture
def wait_gone() -> Callable[..., list[int]]:
    return _wait_gone


@pytest.fixture
def root(platform: Platform, client_for: Callable[..., Client]) -> Client:
    """An admin's SDK client (user ``root``)."""
    return client_for(None, token=platform.ensure_user("root", admin=True))


@pytest.fixture
def bob(client_for: Callable[..., Client]) -> Client:
    return client_for("bob")


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    """The container-image test bed (``registry_bed.start_bed``), stopped at the end of the session."""
    yield start_bed()
    stop_bed()
