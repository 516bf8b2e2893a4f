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
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.list_jobs import fill  # noqa: E402
from tests.e2e.conftest import Server  # noqa: E402

from paddlecloud.client import Client, load_config  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100, help="finished jobs in the history")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--skip-submit", action="store_true")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/api_load.py needs wrk: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        srv.up_args = ["--node-cpu", "1", "--node-memory", "4Gi"]
        fill(srv.data_dir, args.jobs)
        srv.start()
        try:
            cfg = load_config(Path(srv.env["PADDLECLOUD_CONFIG"]))
            assert cfg.current is not None
            token, api = cfg.current.token, f"http://127.0.0.1:{srv.port}/api/v1"
            client = Client(cfg.current.endpoint, token)
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
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
