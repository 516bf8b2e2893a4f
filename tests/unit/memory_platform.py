"""A platform on the in-memory backend (``backends.memory``): controller tests without processes.

``MemoryWorld`` holds one engine and one data dir across platform "restarts" (``reopen``); the
reconcile loop is driven by ``tick``; jobs are submitted through the SDK on the ASGI app.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from paddlecloud.api.models import JobDetail
from paddlecloud.backends.base import Capability, NodeInfo
from paddlecloud.backends.memory import MemoryBackend, MemoryEngine, MemorySettings
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.client import Client
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.core.clock import ManualClock
from paddlecloud.core.resources import Resources
from paddlecloud.server.app import create_app

__all__ = ["MemoryWorld"]

GI = 2**30


@dataclass
class MemoryWorld:
    root: Path
    capabilities: frozenset[Capability] = ALL
    nodes: tuple[NodeInfo, ...] = (NodeInfo("mem-0", Resources(4000, 8 * GI)),)
    clock: ManualClock = field(default_factory=ManualClock)
    engine: MemoryEngine = field(init=False)
    platform: Platform = field(init=False)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def __post_init__(self) -> None:
        self.engine = MemoryEngine(self.clock.now)
        self.platform = self._open()

    def _open(self) -> Platform:
        settings = MemorySettings(self.nodes, self.capabilities, engine=self.engine)
        backend = MemoryBackend(settings)
        config = PlatformConfig(data_dir=self.root / "data", backend="memory", backend_settings=settings)
        return Platform.open(config, clock=self.clock, backend=backend)

    def reopen(self, **changes: Any) -> Platform:
        """A server restart: the platform closed and opened again on the same data dir and engine."""
        self.platform.close()
        for name, value in changes.items():
            setattr(self, name, value)
        self.platform = self._open()
        self.platform.reconciler.adopt_all()
        return self.platform

    def client(self, user: str, *, admin: bool = False) -> Client:
        http = self._stack.enter_context(TestClient(create_app(self.platform, run_loop=False)))
        token = self.platform.ensure_user(user, admin=admin)
        return Client(endpoint="http://testserver", token=token, http=http)

    def submit(self, client: Client, name: str, package: Path, **spec: Any) -> None:
        body = {"name": name, "entry": "python train.py", "trainers": {"count": 1, "cpu": "1"}, **spec}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.submit(body, package_dir=package)

    def tick(self, times: int = 1) -> None:
        for _ in range(times):
            self.platform.reconciler.tick()

    def job(self, client: Client, name: str) -> JobDetail:
        return client.job(name)

    def close(self) -> None:
        self._stack.close()
        self.platform.close()
