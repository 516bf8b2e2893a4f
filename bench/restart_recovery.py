"""Benchmark: recovery time of a killed trainer under the OnFailure restart policy.

Starts a real server on loopback (fresh data dir) and submits a `framework none` job of 2 trainers
(`--restart-policy OnFailure`, backoff `--backoff`, default 0 s) whose program appends its start time
to a file in the job's output dir and then sleeps. Then, `--kills` times: SIGKILL trainer-1's whole
process group (as the OOM killer or a dying node would) and measure

  - kill -> the platform reports the restarted trainer Running (new pid; SDK polled every 5 ms)
  - kill -> the restarted program is running its first line (the time it wrote itself)

Prints median and max of each. Not a test.

    .venv/bin/python bench/restart_recovery.py [--kills 10] [--backoff 0]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import write_package  # noqa: E402

from paddlecloud.api.models import WorkerView  # noqa: E402
from paddlecloud.client import Client  # noqa: E402

PROGRAM = """\
import os, time
from pathlib import Path

out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"]) / (os.environ["PADDLECLOUD_WORKER"] + ".starts")
with open(out, "a") as f:
    f.write(f"{os.environ['PADDLECLOUD_RESTART']} {time.time()}\\n")
time.sleep(600)
"""
WORKER = "trainer-1"


def _worker(client: Client, job: str) -> WorkerView:
    return next(w for w in client.workers(job) if w.name == WORKER)


def _wait_running(client: Client, job: str, run: int, deadline: float) -> WorkerView:
    while True:
        w = _worker(client, job)
        if w.state == "Running" and w.restarts == run and w.pid is not None:
            return w
        if time.time() > deadline:
            raise SystemExit(f"{WORKER} run {run} not running: {w}")
        time.sleep(0.005)


def _started_at(starts: Path, run: int, deadline: float) -> float:
    while time.time() < deadline:
        if starts.exists():
            for line in starts.read_text().splitlines():
                r, _, t = line.partition(" ")
                if r == str(run) and t:
                    return float(t)
        time.sleep(0.005)
    raise SystemExit(f"{WORKER} run {run} never wrote its start")


def measure(client: Client, pkg: Path, kills: int, backoff: float) -> tuple[list[float], list[float]]:
    spec = {
        "name": "recover", "entry": "python train.py", "framework": "none",
        "trainers": {"count": 2, "cpu": "100m", "memory": "64Mi", "restart": "OnFailure"},
        "max_restarts": kills, "restart_backoff_s": backoff, "restart_backoff_max_s": max(backoff, 30.0),
    }  # fmt: skip
    client.submit(spec, package_dir=pkg)
    starts = Path(client.job("recover").output_dir) / f"{WORKER}.starts"
    api, program = [], []
    w = _wait_running(client, "recover", 0, time.time() + 60)
    _started_at(starts, 0, time.time() + 30)
    for run in range(1, kills + 1):
        assert w.pid is not None
        t0 = time.time()
        os.killpg(w.pid, signal.SIGKILL)
        w = _wait_running(client, "recover", run, t0 + 60)
        api.append(time.time() - t0)
        program.append(_started_at(starts, run, t0 + 60) - t0)
    job = client.job("recover")
    assert job.phase == "Running", (job.phase, job.message)
    client.kill("recover", grace=1)
    return api, program


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--backoff", type=float, default=0.0, help="restart_backoff_s (doubles per restart)")
    args = ap.parse_args()
    with platform() as (_, client, base):
        pkg = write_package(base / "pkg", {"train.py": PROGRAM})
        api, program = measure(client, pkg, args.kills, args.backoff)
    print(f"killed trainer (SIGKILL to its process group) -> restarted, framework none, OnFailure, "
          f"backoff {args.backoff:g} s, {len(api)} kills, real server on loopback")  # fmt: skip
    for label, xs in (("platform reports it Running", api), ("restarted program running", program)):
        print(f"  kill -> {label:28s} median {statistics.median(xs):.3f} s, max {max(xs):.3f} s  "
              f"(min {min(xs):.3f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
