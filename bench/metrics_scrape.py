"""Benchmark: the cost of one ``GET /metrics`` scrape with 1,000 jobs in the history.

Starts the real server (``paddlecloud up``) on a database filled with ``--jobs`` finished jobs (as
``bench/list_jobs.py`` does) spread over ``--users`` users, calls a few API routes so the latency
histogram has series, then times ``--runs`` scrapes over HTTP with the admin's token, and as a
baseline the same number of ``GET /api/v1/health`` (the HTTP stack alone). Prints the medians, the
scrape's size and its number of samples. Prometheus scrapes every 15-60 s: the figure per scrape
is what it costs.

    .venv/bin/python bench/metrics_scrape.py [--jobs 1000] [--users 20] [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._server import platform, token  # noqa: E402
from bench.list_jobs import fill  # noqa: E402

from paddlecloud.store import JobRow, open_database  # noqa: E402

#: routes called before the scrapes, so the latency histogram has series as on a server in use
ROUTES = (
    "/api/v1/version",
    "/api/v1/whoami",
    "/api/v1/jobs?all=true&all_users=true",
    "/api/v1/jobs/job-0001?user=user-001",
    "/api/v1/quota",
    "/api/v1/no-such",
)


def spread(data_dir: Path, users: int) -> None:
    """Give the filled jobs ``users`` different owners (the jobs gauge has a series per user and phase)."""
    db = open_database(f"sqlite:///{data_dir / 'paddlecloud.db'}")
    with db.session() as s:
        for job in s.query(JobRow):
            job.user = f"user-{job.id % users:03d}"
        s.commit()
    db.dispose()


def timed(http: httpx.Client, url: str, runs: int) -> tuple[list[float], httpx.Response]:
    out, last = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        last = http.get(url)
        out.append(time.perf_counter() - t0)
        last.raise_for_status()
    assert last is not None
    return out, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()

    def prepare(data_dir: Path) -> None:
        fill(data_dir, args.jobs)
        spread(data_dir, args.users)

    with platform(prepare=prepare) as (srv, _, _):
        headers = {"Authorization": f"Bearer {token(srv)}"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as http:
            for path in ROUTES:
                for _ in range(5):
                    http.get(path)
            timed(http, "/metrics", 5)  # warm-up
            scrapes, last = timed(http, "/metrics", args.runs)
            health, _ = timed(http, "/api/v1/health", args.runs)
    samples = sum(1 for line in last.text.splitlines() if line and not line.startswith("#"))
    ms = [t * 1000 for t in scrapes]
    median, p90 = statistics.median(ms), statistics.quantiles(ms, n=10)[-1]
    print(f"GET /metrics, {args.jobs} finished jobs of {args.users} users, {args.runs} scrapes")
    print(f"  scrape: median {median:.1f} ms, p90 {p90:.1f} ms; {len(last.content) / 1024:.0f} KiB, ", end="")
    print(f"{samples} samples")
    print(f"  GET /api/v1/health (HTTP alone): median {statistics.median(health) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
