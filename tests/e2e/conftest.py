"""End-to-end fixtures: the real ``paddlecloud up`` on a loopback port, driven by the real CLI.

One server (and one data dir, so job environments are built once) serves the whole session; a test
that needs a restart stops and starts it on the same data dir.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PADDLECLOUD = str(Path(sys.executable).parent / "paddlecloud")
#: every end-to-end job runs confined (``make test`` installs bubblewrap); a server that cannot
#: sandbox refuses to start rather than run the suite unconfined
ISOLATION = ("--isolation", "sandbox")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    data_dir: Path
    home: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    #: more ``paddlecloud up`` options; default node shape: 16 cpu, 32Gi (virtual capacity)
    up_args: list[str] = field(default_factory=lambda: ["--node-cpu", "16", "--node-memory", "32Gi"])
    #: the CA bundle of a server started with ``--tls-cert``: it speaks https, verified with this
    ca: Path | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
        env["PADDLECLOUD_CONFIG"] = str(self.home / "config")
        env["HOME"] = str(self.home)
        return env

    def start(self) -> None:
        self.log_path = self.data_dir.parent / "server.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the server's lifetime
        self.proc = subprocess.Popen(
            [PADDLECLOUD, "up", "--port", str(self.port), "--data-dir", str(self.data_dir),
             *ISOLATION, *self.up_args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            verify = ssl.create_default_context(cafile=str(self.ca)) if self.ca else True
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1, verify=verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy in 60 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [PADDLECLOUD, *args], capture_output=True, text=True, env=self.env, timeout=timeout, cwd=ROOT
        )
        if check and r.returncode != 0:
            raise AssertionError(f"paddlecloud {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def job(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self.json("describe", name)
        return data

    def log_file(self, job: str, worker: dict[str, Any], user: str = "default") -> Path:
        """Where the local backend keeps ``worker``'s current log (the API names it, no path)."""
        return self.data_dir / "cluster" / "jobs" / user / job / "logs" / str(worker["log"])

    def wait_phase(self, name: str, phases: set[str], timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name)
            if job["phase"] in phases:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {name} still {job['phase']} after {timeout} s: {job['message']}")
            time.sleep(0.3)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("platform")
    srv = Server(data_dir=base / "data", home=base / "home")
    srv.home.mkdir()
    srv.start()
    yield srv
    # leave nothing running: kill every job that is still active, then stop the server
    if srv.proc is None:
        srv.start()
    for job in srv.json("get", "jobs")["items"]:
        srv.cli("kill", job["name"], "--grace", "1", check=False)
    srv.stop()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Server]:
    """A server of its own with one virtual node of 4 CPUs (jobs there compete for them); every job
    is killed at the end."""
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home", up_args=["--node-cpu", "4"])
    srv.home.mkdir()
    srv.start()
    yield srv
    for job in srv.json("get", "jobs")["items"]:
        srv.cli("kill", job["name"], "--grace", "1", check=False)
    srv.stop()


def write_package(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A throw-away PostgreSQL cluster for the session (``postgres.fresh_database`` for a database)."""
    from .postgres import postgres_cluster

    with postgres_cluster() as url:
        yield url
