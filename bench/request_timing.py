"""Benchmark: the CPU one request pays for being timed for ``/metrics`` (``server/metrics.py``).

``bench/api_load.py --compare-request-metrics`` compares req/s over HTTP with and without the
middleware, but on a small shared machine its run-to-run noise is larger than the effect. This one
calls the ASGI app in-process (no sockets, no client), ``--requests`` times per block, for two apps
of one platform: as built, and built without the middleware; blocks alternate, ``--rounds`` of
each. Routes: ``GET /api/v1/health`` (no auth, no database) and ``GET /api/v1/jobs?all=true`` with
``--jobs`` finished jobs (the job list, answered from the server's read cache as under load). Printed:
the median and the fastest block per request (on a busy machine the fastest is the least disturbed,
the closest to the intrinsic cost); last, the middleware alone around an app that answers at once
(a route of an included router, as the real ones), fastest of 5 blocks.

    .venv/bin/python bench/request_timing.py [--jobs 100] [--requests 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.list_jobs import fill  # noqa: E402

import paddlecloud.server.app as app_module  # noqa: E402
from paddlecloud.backends.local import LocalSettings, NodeShape  # noqa: E402
from paddlecloud.controller import Platform, PlatformConfig  # noqa: E402
from paddlecloud.controller.model.metrics import PlatformMetrics  # noqa: E402
from paddlecloud.server.main import _tune_gc as tune_gc  # noqa: E402
from paddlecloud.server.metrics import RequestMetricsMiddleware  # noqa: E402


class _Absent:
    """Stands in for the middleware: "constructing" it gives back the app it would wrap."""

    def __new__(cls, app: Any, **_: Any) -> Any:
        return app


def build(platform: Platform, timed: bool) -> Any:
    real = app_module.RequestMetricsMiddleware
    if not timed:
        app_module.RequestMetricsMiddleware = _Absent  # type: ignore[misc,assignment]
    try:
        return app_module.create_app(platform, run_loop=False)
    finally:
        app_module.RequestMetricsMiddleware = real  # type: ignore[misc]


async def block(app: Any, path: str, query: bytes, token: str, n: int) -> float:
    """Seconds per request over ``n`` requests of ``path``."""
    scope_base = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
        "headers": [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())],
        "server": ("bench", 80), "client": ("127.0.0.1", 1),
    }  # fmt: skip
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    t0 = time.perf_counter()
    for _ in range(n):
        await app(dict(scope_base), receive, send)
    took = time.perf_counter() - t0
    assert set(statuses) == {200}, set(statuses)
    return took / n


async def run(args: argparse.Namespace, platform: Platform, token: str) -> None:
    apps = {True: build(platform, True), False: build(platform, False)}
    routes = {
        "GET /api/v1/health": ("/api/v1/health", b""),
        "GET /api/v1/jobs?all=true": ("/api/v1/jobs", b"all=true"),
    }
    for app in apps.values():  # warm-up: lazily built schemas, the list cache
        for path, query in routes.values():
            await block(app, path, query, token, 200)
    per: dict[tuple[str, bool], list[float]] = {}
    for i in range(args.rounds):
        for name, (path, query) in routes.items():
            for timed in (True, False) if i % 2 == 0 else (False, True):  # each goes first in turn
                took = await block(apps[timed], path, query, token, args.requests)
                per.setdefault((name, timed), []).append(took)
    counted = sum(
        1 for line in platform.ctx.metrics.exposition().decode().splitlines()
        if line.startswith("paddlecloud_http_request_duration_seconds_count")
    )  # fmt: skip
    assert counted > 0, "the timed app did not time"
    print(
        f"in-process ASGI calls, {args.requests} requests per block, {args.rounds} blocks each, "
        f"{args.jobs} finished jobs (us per request)"
    )
    print(f"  {'request':<28} {'':<7} {'timed':>8} {'untimed':>8} {'cost':>8} {'cost %':>7}")
    for name in routes:
        for how, pick in (("median", statistics.median), ("fastest", min)):
            a, b = pick(per[(name, True)]) * 1e6, pick(per[(name, False)]) * 1e6
            print(f"  {name:<28} {how:<7} {a:>8.1f} {b:>8.1f} {a - b:>8.1f} {(a - b) / b:>7.1%}")


async def alone(n: int) -> tuple[float, float]:
    """Seconds per request through the middleware around an app that answers at once, and without."""
    route = APIRoute("/jobs/{name}", lambda: None)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["route"] = route
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    timed = RequestMetricsMiddleware(app, PlatformMetrics())  # type: ignore[arg-type]
    scope = {"type": "http", "method": "GET", "path": "/api/v1/jobs/fit-a-line", "root_path": ""}

    async def per_request(target: Any) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            await target(dict(scope), receive, send)
        return (time.perf_counter() - t0) / n

    return (
        min([await per_request(timed) for _ in range(5)]),
        min([await per_request(app) for _ in range(5)]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        fill(data, args.jobs)
        nodes = NodeShape(count=1, cpu_m=4000, memory=8 << 30)
        config = PlatformConfig(data_dir=data, backend_settings=LocalSettings(nodes=nodes, isolation="none"))
        platform = Platform.open(config)
        tune_gc()  # as the server does (server/main.py)
        try:
            asyncio.run(run(args, platform, platform.ensure_user("default", admin=True)))
        finally:
            platform.close()
    a, b = asyncio.run(alone(20 * args.requests))
    print(f"  the middleware alone: {a * 1e6:.1f} us with, {b * 1e6:.1f} us without: {(a - b) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
