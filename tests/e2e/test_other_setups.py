"""The platform on other set-ups: PostgreSQL instead of SQLite; virtual nodes with GPUs; Prometheus
scraping with a scrape-only token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Server, write_package
from .postgres import postgres_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own (its options are set by the test before ``start``)."""
    (tmp_path / "home").mkdir()
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home")
    yield srv
    if srv.proc is not None:
        for job in srv.json("get", "jobs")["items"]:
            srv.cli("kill", job["name"], "--grace", "1", check=False)
    srv.stop()


def test_postgresql_database(own_server: Server, tmp_path: Path) -> None:
    with postgres_cluster() as url:
        own_server.up_args = ["--database", url]
        own_server.start()
        pkg = write_package(tmp_path / "pkg", {"main.py": "print('stored in postgres')\n"})
        r = own_server.cli("submit", str(pkg), "--name", "pg-job", "--entry", "python main.py",
                           "--trainers", "2", "--cpu", "100m", "--wait")  # fmt: skip
        assert "[trainer-1] stored in postgres" in r.stdout
        dup = own_server.cli("submit", str(pkg), "--name", "pg-job", "--entry", "python main.py", check=False)
        assert dup.returncode == 1 and "already exists" in dup.stderr
        # the state survives a restart of the server: it is in PostgreSQL, not in the data dir
        own_server.stop()
        (own_server.data_dir / "paddlecloud.db").unlink(missing_ok=True)
        own_server.start()
        (job,) = own_server.json("get", "jobs", "-a")["items"]
        assert job["name"] == "pg-job" and job["phase"] == "Succeeded"
        assert not (own_server.data_dir / "paddlecloud.db").exists()
        own_server.stop()


def test_gpus_are_assigned_per_trainer_and_never_shared(own_server: Server, tmp_path: Path) -> None:
    own_server.up_args = ["--nodes", "2", "--node-cpu", "8", "--node-memory", "16Gi", "--node-gpu", "2"]
    own_server.start()
    code = (
        "import os, time\nprint('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\ntime.sleep(30)\n"
    )
    pkg = write_package(tmp_path / "gpu", {"main.py": code})
    own_server.cli("submit", str(pkg), "--name", "two-gpu", "--entry", "python main.py", "--trainers", "2",
                   "--gpu", "2", "--cpu", "100m")  # fmt: skip
    own_server.wait_phase("two-gpu", {"Running"}, timeout=30)
    workers = own_server.json("get", "workers", "two-gpu")["items"]
    assert len({w["node"] for w in workers}) == 2  # 2 GPUs per node: one trainer per node

    own_server.cli("submit", str(pkg), "--name", "cpu-only", "--entry", "python main.py", "--cpu", "100m")
    own_server.cli("submit", str(pkg), "--name", "one-more-gpu", "--entry", "python main.py", "--gpu", "1",
                   "--cpu", "100m")  # fmt: skip
    own_server.wait_phase("cpu-only", {"Running"}, timeout=30)
    waiting = own_server.wait_phase("one-more-gpu", {"Queued"})
    waits = ("InsufficientResources", "LowerPriority")  # the elastic policy: held by jobs ahead of it
    for _ in range(50):
        if waiting["reason"] in waits:
            break
        waiting = own_server.job("one-more-gpu")
    assert waiting["reason"] in waits and "gpu" in waiting["message"], waiting

    logs = own_server.cli("logs", "two-gpu").stdout + own_server.cli("logs", "cpu-only").stdout
    seen = sorted(line.split("gpus=")[1] for line in logs.splitlines() if "gpus=" in line)
    assert seen == ["", "0,1", "2,3"]  # the CPU-only job sees no GPU at all

    own_server.cli("kill", "two-gpu", "--grace", "1")  # frees 4 GPUs: the waiting job starts
    own_server.wait_phase("one-more-gpu", {"Running"}, timeout=30)


def test_prometheus_scrapes_with_the_scrape_token_of_up(own_server: Server, tmp_path: Path) -> None:
    """``up --metrics-token-file``: that token reads /metrics, and nothing else; no token reads nothing."""
    scrape = "0123456789abcdef0123456789abcdef"
    (tmp_path / "metrics.token").write_text(scrape + "\n")
    own_server.up_args = [*own_server.up_args, "--metrics-token-file", str(tmp_path / "metrics.token")]
    own_server.start()
    bearer = {"Authorization": f"Bearer {scrape}"}
    assert httpx.get(f"{own_server.url}/metrics").status_code == 401
    assert httpx.get(f"{own_server.url}/api/v1/jobs", headers=bearer).status_code == 401
    r = httpx.get(f"{own_server.url}/metrics", headers=bearer)
    assert r.status_code == 200
    names = {f.name for f in text_string_to_metric_families(r.text)}
    assert {
        "paddlecloud_jobs",
        "paddlecloud_http_request_duration_seconds",
        "paddlecloud_node_capacity",
    } <= names
