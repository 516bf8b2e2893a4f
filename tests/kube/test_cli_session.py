"""Acceptance: one CLI session (submit, get jobs, get workers, logs, kill) gives the same answers on
the local backend and on the Kubernetes backend.

Kubernetes: ``paddlecloud up --backend kubernetes --kubeconfig <the fake's>`` as a real server
process, the operator (kopf, in this process) and the fake API server; a scripted kubelet binds and
runs every pod and writes what the program would print (``hello from <worker>``). Locally the same
package really runs: each worker prints that line (pservers also listen on their port) and sleeps
until it is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from paddlecloud.backends.kubernetes.crd import manifest
from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import AutoKubelet, G, P, running_operator
from tests.kube.kubelet import Kubelet

PADDLECLOUD = str(Path(sys.executable).parent / "paddlecloud")
TRAIN = """\
import os, socket, time
if os.environ["PADDLECLOUD_ROLE"] == "pserver":
    s = socket.socket()
    s.bind(("127.0.0.1", int(os.environ["PADDLECLOUD_PORT"])))
    s.listen()
print("hello from " + os.environ["PADDLECLOUD_WORKER"], flush=True)
time.sleep(300)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Session:
    """``paddlecloud up`` on a loopback port and the CLI, each a real process, in a private home."""

    def __init__(self, base: Path, up_args: list[str]) -> None:
        self.base, self.port = base, _free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
        self.env.update(HOME=str(base / "home"), PADDLECLOUD_CONFIG=str(base / "home" / "config"))
        (base / "home").mkdir(parents=True, exist_ok=True)
        self.log = base / "server.log"
        args = [PADDLECLOUD, "up", "--port", str(self.port), "--data-dir", str(base / "data"), *up_args]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        try:
            wait_for("the server", self._healthy, timeout=60)
        except BaseException:
            self.proc.kill()  # a server that never answered is not left behind
            self.proc.wait(30)
            raise

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://127.0.0.1:{self.port}/api/v1/health", timeout=1).status_code == 200
        return False

    def cli(self, *args: str) -> str:
        r = subprocess.run([PADDLECLOUD, *args], capture_output=True, text=True, env=self.env, timeout=60)
        assert r.returncode == 0, (
            f"paddlecloud {' '.join(args)}: {r.stdout}{r.stderr}\n{self.log.read_text()[-3000:]}"
        )
        return r.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json"))

    def close(self) -> None:
        try:
            for job in self.json("get", "jobs")["items"]:
                subprocess.run([PADDLECLOUD, "kill", job["name"], "--grace", "1"], env=self.env, timeout=60)
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        assert "Traceback" not in self.log.read_text(), self.log.read_text()[-5000:]


@contextlib.contextmanager
def kubernetes_platform(base: Path) -> Iterator[Session]:
    with FakeKube() as kube, client.ApiClient(client.Configuration(host=kube.url)) as api:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(manifest())
        kube.add_node("node-1", cpu="16", memory="64Gi")
        base.mkdir(parents=True)
        config = kube.kubeconfig(base / "kubeconfig")
        with running_operator(kube), AutoKubelet(kube, Kubelet(kube, api), "paddlecloud-default") as kubelet:
            session = Session(
                base, ["--backend", "kubernetes", "--kubeconfig", str(config), "--image", "python:3.12"]
            )
            try:
                yield session
                assert kube.list(P, "paddlecloud-default", group=G) == []  # killed: its TrainingJob is gone
                assert kubelet.errors == []
            finally:
                session.close()


@contextlib.contextmanager
def local_platform(base: Path) -> Iterator[Session]:
    session = Session(base, ["--node-cpu", "4", "--node-memory", "8Gi"])
    try:
        yield session
    finally:
        session.close()


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_the_same_cli_session_on_both_backends(backend: str, tmp_path: Path) -> None:
    package = tmp_path / "hello"
    package.mkdir()
    (package / "train.py").write_text(TRAIN)
    platform = kubernetes_platform if backend == "kubernetes" else local_platform
    with platform(tmp_path / "platform") as s:
        assert s.json("version")["server"]["backend"] == backend
        s.cli(
            "submit",
            str(package),
            "--name",
            "hello",
            "--entry",
            "python train.py",
            "--pservers",
            "1",
            "--trainers",
            "2",
            "--cpu",
            "250m",
            "--memory",
            "256Mi",
            "--pscpu",
            "250m",
            "--psmemory",
            "256Mi",
        )

        def running() -> bool:
            jobs = {j["name"]: j for j in s.json("get", "jobs")["items"]}
            return jobs["hello"]["phase"] == "Running"

        wait_for("the job to run", running, timeout=60)
        table = s.cli("get", "jobs")
        assert "hello" in table and "Running" in table
        workers = {w["name"]: w for w in s.json("get", "workers", "hello")["items"]}
        assert set(workers) == {"pserver-0", "trainer-0", "trainer-1"}
        assert {w["state"] for w in workers.values()} == {"Running"}
        assert all(w["node"] for w in workers.values())
        wait_for(
            "trainer-0's log", lambda: "hello from trainer-0" in s.cli("logs", "hello", "-w", "trainer-0")
        )
        every = wait_for(
            "every log", lambda: (out := s.cli("logs", "hello")).count("hello from") == 3 and out
        )
        assert "[pserver-0] hello from pserver-0" in every and "[trainer-1] hello from trainer-1" in every
        s.cli("kill", "hello", "--grace", "1")
        (job,) = [j for j in s.json("get", "jobs", "-a")["items"] if j["name"] == "hello"]
        assert job["phase"] == "Killed"
        assert {w["state"] for w in s.json("get", "workers", "hello")["items"]} <= {"Stopped", "Succeeded"}


def test_the_operator_command_runs_the_operator(
    kube: FakeKube, api: client.ApiClient, tmp_path: Path
) -> None:
    """``paddlecloud operator`` (what the Deployment runs, with a kubeconfig instead of the service
    account) reconciles a TrainingJob; it stops on SIGTERM."""
    from tests.kube.helpers import training_job

    client.ApiextensionsV1Api(api).create_custom_resource_definition(manifest())
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "ns1"}})
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    log = tmp_path / "operator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [PADDLECLOUD, "operator", "--kubeconfig", str(config), "--standalone", "--edl"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(G, "v1", "ns1", P, training_job("job"))
        wait_for("the operator's pod", lambda: kube.list("pods", "ns1"), timeout=60)
        assert "paddlecloud.org/cleanup" in kube.get(P, "job", "ns1", group=G)["metadata"]["finalizers"]
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-3000:]
