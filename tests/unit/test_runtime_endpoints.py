"""Endpoints resolved at run time (``runtime.endpoints``): for engines that place workers on hosts only
when they start them (Slurm). The platform writes ``@<worker>@`` hosts; each worker's launcher
publishes its own host in the job's shared directory and waits, bounded, for the ones it needs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlecloud.core.envcontract import Topology, WorkerContext, worker_env
from paddlecloud.runtime import contract as c
from paddlecloud.runtime import endpoints, env

pytestmark = pytest.mark.timeout(60)


def _free_ports(n: int) -> list[int]:
    """``n`` consecutive ports free now, above the ephemeral range (32768-60999 here): the pservers'
    launchers check theirs bindable (``PortHeld``), and a port in that range may be any outgoing
    connection's local port at that moment (it failed so once, beside the e2e lane)."""
    for base in range(61000, 65000, n):
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return list(range(base, base + n))
    raise RuntimeError("no free ports above 61000")


_P = _free_ports(5)
TOPOLOGY = Topology.at_run_time(_P[0:2], _P[2:4], gloo_port=_P[4])
HOSTS = {"pserver-0": "10.0.0.1", "pserver-1": "10.0.0.2", "trainer-0": "10.0.0.3", "trainer-1": "10.0.0.4"}
PORTS = {"pserver-0": _P[0], "pserver-1": _P[1], "trainer-0": _P[2], "trainer-1": _P[3]}


def contract(role: str, index: int, shared: Path, **kw: object) -> dict[str, str]:
    ctx = WorkerContext(
        "fit",
        "alice",
        "paddle-ps",
        role,
        index,
        TOPOLOGY,
        "/out",
        endpoints_dir=str(shared),
        **kw,  # type: ignore[arg-type]
    )
    return worker_env(ctx)


def test_placeholders_and_whom_each_worker_waits_for(tmp_path: Path) -> None:
    ps1 = contract("pserver", 1, tmp_path)
    assert ps1[c.PSERVER_ENDPOINTS] == f"@pserver-0@:{_P[0]},@pserver-1@:{_P[1]}"
    assert ps1["PADDLE_GLOO_HTTP_ENDPOINT"] == f"@pserver-0@:{_P[4]}"
    assert ps1[c.CURRENT_ENDPOINT] == f"@pserver-1@:{_P[1]}" and ps1[c.ENDPOINTS_DIR] == str(tmp_path)
    assert ps1[c.ENDPOINTS_WAIT] == "pserver-0"  # never the trainers: they start once pservers listen
    assert contract("trainer", 0, tmp_path)[c.ENDPOINTS_WAIT] == "pserver-0,pserver-1,trainer-1"
    elastic = contract("trainer", 0, tmp_path, trainer_range=(1, 4))
    assert elastic[c.ENDPOINTS_WAIT] == "pserver-0,pserver-1"  # trainers come and go


def test_pre_known_endpoints_have_no_run_time_part() -> None:
    ctx = WorkerContext("fit", "alice", "none", "trainer", 0, Topology([], ["127.0.0.1:5000"]), "/out")
    got = worker_env(ctx)
    assert c.ENDPOINTS_DIR not in got and c.ENDPOINTS_WAIT not in got
    assert endpoints.resolve(got) == got


def launch(worker_env: dict[str, str], host: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    """The real per-worker launcher with ``worker_env``; its program prints the resolved contract."""
    program = (
        "import json, os; from paddlecloud.runtime import env; e = env();"
        "print(json.dumps({'ps': os.environ['PADDLE_PSERVERS_IP_PORT_LIST'], 'me': e.current_endpoint,"
        " 'init': os.environ['PADDLE_INIT_PSERVERS'], 'trainers': list(e.trainer_endpoints)}))"
    )
    full = {**os.environ, **worker_env, c.PUBLISH_HOST: host}
    status = tmp_path / f"{name}.status"
    args = [
        sys.executable,
        "-m",
        "paddlecloud.runtime.launcher",
        "--status",
        str(status),
        "--cwd",
        str(tmp_path),
    ]
    out = open(tmp_path / f"{name}.out", "wb")  # noqa: SIM115 - closed by the process's end
    return subprocess.Popen([*args, f'{sys.executable} -c "{program}"'], env=full, stdout=out, stderr=out)


def test_workers_publish_their_hosts_and_start_with_resolved_endpoints(tmp_path: Path) -> None:
    shared = tmp_path / "endpoints"
    names = [("trainer", 0), ("trainer", 1), ("pserver", 0), ("pserver", 1)]  # trainers first: they wait
    procs = {}
    for role, i in names:
        name = f"{role}-{i}"
        procs[name] = launch(contract(role, i, shared), HOSTS[name], tmp_path, name)
        time.sleep(0.3)
    for name, p in procs.items():
        assert p.wait(timeout=30) == 0, (tmp_path / f"{name}.out").read_text()
    for name in procs:
        got = json.loads((tmp_path / f"{name}.out").read_text())
        assert got["ps"] == f"10.0.0.1:{_P[0]},10.0.0.2:{_P[1]}"
        assert got["init"] == "10.0.0.1,10.0.0.2"
        assert got["me"] == f"{HOSTS[name]}:{PORTS[name]}"
        if name.startswith("trainer"):
            assert got["trainers"] == [f"10.0.0.3:{_P[2]}", f"10.0.0.4:{_P[3]}"]
    assert endpoints.published(str(shared)) == HOSTS


def test_a_host_never_published_fails_the_worker_in_bounded_time(tmp_path: Path) -> None:
    shared = tmp_path / "endpoints"
    alone = {**contract("pserver", 1, shared), c.ENDPOINTS_TIMEOUT: "0.5"}
    started = time.monotonic()
    p = launch(alone, "10.0.0.2", tmp_path, "pserver-1")
    assert p.wait(timeout=20) == 1
    assert time.monotonic() - started < 10
    out = (tmp_path / "pserver-1.out").read_text()
    assert "pserver-1: the hosts of pserver-0 were not published" in out and "within 0.5 s" in out
    assert json.loads((tmp_path / "pserver-1.status").read_text())["exit_code"] == 1
    assert endpoints.published(str(shared)) == {"pserver-1": "10.0.0.2"}


def test_the_env_reader_resolves_placeholders_itself(tmp_path: Path) -> None:
    endpoints.publish(str(tmp_path), "pserver-0", "10.0.0.1")
    endpoints.publish(str(tmp_path), "pserver-1", "10.0.0.2")
    raw = {**contract("pserver", 0, tmp_path), c.PUBLISH_HOST: "10.0.0.1"}
    got = env(raw)
    assert got.pserver_endpoints == (f"10.0.0.1:{_P[0]}", f"10.0.0.2:{_P[1]}")
    assert got.current_endpoint == f"10.0.0.1:{_P[0]}"
    assert got.trainer_endpoints == (f"trainer-0:{_P[2]}", f"trainer-1:{_P[3]}")  # a pserver waits for none
