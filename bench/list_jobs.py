"""Benchmark: wall time of `paddlecloud get jobs` with 1,000 jobs in the history.

Fills a fresh database with 1,000 finished jobs (2 pservers + 2 trainers each, with their worker and
event rows, written through the store layer), starts the real server, then times the real CLI
process end to end (interpreter start, imports, HTTP, rendering) over repeated runs.
Goal: <= 0.3 s.

    .venv/bin/python bench/list_jobs.py [--jobs 1000] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import PADDLECLOUD, Server  # noqa: E402

from paddlecloud.store import EventRow, JobRow, WorkerRow, open_database  # noqa: E402


def fill(data_dir: Path, n: int) -> None:
    data_dir.mkdir(parents=True)
    db = open_database(f"sqlite:///{data_dir / 'paddlecloud.db'}")
    now = time.time()
    spec = {"name": "x", "package": "0" * 64, "entry": "python train.py", "framework": "paddle-ps",
            "pservers": {"count": 2, "cpu": "500m", "memory": "512Mi"},
            "trainers": {"count": 2, "min": None, "max": None, "cpu": "500m", "memory": "512Mi", "gpu": 0},
            "env": {}, "priority": 0}  # fmt: skip
    with db.session() as s:
        for i in range(n):
            t = now - (n - i) * 60
            job = JobRow(user="default", name=f"job-{i:04d}", package_id="0" * 64, framework="paddle-ps",
                         spec={**spec, "name": f"job-{i:04d}"}, priority=0, phase="Succeeded",
                         reason="Completed", message="all 2 trainers succeeded", submitted_at=t,
                         started_at=t + 1, finished_at=t + 30, output_dir="")  # fmt: skip
            for role in ("pserver", "trainer"):
                for k in range(2):
                    state = "Stopped" if role == "pserver" else "Succeeded"
                    job.workers.append(WorkerRow(name=f"{role}-{k}", role=role, index=k, state=state))
            for reason in ("Submitted", "Admitted", "Running", "Completed"):
                job.events.append(EventRow(time=t, type="Normal", reason=reason, message=reason))
            s.add(job)
        s.commit()
    db.dispose()


def timed(env: dict[str, str], args: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([PADDLECLOUD, *args], env=env, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        fill(srv.data_dir, args.jobs)
        srv.start()
        try:
            print(
                f"`paddlecloud ...` wall time, {args.jobs} jobs in history, "
                f"{args.runs} runs each (goal <= 0.3 s)"
            )
            for cmd in (
                ["version"],
                ["get", "jobs"],
                ["get", "jobs", "-a"],
                ["get", "jobs", "-a", "-o", "json"],
            ):
                ts = timed(srv.env, cmd, args.runs)
                print(f"  {' '.join(cmd):<24} median {statistics.median(ts):.3f} s  "
                      f"min {min(ts):.3f} s  max {max(ts):.3f} s")  # fmt: skip
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
