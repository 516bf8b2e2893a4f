"""Two users on one real server (local backend, ``--isolation sandbox``): one user's job can neither
reach into another's nor take more than it asked for (issue 24).

- The attack that was found (2026-12-01, main at 6dfcd95): bob's job scanned its loopback from inside
  its sandbox, found the torch rendezvous store of alice's running elastic job and wrote a pickle
  under its key; alice's trainers unpickled it and ran bob's code with alice's token and data. Here
  bob's job scans every TCP port of its loopback and alice's endpoints while alice's elastic torch
  job trains: it reaches nothing (the job has a network namespace of its own), while it still
  reaches the platform's API through its run's socket; and alice's job trains to its accuracy.
- A worker over its ``--memory`` is OOM-killed and every view says so (``get workers``, ``describe``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .conftest import ROOT, Server, write_package
from .test_account_cli import User

pytestmark = pytest.mark.timeout(900)

SCAN = {
    "scan.py": """\
import json, os, socket, urllib.error, urllib.request
from pathlib import Path

from paddlecloud.runtime import apiclient

found = []
targets = [t for t in os.environ["TARGETS"].split(",") if t]
for target in targets:  # alice's workers, as the platform lists them, and the API's own port
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        found.append(target)
    except OSError:
        pass
for port in range(1, 65536):  # and every port of its loopback
    s = socket.socket()
    s.settimeout(0.5)
    if s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername():
        found.append(f"127.0.0.1:{port}")
    s.close()
api = os.environ["PADDLECLOUD_API"]
req = urllib.request.Request(f"{api}/api/v1/health")
try:
    with apiclient.opener().open(req, timeout=10) as r:
        status = r.status
except urllib.error.HTTPError as e:
    status = e.code
out = {"found": found, "api_status": status, "socket": os.environ.get("PADDLECLOUD_API_SOCKET", "")}
Path(os.environ["PADDLECLOUD_OUTPUT_DIR"], "scan.json").write_text(json.dumps(out))
"""
}

HOG = {"hog.py": "x = bytearray(256 * 2**20)  # 4 x its --memory\nprint('survived', flush=True)\n"}


def _bob(server: Server, tmp_path: Path) -> User:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    token = admin.json("admin", "create-user", "bob-isolation")["token"]
    bob = User(server, tmp_path / "bob" / "config")
    bob.login(token, "--user", "bob-isolation")
    return bob


def _wait(user: User, name: str, phases: set[str], timeout: float = 300) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, object] = user.json("describe", name)
        if job["phase"] in phases:
            return job
        assert time.monotonic() < deadline, f"{name} still {job['phase']}: {job['message']}"
        time.sleep(0.5)


def test_another_users_job_reaches_nothing_of_a_training_elastic_torch_job(
    server: Server, tmp_path: Path
) -> None:
    alice = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    bob = _bob(server, tmp_path)
    alice.cli(
        "submit", str(ROOT / "examples" / "torch_ddp"), "--name", "iso-elastic", "--framework", "torch",
        "--entry", "torchrun train.py", "--trainers", "2", "--min-instance", "1", "--max-instance", "2",
        "--cpu", "1", "--memory", "2Gi", "--env", "EPOCHS=60",
    )  # fmt: skip
    _wait(alice, "iso-elastic", {"Running"})
    deadline = time.monotonic() + 300
    while "started (master" not in alice.cli("logs", "iso-elastic").stdout:  # training has begun
        assert time.monotonic() < deadline, "the elastic torch job never started training"
        time.sleep(1)
    workers = alice.json("get", "workers", "iso-elastic")["items"]
    endpoints = [w["endpoint"] for w in workers if w["endpoint"]]
    assert any(w["role"] == "rendezvous" for w in workers) and len(endpoints) >= 3
    targets = ",".join([*endpoints, f"127.0.0.1:{server.port}"])
    pkg = write_package(tmp_path / "scan", SCAN)
    bob.cli("submit", str(pkg), "--name", "scan", "--entry", "python scan.py", "--cpu", "1",
            "--env", f"TARGETS={targets}")  # fmt: skip
    scan = _wait(bob, "scan", {"Succeeded", "Failed"})
    assert scan["phase"] == "Succeeded", bob.cli("logs", "scan").stdout
    result = json.loads((Path(str(scan["output_dir"])) / "scan.json").read_text())
    assert result["found"] == []  # not the rendezvous store, not a trainer, not the API's port, nothing
    assert result["api_status"] == 200  # the API, through its run's socket
    assert result["socket"] == "/run/paddlecloud/api.sock"
    done = _wait(alice, "iso-elastic", {"Succeeded", "Failed"}, timeout=600)
    assert done["phase"] == "Succeeded", alice.cli("logs", "iso-elastic").stdout[-3000:]
    accuracy = float(alice.cli("logs", "iso-elastic").stdout.split("final accuracy")[1].split()[0])
    assert accuracy >= 0.9


def test_an_oom_killed_worker_says_so_in_every_view(server: Server, tmp_path: Path) -> None:
    alice = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    pkg = write_package(tmp_path / "hog", HOG)
    alice.cli("submit", str(pkg), "--name", "iso-hog", "--entry", "python hog.py", "--memory", "64Mi")
    job = _wait(alice, "iso-hog", {"Failed", "Succeeded"})
    assert job["phase"] == "Failed" and job["reason"] == "OOMKilled"
    message = str(job["message"])
    assert "more memory than its limit 64Mi" in message and "submit --memory" in message
    table = alice.cli("get", "workers", "iso-hog").stdout
    assert "REASON" in table and "OOMKilled" in table
    (worker,) = alice.json("get", "workers", "iso-hog")["items"]
    assert worker["reason"] == "OOMKilled" and worker["exit_code"] == 137 and "64Mi" in worker["message"]
    described = alice.cli("describe", "iso-hog").stdout
    assert "OOMKilled" in described and "64Mi" in described
    assert "survived" not in alice.cli("logs", "iso-hog").stdout
