"""A task master test bench: a Platform on a manual clock that can be closed and opened again on the
same data dir (a server restart), SDK clients for users and for job tokens, and a real HTTP server
(uvicorn in a thread) for the standard-library runtime client."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import select

from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.controller.model.jobtokens import issue_job_token
from paddlecloud.core.clock import Clock, ManualClock
from paddlecloud.server import create_app
from paddlecloud.store.tables import JobRow

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NODE = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)


class Bench:
    def __init__(self, root: Path, clock: Clock | None = None) -> None:
        self.root = root
        self.clock: Any = clock or ManualClock()
        self.platform = self._open()
        self._tokens: dict[str, str] = {}
        self._http: list[httpx.Client] = []
        self._packages = 0

    def _open(self) -> Platform:
        return Platform.open(
            PlatformConfig(data_dir=self.root / "data", backend_settings=LocalSettings(nodes=NODE)),
            clock=self.clock,
        )

    def restart(self) -> None:
        """Close the platform and open a new one on the same data dir (the clock goes on)."""
        self.platform.close()
        self.platform = self._open()

    def close(self) -> None:
        for h in self._http:
            h.close()
        self.platform.close()

    def client(self, token: str | None) -> Client:
        """An SDK client with ``token`` (a user's or a job's) on the current platform's app."""
        http = TestClient(create_app(self.platform, run_loop=False))
        self._http.append(http)
        return Client(endpoint="http://testserver", token=token, http=http)

    def user(self, name: str, admin: bool = False) -> Client:
        if name not in self._tokens:
            self._tokens[name] = self.platform.ensure_user(name, admin=admin)
        return self.client(self._tokens[name])

    def upload(self, owner: Client, files: dict[str, str], where: str = "pfs:dataset") -> str:
        local = self.root / f"upload{self._packages}"
        self._packages += 1
        for rel, text in files.items():
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_text(text)
        owner.pfs.cp([str(local)], where, recursive=True)
        return where

    def submit(self, owner: Client, name: str, tasks: dict[str, Any], **spec: Any) -> None:
        pkg = self.root / f"pkg{self._packages}"
        self._packages += 1
        pkg.mkdir()
        (pkg / "main.py").write_text("print('unused')\n")
        owner.submit({"name": name, "entry": "python main.py", "tasks": tasks, **spec}, package_dir=pkg)

    def job_token(self, user: str, name: str) -> str:
        """What a start of the job gives its workers (``Context.launch`` issues one the same way)."""
        with self.platform.ctx.session() as s:
            job_id = s.scalar(select(JobRow.id).where(JobRow.user == user, JobRow.name == name))
            assert job_id is not None
            token = issue_job_token(s, job_id, self.clock.now())
            s.commit()
        return token

    def worker(self, user: str, name: str) -> Client:
        return self.client(self.job_token(user, name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The platform's app on a real loopback port (uvicorn in a thread), for urllib clients."""

    def __init__(self, platform: Platform, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(platform, run_loop=False), host="127.0.0.1", port=self.port, log_level="error"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> HttpServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def hold_trainers(platform: Platform, user: str, name: str, n: int) -> None:
    """Give the job ``n`` trainer placements in the database, as if the scheduler had placed it there
    (0: none): an adaptive job's step-time reports are fitted only at the trainers it holds."""
    with platform.ctx.session() as s:
        row = s.scalar(select(JobRow).where(JobRow.user == user, JobRow.name == name))
        assert row is not None
        row.placement = [{"role": "trainer", "index": i, "node": "n0", "gpus": []} for i in range(n)] or None
        s.commit()
