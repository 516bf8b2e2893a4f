"""Benchmark: the API under load, driven by ``wrk`` (compiled, so the client is not the bottleneck).

Starts the real server (``paddlecloud up``) in a temporary directory, fills its database with
``--jobs`` finished jobs (2 pservers + 2 trainers each, worker and event rows, written through the
store layer like ``bench/list_jobs.py``), then runs ``wrk`` against:

  - ``GET /api/v1/health``                       (no auth, no database: the HTTP stack's ceiling)
  - ``GET /api/v1/jobs``                          (nothing active: an empty list)
  - ``GET /api/v1/jobs?all=true``                 (the finished jobs)
  - ``POST /api/v1/jobs``                         (submit; a Lua script gives each a new name)

and prints requests/s and the latency percentiles for each. Goals (issue 11): the 100-job list
>= 1,000 req/s with p99 < 100 ms, submit >= 100 req/s.

    .venv/bin/python bench/api_load.py [--jobs 100] [--seconds 10] [--threads 2] [--connections 50]

Needs Debian's ``wrk`` (``apt-get install wrk``). Submits go to a cluster made full by one long job
first, so the queue grows but nothing starts: the figure is the API's, not the process spawner's.

``--compare-request-metrics [--rounds 2]``: the cost of timing every request for ``/metrics``
(``server/metrics.py``): ``GET /health`` and the job list, served by one server as it is and by one
started without that middleware (a ``sitecustomize`` on the second server's ``PYTHONPATH`` leaves it
out of the app), alternately in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._server import platform  # noqa: E402
from bench._server import token as admin_token  # noqa: E402
from bench.list_jobs import fill  # noqa: E402

from paddlecloud.client import Client  # noqa: E402

_LATENCY = re.compile(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_RATE = re.compile(r"Requests/sec:\s+([\d.]+)")
_NON2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0}

SUBMIT_LUA = textwrap.dedent(
    """
    local counter = 0
    local thread_id = 0
    local threads = {}
    function setup(thread)
      thread:set("id", thread_id)
      thread_id = thread_id + 1
      table.insert(threads, thread)
    end
    function init(args)
      counter = 0
    end
    request = function()
      counter = counter + 1
      local name = string.format("load-%d-%d", id, counter)
      local body = string.format(BODY, name)
      return wrk.format("POST", "/api/v1/jobs", nil, body)
    end
    """
)


def wrk(url: str, token: str, args: argparse.Namespace, script: Path | None = None) -> dict[str, float]:
    """Figures of a ``--seconds`` run, after a 2 s warm-up run on the same URL whose figures are
    dropped (the server's first requests build lazily made schemas, caches and threads)."""
    if script is None:
        subprocess.run(["wrk", "-t1", "-c10", "-d2s", "-H", f"Authorization: Bearer {token}", url],
                       capture_output=True, check=True)  # fmt: skip
    cmd = [
        "wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.seconds}s", "--latency",
        "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json",
    ]  # fmt: skip
    if script is not None:
        cmd += ["-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    figures = {f"p{p}": float(v) * _UNIT[u] for p, v, u in _LATENCY.findall(out)}
    rate = _RATE.search(out)
    figures["rps"] = float(rate.group(1)) if rate else 0.0
    bad = _NON2XX.search(out)
    figures["non2xx"] = float(bad.group(1)) if bad else 0.0
    return figures


def package(base: Path) -> Path:
    src = base / "pkg"
    src.mkdir()
    (src / "train.py").write_text("import time\ntime.sleep(3600)\n")
    archive = base / "pkg.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "train.py", arcname="train.py")
    return archive


#: the second server's sitecustomize: RequestMetricsMiddleware "constructed" is the app it wraps
WITHOUT_REQUEST_METRICS = """\
import paddlecloud.server.app as _app


class _Absent:
    def __new__(cls, app, **_):
        return app


_app.RequestMetricsMiddleware = _Absent
"""


UP_ARGS = ["--node-cpu", "1", "--node-memory", "4Gi"]


@contextlib.contextmanager
def server(jobs: int, request_metrics: bool = True) -> Iterator[tuple[str, str, Client, Path]]:
    """``paddlecloud up`` on a fresh database with ``jobs`` finished jobs (without the request-timing
    middleware if not ``request_metrics``): API URL, admin token, SDK client, scratch directory."""
    with tempfile.TemporaryDirectory() as site:
        pythonpath = None
        if not request_metrics:
            (Path(site) / "sitecustomize.py").write_text(WITHOUT_REQUEST_METRICS)
            pythonpath = site
        with platform(UP_ARGS, lambda data_dir: fill(data_dir, jobs), pythonpath) as (srv, client, base):
            yield f"{srv.url}/api/v1", admin_token(srv), client, base


def timed_requests(api: str, token: str) -> int:
    """How many requests the server's latency histogram has counted (0: the middleware is absent)."""
    r = httpx.get(api.removesuffix("/api/v1") + "/metrics", headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in r.text.splitlines()
        if line.startswith("paddlecloud_http_request_duration_seconds_count")
    )


def compare_request_metrics(args: argparse.Namespace) -> None:
    urls = {"health": "/health", f"jobs?all=true ({args.jobs})": "/jobs?all=true"}
    rates: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.rounds):
        for timing in (True, False):
            with server(args.jobs, request_metrics=timing) as (api, admin, _, _):
                for name, path in urls.items():
                    rates.setdefault((name, timing), []).append(wrk(api + path, admin, args)["rps"])
                counted = timed_requests(api, admin)
                assert (counted > 0) == timing, f"request timing {'off' if timing else 'on'}: {counted}"
    print(
        f"wrk -t{args.threads} -c{args.connections} -d{args.seconds}s, {args.rounds} rounds, servers "
        "with and without the request-timing middleware taking turns (req/s, median of the rounds)"
    )
    print(f"  {'request':<28} {'with':>8} {'without':>8} {'cost':>7}   rounds with / without")
    for name in urls:
        with_, without = rates[(name, True)], rates[(name, False)]
        a, b = statistics.median(with_), statistics.median(without)
        each = " ".join(f"{x:.0f}" for x in with_) + " / " + " ".join(f"{x:.0f}" for x in without)
        print(f"  {name:<28} {a:>8.0f} {b:>8.0f} {(b - a) / b:>7.1%}   {each}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100, help="finished jobs in the history")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--skip-submit", action="store_true")
    ap.add_argument("--compare-request-metrics", action="store_true")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare-request-metrics")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/api_load.py needs wrk: apt-get install wrk")
    if args.compare_request_metrics:
        compare_request_metrics(args)
        return
    with server(args.jobs) as (api, token, client, base):
        print(
            f"wrk -t{args.threads} -c{args.connections} -d{args.seconds}s, "
            f"{args.jobs} finished jobs in the history"
        )
        rows = [
            ("GET /health", wrk(f"{api}/health", token, args)),
            ("GET /jobs (none active)", wrk(f"{api}/jobs", token, args)),
            (f"GET /jobs?all=true ({args.jobs} jobs)", wrk(f"{api}/jobs?all=true", token, args)),
        ]
        if not args.skip_submit:
            remote = "/pfs/local/home/default/bench/pkg.tar.gz"
            client.pfs.mkdir("pfs:bench", parents=True)
            client.pfs.upload_file(package(base), remote)
            busy = {"name": "busy", "package": remote, "entry": "python train.py",
                    "trainers": {"count": 1, "cpu": "1", "memory": "1Gi"}}  # fmt: skip
            client.submit(busy)
            deadline = time.monotonic() + 60
            while client.job("busy").phase.value not in ("Starting", "Running"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the busy job did not start")
                time.sleep(0.2)
            spec = {"name": "%s", "package": remote, "entry": "python train.py",
                    "trainers": {"count": 1, "cpu": "1", "memory": "1Gi"}}  # fmt: skip
            body = json.dumps(json.dumps(spec))  # a Lua string literal holding the JSON
            script = base / "submit.lua"
            script.write_text(f"BODY = {body}\n{SUBMIT_LUA}")
            rows.append(("POST /jobs (submit)", wrk(f"{api}/jobs", token, args, script)))
            client.kill("busy", grace=0)
        print(f"  {'request':<34} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
        for name, f in rows:
            print(
                f"  {name:<34} {f['rps']:>8.0f} {f.get('p50', 0):>8.1f} {f.get('p90', 0):>8.1f} "
                f"{f.get('p99', 0):>8.1f} {f['non2xx']:>8.0f}"
            )


if __name__ == "__main__":
    main()
