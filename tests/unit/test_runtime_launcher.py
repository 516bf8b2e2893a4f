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


def _launch(
    tmp_path: Path, role: str, port: int
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    env = {**os.environ, "PADDLECLOUD_ROLE": role, "PADDLECLOUD_WORKER": f"{role}-0",
           "PADDLECLOUD_CURRENT_ENDPOINT": f"127.0.0.1:{port}"}  # fmt: skip
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
        assert f"pserver-0's port {port} on 127.0.0.1 cannot be bound" in r.stderr, r.stderr
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
