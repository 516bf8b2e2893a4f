"""A job token reads its own job's package over ``GET /api/v1/pfs/file`` (what a Kubernetes pod's
fetch init container does, docs/kubernetes.md), and nothing else of PFS."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from task_helpers import Bench

from paddlecloud.server import create_app
from paddlecloud.store.tables import JobRow

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


def _package(bench: Bench, name: str) -> str:
    with bench.platform.ctx.session() as s:
        path = s.scalar(select(JobRow.package_id).where(JobRow.user == "alice", JobRow.name == name))
    assert path is not None
    return path


def test_a_job_token_reads_its_own_package_only(bench: Bench) -> None:
    alice = bench.user("alice")
    bench.submit(alice, "mine", {"items": ["a"]})
    bench.submit(alice, "other", {"items": ["b"]})
    token = bench.job_token("alice", "mine")
    http = TestClient(create_app(bench.platform, run_loop=False))
    auth = {"Authorization": f"Bearer {token}"}
    mine = http.get("/api/v1/pfs/file", params={"path": _package(bench, "mine")}, headers=auth)
    assert mine.status_code == 200 and mine.content[:2] == b"\x1f\x8b"  # the tar.gz
    for path in (_package(bench, "other"), "/pfs/local/home/alice/jobs/mine/output"):
        denied = http.get("/api/v1/pfs/file", params={"path": path}, headers=auth)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    stranger = http.get("/api/v1/pfs/file", params={"path": _package(bench, "mine")},
                        headers={"Authorization": "Bearer pcj_not-a-real-token"})  # fmt: skip
    assert stranger.status_code == 401
    http.close()
