"""Benchmark: how long an unrelated API write waits while the server preempts a job.

Starts the real server (``paddlecloud up``, policy tiresias, one node of 4 CPUs), runs a
low-priority job of 4 trainers whose processes ignore SIGTERM (so stopping it takes the whole
10 s grace period), then submits a high-priority job that needs its CPUs. While the low job is
being stopped, a second user's client makes writes that go through the controller: submit a job,
then kill it (kill takes the controller's mutex), back to back, timing each. The same writes are
timed first with nothing happening, as the baseline.

    .venv/bin/python bench/preempt_write_delay.py [--writes 40]

Goal (issue 11): a preemption delays an unrelated write by at most 100 ms. Before the Preempting
state the reconcile cycle held the mutex for the whole grace period (up to 10 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._server import platform  # noqa: E402

from paddlecloud.client import Client  # noqa: E402

STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def _writes(client: Client, package: str, n: int, tag: str) -> list[float]:
    """Submit (a package already in PFS) + kill ``n`` times; the seconds each call took."""
    out = []
    for i in range(n):
        name = f"{tag}-{i}"
        t0 = time.perf_counter()
        client.submit({"name": name, "package": package, "entry": "python job.py", "trainers": {"cpu": "4"}})
        out.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        client.kill(name, grace=0)
        out.append(time.perf_counter() - t0)
    return out


def _figures(name: str, ts: list[float]) -> str:
    ts = sorted(ts)
    p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
    return (
        f"  {name:<28} n={len(ts):<4} median {statistics.median(ts) * 1000:6.1f} ms  "
        f"p99 {p99 * 1000:6.1f} ms  max {ts[-1] * 1000:6.1f} ms"
    )


def _wait(client: Client, name: str, phases: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.job(name).phase.value not in phases:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} never reached {phases}")
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=40, help="submit+kill pairs per measurement")
    args = ap.parse_args()
    up = ["--policy", "tiresias", "--node-cpu", "4", "--node-memory", "8Gi"]
    with platform(up) as (_srv, admin, base):
        pkg = base / "pkg"
        pkg.mkdir()
        (pkg / "job.py").write_text(STUBBORN)
        other = Client(admin.endpoint, admin.create_user("bob").token)
        package = other.upload_package(pkg, "writes", "python job.py").path
        baseline = _writes(other, package, args.writes, "quiet")

        admin.submit({"name": "low", "entry": "python job.py", "trainers": {"cpu": "1", "count": 4},
                      "priority": -100}, package_dir=pkg)  # fmt: skip
        _wait(admin, "low", {"Running"})
        time.sleep(1.0)  # the trainers have set their SIGTERM handlers
        t0 = time.monotonic()
        admin.submit({"name": "urgent", "entry": "python job.py", "trainers": {"cpu": "1", "count": 4},
                      "priority": 100}, package_dir=pkg)  # fmt: skip
        during: list[float] = []
        while time.monotonic() - t0 < 12:  # the grace period (10 s) and a little more
            during += _writes(other, package, 1, f"during-{len(during)}")
        _wait(admin, "urgent", {"Running"})
        stopped = next(e.time for e in admin.job("low").events if e.reason == "Preempted")
        preempted = next(e.time for e in admin.job("low").events if e.reason.startswith("Preempt"))
        print(f"preempted job stopping for {(stopped - preempted).total_seconds():.1f} s (grace 10 s)")
        print(_figures("writes, nothing happening", baseline))
        print(_figures("writes during the preemption", during))
        admin.kill("urgent", grace=0)
        admin.kill("low", grace=0)


if __name__ == "__main__":
    main()
