"""Benchmark: `GET /api/v1/jobs/{name}/tasks` for a job with 100,000 tasks (the most a job may have).

An in-process platform (SQLite, no reconcile loop) holds one job whose input, one N-byte file cut
into 1-byte ranges (``chunk_size: 1``), makes N tasks (a spec lists at most 10,000 explicit items);
the real app is served by the SDK's transport seam (Starlette's TestClient: request parsing, the route, the
service, JSON). Times, median of ``--runs``: the default page (1,000 tasks), the counts only
(``limit=0``, what ``describe`` asks), and every page followed (``client.tasks.all``: what a single
answer with every task cost before paging, plus one request per page).

    .venv/bin/python bench/task_pages.py [--tasks 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.core.clock import ManualClock
from paddlecloud.server import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def timed(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # the web framework's import-time and schema warnings
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        platform = Platform.open(
            PlatformConfig(data_dir=root / "data", backend_settings=LocalSettings(nodes=NodeShape(count=1))),
            clock=ManualClock(),
        )
        pkg = root / "pkg"
        pkg.mkdir()
        (pkg / "main.py").write_text("print(1)\n")
        with TestClient(create_app(platform, run_loop=False)) as http:
            alice = Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=http)
            data = root / "input"
            data.mkdir()
            (data / "bytes.bin").write_bytes(b"x" * args.tasks)
            alice.pfs.cp([str(data)], "pfs:input", recursive=True)
            t0 = time.perf_counter()
            spec = {"name": "many", "entry": "python main.py", "input": "pfs:input",
                    "tasks": {"chunk_size": "1"}}  # fmt: skip
            alice.submit(spec, package_dir=pkg)
            print(f"submit with {args.tasks:,} tasks: {time.perf_counter() - t0:.2f} s")
            page = timed(lambda: alice.tasks.status("many"), args.runs)
            counts = timed(lambda: alice.tasks.status("many", limit=0), args.runs)
            every = timed(lambda: alice.tasks.all("many"), max(1, args.runs // 2))
        platform.close()
    print(f"GET tasks, default page (1,000 tasks): {page * 1000:.0f} ms (median of {args.runs})")
    print(f"GET tasks?limit=0 (counts only, describe): {counts * 1000:.0f} ms")
    print(f"every page followed ({args.tasks:,} tasks): {every:.2f} s")


if __name__ == "__main__":
    main()
