"""``GET /metrics`` after a real job: the platform's counters, histograms and gauges have the values
the job's life implies (parsed with prometheus_client's own parser), who may read them, and one
registry per platform.

The real job runs on the in-process platform (local backend, real processes in their sandbox) with
a manual clock, so the queueing delay is exact; its trainer leases its tasks over a real HTTP server
(uvicorn on loopback), dies holding its first task (restarted by its policy: the task is handed on),
then does all three. A second job waits behind it and is killed.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from prometheus_client.parser import text_string_to_metric_families
from starlette.staticfiles import StaticFiles
from task_helpers import Bench, HttpServer, free_port

from paddlecloud.api.errors import Conflict
from paddlecloud.api.models import JobDetail
from paddlecloud.client import Client
from paddlecloud.controller import MetricsAccess, Platform
from paddlecloud.controller.model.metrics import LEASE_OUTCOMES, PlatformMetrics
from paddlecloud.core.clock import ManualClock
from paddlecloud.core.phases import JobPhase, WorkerState
from paddlecloud.server import create_app
from paddlecloud.server.metrics import RequestMetricsMiddleware

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/paddlecloud.json"

WORKER = {
    "w.py": """\
import os, time
from pathlib import Path
from paddlecloud.runtime import tasks

run = int(os.environ["PADDLECLOUD_RESTART"])
go = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"]) / "go"
for task in tasks():
    if run == 0:
        os._exit(3)  # dies holding its first task: the platform hands it on
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("done", task.path, flush=True)
"""
}
PAYLOAD = bytes(range(256)) * 40  # 10,240 bytes


Samples = list[tuple[str, dict[str, str], float]]


def parse(text: str) -> Samples:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there is none)."""
    return sum(v for n, ls, v in samples if n == name and labels.items() <= ls.items())


class Driver:
    """Ticks the loop and reads jobs through the SDK, counting what it does (the metrics must agree)."""

    def __init__(self, platform: Platform, client: Client) -> None:
        self.platform, self.client = platform, client
        self.ticks = self.gets = 0

    def tick(self) -> None:
        self.platform.reconciler.tick()
        self.ticks += 1

    def job(self, name: str) -> JobDetail:
        self.gets += 1
        return self.client.job(name)

    def until(self, name: str, check: Callable[[JobDetail], bool], timeout: float = 40.0) -> JobDetail:
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            job = self.job(name)
            if check(job):
                return job
            assert time.monotonic() < deadline, f"{name}: {job.phase} {job.reason} {job.message}"
            time.sleep(0.05)


def scrape(http: httpx.Client, token: str) -> Samples:
    r = http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)


def _running_again(job: JobDetail) -> bool:
    t = next((w for w in job.workers if w.name == "trainer-0"), None)
    return (
        job.phase == JobPhase.RUNNING and t is not None and t.restarts == 1 and t.state == WorkerState.RUNNING
    )


def test_metrics_after_a_real_job(
    platform_factory: Callable[..., Platform], make_package: Callable[[dict[str, str]], Path], tmp_path: Path
) -> None:
    clock = ManualClock()
    port = free_port()
    platform = platform_factory(clock=clock, api_url=f"http://127.0.0.1:{port}")
    server = HttpServer(platform, port).start()  # the trainer's task master
    try:
        _run_and_check(platform, clock, make_package, tmp_path)
    finally:
        server.stop()


def _run_and_check(
    platform: Platform, clock: ManualClock, make_package: Callable[[dict[str, str]], Path], tmp_path: Path
) -> None:
    http = TestClient(create_app(platform, run_loop=False))
    admin = platform.ensure_user("root", admin=True)
    alice = Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=http)
    drive = Driver(platform, alice)
    package = make_package(WORKER)
    flaky = {
        "name": "flaky", "entry": "python w.py", "max_restarts": 2, "restart_backoff_s": 0.0,
        "trainers": {"count": 1, "cpu": "500m", "restart": "OnFailure"}, "tasks": {"items": ["a", "b", "c"]},
    }  # fmt: skip
    alice.submit(flaky, package_dir=package)
    clock.advance(7.0)  # the queueing delay, exactly
    drive.tick()
    assert drive.job("flaky").phase == JobPhase.STARTING
    alice.submit({"name": "big", "entry": "python w.py", "trainers": {"cpu": "4"}}, package_dir=package)
    drive.tick()
    big = drive.job("big")
    assert big.phase == JobPhase.QUEUED and big.reason

    running = drive.until("flaky", _running_again)  # run 0 died holding task a, run 1 is at work
    m = scrape(http, admin)
    assert value(m, "paddlecloud_queue_length") == 1
    assert value(m, "paddlecloud_jobs", user="alice", phase="Running") == 1
    assert value(m, "paddlecloud_jobs", user="alice", phase="Queued") == 1
    assert value(m, "paddlecloud_job_trainers", user="alice", job="flaky") == 1
    assert value(m, "paddlecloud_job_trainers_running", user="alice", job="flaky") == 1
    assert value(m, "paddlecloud_node_capacity", node="node-0", resource="cpu") == 4.0
    assert value(m, "paddlecloud_node_allocated", node="node-0", resource="cpu") == 0.5
    assert value(m, "paddlecloud_node_allocated", node="node-0", resource="memory") > 0
    assert value(m, "paddlecloud_worker_restarts_total", user="alice") == 1
    assert value(m, "paddlecloud_task_leases_total", outcome="released") == 1  # task a, handed on

    alice.kill("big")  # before flaky ends, or it would be admitted
    (Path(running.output_dir) / "go").touch()
    done = drive.until("flaky", lambda j: j.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED))
    assert done.phase == JobPhase.SUCCEEDED, done.message

    # PFS: one upload and one download of a known size, seen as the difference they make
    before = scrape(http, admin)
    (tmp_path / "data.bin").write_bytes(PAYLOAD)
    alice.pfs.upload_file(tmp_path / "data.bin", "pfs:data.bin")
    alice.pfs.download_file("pfs:data.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == PAYLOAD
    after = scrape(http, admin)
    for name in ("paddlecloud_pfs_received_bytes_total", "paddlecloud_pfs_sent_bytes_total"):
        assert value(after, name) - value(before, name) == len(PAYLOAD), name

    assert (
        http.get("/api/v1/jobs/no-such-job", headers={"Authorization": f"Bearer {admin}"}).status_code == 404
    )
    assert http.get("/api/v1/no/such/route").status_code == 404
    m = scrape(http, admin)

    # jobs by phase and user, the queue
    assert value(m, "paddlecloud_jobs", user="alice", phase="Succeeded") == 1
    assert value(m, "paddlecloud_jobs", user="alice", phase="Killed") == 1
    assert value(m, "paddlecloud_jobs", user="alice") == 2
    assert value(m, "paddlecloud_queue_length") == 0
    assert value(m, "paddlecloud_job_trainers") == 0  # no job runs any more
    # queueing delay: one first admission, 7 s after its submit (big never got one)
    assert value(m, "paddlecloud_queueing_delay_seconds_count") == 1
    assert value(m, "paddlecloud_queueing_delay_seconds_sum") == 7.0
    assert value(m, "paddlecloud_queueing_delay_seconds_bucket", le="5.0") == 0
    assert value(m, "paddlecloud_queueing_delay_seconds_bucket", le="15.0") == 1
    # decisions: flaky admitted once, big told to wait once (its reason did not change)
    assert value(m, "paddlecloud_scheduler_decisions_total", kind="admit") == 1
    assert value(m, "paddlecloud_scheduler_decisions_total", kind="wait") == 1
    assert value(m, "paddlecloud_scheduler_decisions_total", kind="wait", reason=big.reason) == 1
    assert value(m, "paddlecloud_scheduler_decisions_total", kind="preempt") == 0
    # every tick is one cycle; the policy ran in the cycles that had something to schedule
    assert value(m, "paddlecloud_reconcile_cycle_seconds_count") == drive.ticks
    assert 2 <= value(m, "paddlecloud_scheduling_round_seconds_count") <= drive.ticks
    # the restart, and the leases: a granted, died with it (released), then a, b, c granted and done
    assert value(m, "paddlecloud_worker_restarts_total", user="alice") == 1
    leases = {
        o: value(m, "paddlecloud_task_leases_total", outcome=o) for o in ("granted", "released", "done")
    }
    assert leases == {"granted": 4, "released": 1, "done": 3}
    for outcome in ("failed", "expired", "lost"):
        assert value(m, "paddlecloud_task_leases_total", outcome=outcome) == 0
    # API latency by route template (never the raw path) and status
    latency = "paddlecloud_http_request_duration_seconds_count"
    assert value(m, latency, method="GET", route="/api/v1/jobs/{name}", status="200") == drive.gets
    assert value(m, latency, method="GET", route="/api/v1/jobs/{name}", status="404") == 1
    assert value(m, latency, method="POST", route="/api/v1/jobs", status="201") == 2
    assert value(m, latency, method="POST", route="/api/v1/jobs/{name}/tasks/lease", status="200") >= 5
    assert value(m, latency, method="POST", route="/api/v1/jobs/{name}/tasks/{index}/done", status="200") == 3
    assert value(m, latency, method="PUT", route="/api/v1/pfs/file", status="201") >= 3  # 2 packages, data
    assert value(m, latency, method="GET", route="/api/v1/pfs/file", status="200") == 1
    assert value(m, latency, route="<unmatched>", status="404") == 1
    assert value(m, latency, method="GET", route="/metrics", status="200") == 3
    routes = {ls["route"] for n, ls, _ in m if n == latency}
    assert not [r for r in routes if "flaky" in r or "no-such-job" in r], routes
    assert value(m, "paddlecloud_http_request_duration_seconds_sum", route="/api/v1/jobs/{name}") > 0
    # the server process itself
    assert value(m, "paddlecloud_process_resident_memory_bytes") > 0


def test_every_lease_outcome_is_counted(tmp_path: Path) -> None:
    """The outcomes the real job above does not meet: failed, expired, lost (manual clock)."""
    bench = Bench(tmp_path)
    try:
        bench.submit(bench.user("alice"), "tasks", {"items": ["a", "b"], "lease_timeout": 30})
        w0, w1 = bench.worker("alice", "tasks"), bench.worker("alice", "tasks")
        w0.tasks.lease("tasks", "lease-000001", "trainer-0")  # a
        w0.tasks.fail("tasks", 0, "lease-000001", "bad shard")  # a: todo again
        w0.tasks.lease("tasks", "lease-000002", "trainer-0")  # a again
        bench.clock.advance(31)  # expired
        w1.tasks.lease("tasks", "lease-000003", "trainer-1")  # reclaims a (expired), gets it
        with pytest.raises(Conflict):
            w0.tasks.done("tasks", 0, "lease-000002")  # lost
        with pytest.raises(Conflict):
            w0.tasks.renew("tasks", 0, "lease-000002")  # lost
        w1.tasks.done("tasks", 0, "lease-000003")
        m = parse(bench.platform.ctx.metrics.exposition().decode())
        got = {o: value(m, "paddlecloud_task_leases_total", outcome=o) for o in LEASE_OUTCOMES}
        assert got == {"granted": 3, "done": 1, "failed": 1, "expired": 1, "released": 0, "lost": 2}
    finally:
        bench.close()


def test_who_may_read_the_metrics(platform_factory: Callable[..., Platform], tmp_path: Path) -> None:
    scrape_token = "s" * 32
    guarded = platform_factory(metrics_access=MetricsAccess.with_token(scrape_token))
    http = TestClient(create_app(guarded, run_loop=False))
    bob, root = guarded.ensure_user("bob"), guarded.ensure_user("root", admin=True)

    def status(token: str | None) -> tuple[int, str]:
        r = http.get("/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        return r.status_code, r.json()["error"]["code"] if r.status_code != 200 else ""

    assert status(None) == (401, "unauthorized")
    assert status("pc_not-a-token") == (401, "unauthorized")
    assert status(bob) == (403, "forbidden")  # users may not see one another's names
    assert status(root) == (200, "")
    assert status(scrape_token) == (200, "")
    # the scrape token is good for /metrics alone
    assert http.get("/api/v1/jobs", headers={"Authorization": f"Bearer {scrape_token}"}).status_code == 401

    public = platform_factory(metrics_access=MetricsAccess(public=True))
    assert TestClient(create_app(public, run_loop=False)).get("/metrics").status_code == 200


def test_each_platform_counts_for_itself(platform_factory: Callable[..., Platform], tmp_path: Path) -> None:
    """Two platforms in one process (as in the tests): a registry each, never the process-wide one."""
    one, two = platform_factory(), platform_factory()
    client = Client(
        endpoint="http://testserver",
        token=one.ensure_user("alice"),
        http=TestClient(create_app(one, run_loop=False)),
    )
    (tmp_path / "f.bin").write_bytes(PAYLOAD)
    client.pfs.upload_file(tmp_path / "f.bin", "pfs:f.bin")
    got = [
        value(parse(p.ctx.metrics.exposition().decode()), "paddlecloud_pfs_received_bytes_total")
        for p in (one, two)
    ]
    assert got == [len(PAYLOAD), 0]


def test_the_dashboard_charts_only_metrics_that_exist(platform_factory: Callable[..., Platform]) -> None:
    """Every ``paddlecloud_*`` series the Grafana dashboard queries is one the server exposes."""
    platform = platform_factory()
    exposed: set[str] = set()
    for family in text_string_to_metric_families(platform.ctx.metrics.exposition().decode()):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(
            family.type, ("",)
        )
        exposed |= {family.name + s for s in suffixes}
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    assert len(exprs) >= 10
    used = {name for e in exprs for name in re.findall(r"\bpaddlecloud_[a-z_]+", e)}
    assert used and not used - exposed, sorted(used - exposed)


def test_request_routes_are_templates_of_included_routers_mounts_and_the_unmatched(tmp_path: Path) -> None:
    """The route label for a router included under two prefixes (the same route objects), a mount,
    and a path nothing serves: never the raw path."""
    router = APIRouter()

    @router.get("/things/{name}")
    def thing(name: str) -> dict[str, str]:
        return {"name": name}

    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "app.js").write_text("1;")
    app = FastAPI()
    app.include_router(router, prefix="/v1")
    app.include_router(router, prefix="/v2/deep")
    app.mount("/ui/static", StaticFiles(directory=tmp_path / "static"))
    metrics = PlatformMetrics()
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    http = TestClient(app)
    for path in (
        "/v1/things/a",
        "/v2/deep/things/b",
        "/v1/things/c",
        "/v2/deep/things/d",
        "/ui/static/app.js",
    ):
        assert http.get(path).status_code == 200, path
    assert http.get("/v3/things/e").status_code == 404
    m = parse(metrics.exposition().decode())
    counts = {
        (ls["route"], ls["status"]): v
        for n, ls, v in m
        if n == "paddlecloud_http_request_duration_seconds_count"
    }
    assert counts == {
        ("/v1/things/{name}", "200"): 2,
        ("/v2/deep/things/{name}", "200"): 2,
        ("/ui/static/{path}", "200"): 1,
        ("<unmatched>", "404"): 1,
    }
