"""The launcher refuses to start a pserver whose port another process holds on its node, saying so
(issue 25: the pserver's program failed to bind while a squatter on its port answered for it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from paddlecloud.core.phases import WorkerReason


def _launch(
    tmp_path: Path, role: str, port: int, **more: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    env = {**os.environ, "PADDLECLOUD_ROLE": role, "PADDLECLOUD_WORKER": f"{role}-0",
           "PADDLECLOUD_CURRENT_ENDPOINT": f"127.0.0.1:{port}", **more}  # fmt: skip
    status = tmp_path / f"{role}.json"
    r = subprocess.run(
        [sys.executable, "-m", "paddlecloud.runtime.launcher", "--status", str(status),
         "--cwd", str(tmp_path), "echo the program ran"],
        capture_output=True, text=True, timeout=30, env=env, check=False,
    )  # fmt: skip
    return r, json.loads(status.read_text())


@pytest.mark.parametrize("role", ["pserver", "trainer"])
def test_a_pserver_port_held_on_the_node_is_refused_before_the_program(tmp_path: Path, role: str) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        r, status = _launch(tmp_path, role, port)
    if role == "pserver":
        assert r.returncode == 1 and status["exit_code"] == 1
        assert f"pserver-0's port {port} on {socket.gethostname()} cannot be bound" in r.stderr, r.stderr
        assert status["reason"] == WorkerReason.PORT_HELD and str(port) in status["message"], status
        assert "the program ran" not in r.stdout
    else:  # a trainer's endpoint port is not necessarily its to bind: not checked
        assert r.returncode == 0 and "the program ran" in r.stdout


def test_a_free_port_and_the_last_runs_time_wait_start_the_pserver(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its end lingers in TIME_WAIT
        client.close()
    r, status = _launch(tmp_path, "pserver", port)
    assert r.returncode == 0 and status["exit_code"] == 0 and "the program ran" in r.stdout, r.stderr


def test_the_listen_port_is_checked_for_any_server_and_a_free_one_is_said_beside_the_status(
    tmp_path: Path,
) -> None:
    """``PADDLECLOUD_LISTEN_PORT`` (the Slurm backend's servers: pservers and the rendezvous store,
    whose endpoint is not its own): held, the run ends ``PortHeld``; free, ``port-free`` beside the
    status tells the backend that a listener on it is the server's."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        held = squatter.getsockname()[1]
        r, status = _launch(tmp_path, "rendezvous", 1, PADDLECLOUD_LISTEN_PORT=str(held))
        assert r.returncode == 1 and status["reason"] == WorkerReason.PORT_HELD, (r.stderr, status)
        assert "the program ran" not in r.stdout and not (tmp_path / "port-free").exists()
    with socket.socket() as probe:  # a port nothing holds (closed again before the launch)
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    r, status = _launch(tmp_path, "rendezvous", 1, PADDLECLOUD_LISTEN_PORT=str(free))
    assert r.returncode == 0 and "the program ran" in r.stdout and "reason" not in status, r.stderr
    assert (tmp_path / "port-free").is_file()
