"""SampleSets end to end: the real ``paddlecloud up`` (local backend, two emulated nodes, sandboxed
workers), the real CLI and real JuiceFS mounts over FUSE.

create -> Ready by itself; a job submitted with ``--sampleset`` reads every file with the right
content on each node; clear empties the caches; rmr removes a path; another user can neither see
it nor submit with it (404); delete unmounts everything (no JuiceFS mount left under the data dir,
as ``mount`` lists them); a server without FUSE fails the SampleSet quickly with a clear reason.
Every mount is unmounted in teardown, whatever happens (``juicefs_fixtures.unmounted_after``).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.conftest import PADDLECLOUD, Server, write_package
from tests.e2e.juicefs_fixtures import READER, digests, make_tree, unmounted_after

pytestmark = pytest.mark.timeout(600)


def juicefs_mounts(top: Path) -> list[str]:
    """The JuiceFS mounts below ``top`` as ``mount`` lists them."""
    out = subprocess.run(["mount"], capture_output=True, text=True, check=True, timeout=30).stdout
    return [ln for ln in out.splitlines() if "juicefs" in ln.lower() and str(top) in ln]


def wait_idle(srv: Server, name: str, timeout: float = 240) -> dict[str, Any]:
    """The SampleSet once no SampleJob of it is Pending or Running."""
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = srv.json("describe", "sampleset", name)
        if all(j["phase"] in ("Succeeded", "Failed") for j in view["jobs"]) and view["phase"] != "Syncing":
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.5)


class _Bob:
    """The CLI as another user (a token of their own, no client config)."""

    def __init__(self, srv: Server, token: str) -> None:
        self.srv, self.token = srv, token

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = self.srv.env | {"PADDLECLOUD_ENDPOINT": self.srv.url, "PADDLECLOUD_TOKEN": self.token}
        env["PADDLECLOUD_CONFIG"] = str(self.srv.home / "bob-none.yaml")
        return subprocess.run([PADDLECLOUD, *args], capture_output=True, text=True, env=env, timeout=120,
                              check=False)  # fmt: skip


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home",
                 up_args=["--nodes", "2", "--node-cpu", "4", "--node-memory", "8Gi"])  # fmt: skip
    srv.home.mkdir()
    with unmounted_after(tmp_path):
        srv.start()
        try:
            yield srv
        finally:
            for job in srv.json("get", "jobs")["items"]:
                srv.cli("kill", job["name"], "--grace", "1", check=False)
            srv.stop()  # the backend unmounts every SampleSet on shutdown
    assert juicefs_mounts(tmp_path) == []


def test_sampleset_lifecycle_with_a_job_reading_it(two_nodes: Server, tmp_path: Path) -> None:
    srv = two_nodes
    want = make_tree(tmp_path / "src", small=24, big=1 << 20)
    srv.cli("pfs", "cp", "-r", str(tmp_path / "src"), "pfs:data")

    r = srv.cli("sampleset", "create", "mnist", "--source", "pfs:data", "--wait", "--timeout", "240")
    assert "sampleset mnist is Ready" in r.stdout, r.stdout
    (view,) = srv.json("get", "samplesets")["items"]
    total = sum((tmp_path / "src" / rel).stat().st_size for rel in want)
    assert (view["name"], view["phase"], view["files"], view["bytes"]) == ("mnist", "Ready", len(want), total)
    assert [n["node"] for n in view["nodes"]] == ["node-0", "node-1"]
    assert all(n["mounted"] and n["cached_bytes"] >= 0.9 * total for n in view["nodes"]), view["nodes"]
    assert view["cached_bytes"] == sum(n["cached_bytes"] for n in view["nodes"])
    assert srv.json("pfs", "du")["samplesets"] == view["cached_bytes"]  # counted in the quota
    assert len(juicefs_mounts(srv.data_dir)) == 3  # the admin mount and one per node

    # a job on both nodes reads every file with the right content, through its node's mount
    pkg = write_package(tmp_path / "reader", {"read.py": READER})
    srv.cli("submit", str(pkg), "--name", "reader", "--entry", "python read.py", "--trainers", "2",
            "--cpu", "3", "--sampleset", "mnist")  # fmt: skip
    job = srv.wait_phase("reader", {"Succeeded", "Failed"}, timeout=240)
    assert job["phase"] == "Succeeded", job["message"]
    assert {w["node"] for w in job["workers"]} == {"node-0", "node-1"}
    srv.cli("pfs", "cp", "-r", "pfs:jobs/reader/output", str(tmp_path / "got"))
    for worker in ("trainer-0", "trainer-1"):
        assert json.loads((tmp_path / "got" / f"{worker}.json").read_text())["files"] == want

    # cache-aware placement: both nodes free, the cache only on node-1 (first fit would take node-0)
    srv.cli("sampleset", "create", "near", "--source", "pfs:data", "--node", "node-1", "--wait",
            "--timeout", "240")  # fmt: skip
    near = srv.json("describe", "sampleset", "near")
    cached = {n["node"]: n["cached_bytes"] for n in near["nodes"]}
    assert cached.get("node-1", 0) >= 0.9 * total and cached.get("node-0", 0) == 0, near
    srv.cli("submit", str(pkg), "--name", "near", "--entry", "python read.py", "--cpu", "1",
            "--sampleset", "near")  # fmt: skip
    job = srv.wait_phase("near", {"Succeeded", "Failed"}, timeout=240)
    assert job["phase"] == "Succeeded", job["message"]
    assert [w["node"] for w in job["workers"]] == ["node-1"]
    admitted = [e["message"] for e in srv.job("near")["events"] if e["reason"] == "Admitted"]
    assert admitted and "node-1 (holds the SampleSet cache)" in admitted[0], admitted
    srv.cli("sampleset", "delete", "near")

    # clear empties every node's cache; the data stays
    srv.cli("sampleset", "clear", "mnist")
    view = wait_idle(srv, "mnist")
    assert view["jobs"][0]["kind"] == "clear" and view["jobs"][0]["phase"] == "Succeeded", view["jobs"][0]
    assert view["cached_bytes"] == 0 and all(n["cached_bytes"] == 0 for n in view["nodes"])
    assert view["files"] == len(want)

    # the server stops (SIGTERM, as `down` sends it): with no job running it leaves no mount and no
    # juicefs client behind; started again on the same data dir, it mounts the set again
    srv.stop()
    assert juicefs_mounts(srv.data_dir) == []
    assert not [p for p in psutil.process_iter(["cmdline"]) if "juicefs" in " ".join(p.info["cmdline"] or [])
                and str(srv.data_dir) in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    srv.start()
    deadline = time.monotonic() + 120
    while len(juicefs_mounts(srv.data_dir)) < 3:  # the SampleSet loop's ensure mounts it again
        assert time.monotonic() < deadline, juicefs_mounts(srv.data_dir)
        time.sleep(0.5)
    view = wait_idle(srv, "mnist")
    assert view["phase"] == "Ready" and view["files"] == len(want), view

    # rmr removes a path from the volume, and the nodes' mounts no longer show it
    srv.cli("sampleset", "rmr", "mnist", "part-0")
    view = wait_idle(srv, "mnist")
    assert view["jobs"][0]["phase"] == "Succeeded", view["jobs"][0]
    left = {k: v for k, v in want.items() if not k.startswith("part-0/")}
    assert view["files"] == len(left)
    node_mount = srv.data_dir / "cluster" / "samplesets" / "ss-1" / "nodes" / "node-0" / "mnt"
    assert digests(node_mount) == left

    # another user: not found on get, jobs, delete and submit --sampleset
    bob = _Bob(srv, srv.json("admin", "create-user", "bob")["token"])
    steal = ["submit", str(pkg), "--name", "steal", "--entry", "python read.py", "--sampleset", "mnist"]
    for args in (["describe", "sampleset", "mnist"], ["sampleset", "jobs", "mnist"],
                 ["sampleset", "delete", "mnist"], steal):  # fmt: skip
        r = bob.cli(*args)
        assert r.returncode == 1 and "SampleSet 'mnist' not found" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert json.loads(bob.cli("get", "samplesets", "-o", "json").stdout)["items"] == []

    # delete: every mount gone, the name free again
    srv.cli("sampleset", "delete", "mnist")
    deadline = time.monotonic() + 120
    while srv.json("get", "samplesets")["items"]:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert juicefs_mounts(srv.data_dir) == []
    assert not (srv.data_dir / "cluster" / "samplesets" / "ss-1").exists()


class _NoFuse(Server):
    @property
    def env(self) -> dict[str, str]:
        return super().env | {"PADDLECLOUD_FUSE_DEVICE": "/nonexistent"}


def test_without_fuse_a_sampleset_fails_fast_with_the_reason(tmp_path: Path) -> None:
    srv = _NoFuse(data_dir=tmp_path / "data", home=tmp_path / "home", up_args=["--nodes", "1"])
    srv.home.mkdir()
    make_tree(tmp_path / "src", small=2, big=1024)
    with unmounted_after(tmp_path):
        srv.start()
        try:
            srv.cli("pfs", "cp", "-r", str(tmp_path / "src"), "pfs:data")
            started = time.monotonic()
            r = srv.cli("sampleset", "create", "s", "--source", "pfs:data", "--wait", "--timeout", "60",
                        check=False)  # fmt: skip
            took = time.monotonic() - started
            assert r.returncode == 1, (r.stdout, r.stderr)
            assert "Failed" in r.stdout and "/nonexistent" in r.stdout, r.stdout
            assert took < 30, f"{took:.1f} s to fail"
            view = srv.json("describe", "sampleset", "s")
            assert view["phase"] == "Failed" and "cannot mount SampleSets" in view["message"]
            assert all(j["phase"] == "Failed" for j in view["jobs"])
        finally:
            srv.stop()
    assert juicefs_mounts(tmp_path) == []
