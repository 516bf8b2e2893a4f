"""Server-side TLS: ``paddlecloud up --tls-cert --tls-key [--tls-ca]`` serves https only; the client
config it writes trusts the certificate; another user logs in with ``--ca``; a job's trainer leases
its tasks over https, trusting the server through ``PADDLECLOUD_API_CA``.

Certificates are made in the test (``certs.py``): self-signed, and signed by a test CA.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from paddlecloud.runtime.taskmaster import TaskMaster, TaskMasterError

from .certs import ca_signed, self_signed
from .conftest import PADDLECLOUD, ROOT, Server, write_package

pytestmark = pytest.mark.e2e

WORK = """
import os
from paddlecloud.runtime import tasks

print("api", os.environ["PADDLECLOUD_API"], "ca", os.environ.get("PADDLECLOUD_API_CA"), flush=True)
for task in tasks():
    print("did", task.path, flush=True)
"""


def tls_server(tmp_path: Path, cert: Path, key: Path, ca: Path | None = None) -> Server:
    (tmp_path / "home").mkdir()
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home", ca=ca or cert)
    srv.up_args = [*srv.up_args, "--tls-cert", str(cert), "--tls-key", str(key)]
    if ca is not None:
        srv.up_args += ["--tls-ca", str(ca)]
    return srv


@pytest.fixture
def self_signed_server(tmp_path: Path) -> Iterator[Server]:
    cert, key = self_signed(tmp_path)
    srv = tls_server(tmp_path, cert, key)
    srv.start()
    yield srv
    for job in srv.json("get", "jobs")["items"]:
        srv.cli("kill", job["name"], "--grace", "1", check=False)
    srv.stop()


def local_datacenter(srv: Server) -> dict[str, str]:
    data = yaml.safe_load(Path(srv.env["PADDLECLOUD_CONFIG"]).read_text())
    entry: dict[str, str] = data["datacenters"]["local"]
    return entry


def test_up_serves_https_to_the_cli_a_login_and_a_jobs_task_master(
    self_signed_server: Server, tmp_path: Path
) -> None:
    srv = self_signed_server
    local = local_datacenter(srv)
    assert (local["endpoint"], local["ca"]) == (srv.url, str(srv.ca)) and srv.url.startswith("https://")
    with pytest.raises(httpx.HTTPError):  # plain http is not served
        httpx.get(f"http://127.0.0.1:{srv.port}/api/v1/health", timeout=5)
    assert srv.json("get", "jobs")["items"] == []  # the CLI through the config `up` wrote

    # another client logs in with --ca; without it the certificate is not trusted
    other = {**srv.env, "PADDLECLOUD_CONFIG": str(tmp_path / "other.yaml")}

    def login(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [PADDLECLOUD, "login", "--endpoint", srv.url, "--token", local["token"], *extra]
        return subprocess.run(cmd, capture_output=True, text=True, env=other, timeout=60, cwd=ROOT)

    refused = login()
    assert refused.returncode == 3 and "Traceback" not in refused.stderr  # 3: the server cannot be reached
    assert "TLS handshake" in refused.stderr and "--ca" in refused.stderr
    assert login("--ca", str(srv.ca)).returncode == 0
    whoami = subprocess.run([PADDLECLOUD, "get", "jobs", "-o", "json"], capture_output=True, text=True,
                            env=other, timeout=60, cwd=ROOT, check=True)  # fmt: skip
    assert json.loads(whoami.stdout)["items"] == []

    # a client on another host (no same-host fast path) moves chunks on the data port, over TLS too
    big = os.urandom(40 << 20)
    (tmp_path / "big.bin").write_bytes(big)
    far = {**other, "PADDLECLOUD_PFS_LOCAL": "0"}
    for args in ([str(tmp_path / "big.bin"), "pfs:big.bin"], ["pfs:big.bin", str(tmp_path / "back.bin")]):
        r = subprocess.run([PADDLECLOUD, "pfs", "cp", "-q", *args], capture_output=True, text=True, env=far,
                           timeout=120, cwd=ROOT, check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "back.bin").read_bytes() == big
    assert "PFS data port: " in srv.log_path.read_text()
    metrics = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {local['token']}"},
                        verify=ssl.create_default_context(cafile=str(srv.ca)), timeout=10).text  # fmt: skip
    moved = [ln for ln in metrics.splitlines() if ln.startswith("paddlecloud_pfs_data_port_bytes_total{")]
    assert sorted(float(ln.rsplit(" ", 1)[1]) for ln in moved) == [len(big), len(big)], moved

    # a job's trainer leases its tasks over https, trusting the server's certificate
    pkg = write_package(tmp_path / "tls-job", {"work.py": WORK})
    srv.cli("submit", str(pkg), "--name", "tls-job", "--entry", "python work.py", "--cpu", "100m",
            "--task", "a", "--task", "b", "--task", "c")  # fmt: skip
    job = srv.wait_phase("tls-job", {"Succeeded", "Failed"}, timeout=120)
    log = srv.cli("logs", "tls-job").stdout
    assert job["phase"] == "Succeeded", (job["message"], log)
    assert f"api {srv.url} ca {srv.ca}" in log
    assert sorted(line for line in log.splitlines() if line.startswith("did")) == ["did a", "did b", "did c"]
    tasks = srv.json("get", "tasks", "tls-job")
    assert [t["state"] for t in tasks["items"]] == ["done"] * 3


def test_a_task_master_client_that_does_not_trust_the_server_says_so_at_once(
    self_signed_server: Server, tmp_path: Path
) -> None:
    other_ca, _, _ = ca_signed(tmp_path)
    master = TaskMaster(api=self_signed_server.url, token="pcj_x", job="j", ca=str(other_ca), retry_for=30)
    started = time.monotonic()
    with pytest.raises(TaskMasterError) as err:
        master.lease()
    assert time.monotonic() - started < 10  # no retrying for retry_for seconds
    assert "cannot be verified" in str(err.value) and "PADDLECLOUD_API_CA" in str(err.value)


def test_a_ca_signed_certificate_with_its_ca(tmp_path: Path) -> None:
    ca, cert, key = ca_signed(tmp_path)
    srv = tls_server(tmp_path, cert, key, ca=ca)
    srv.start()
    try:
        assert local_datacenter(srv)["ca"] == str(ca)
        assert srv.json("get", "jobs")["items"] == []
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "{cert}", "--tls-key", "{other_key}"], "cannot use"),
        (["--tls-ca", "{cert}"], "--tls-ca needs --tls-cert and --tls-key"),
    ],
    ids=["cert-alone", "wrong-key", "ca-alone"],
)
def test_bad_tls_options_are_refused_before_anything_starts(
    tmp_path: Path, args: list[str], words: str
) -> None:
    cert, _ = self_signed(tmp_path)
    (tmp_path / "other").mkdir()
    _, other_key = self_signed(tmp_path / "other")
    given = [a.format(cert=cert, other_key=other_key) for a in args]
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    cmd = [PADDLECLOUD, "up", "--data-dir", str(tmp_path / "data"), *given]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()
