"""Benchmark: a killed trainer of the PaddlePaddle PS example loses no data (the task master).

Starts a real server on loopback (fresh data dir; builds the PaddlePaddle environment), puts the
fit_a_line data set (8 shard files) into PFS and submits examples/fit_a_line with 2 pservers + 2
trainers, `--tasks-from-input --passes N`, `--restart-policy OnFailure`, a 30 s lease. Then, `--kills`
times: wait until trainer-1 holds a shard, SIGKILL its process group, and measure (task master
polled every 10 ms)

  - kill -> its shard is leased to another trainer (the platform saw the run end; not the 30 s expiry)
  - kill -> the restarted trainer-1 has joined the PS job again and leased a shard

After the last kill the job runs to its end: every shard must be done once per pass, and the final
loss is printed beside an undisturbed run's. Not a test.

    .venv/bin/python bench/task_recovery.py [--kills 10] [--passes 60]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import Server  # noqa: E402

from paddlecloud.api.tasks import TaskList, TaskView  # noqa: E402
from paddlecloud.client import Client  # noqa: E402

EXAMPLE = ROOT / "examples" / "fit_a_line"
JOB, WORKER = "fit-a-line", "trainer-1"


def _find(client: Client, test: Callable[[TaskView], bool], deadline: float, what: str) -> TaskView:
    while time.time() < deadline:
        for t in client.tasks.status(JOB).items:
            if test(t):
                return t
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def measure(client: Client, kills: int) -> tuple[list[float], list[float]]:
    """Kill trainer-1's run ``run - 1`` while it holds a shard; time until the shard it held (marked
    by the task master: "trainer-1#N ended while holding the task") is leased again, and until the
    next run leases a shard."""
    handed, rejoined = [], []
    for run in range(1, kills + 1):
        dead, alive = f"{WORKER}#{run - 1}", f"{WORKER}#{run}"

        def holding(t: TaskView, h: str = dead) -> bool:
            return t.state == "leased" and t.holder == h

        def handed_on(t: TaskView, h: str = dead) -> bool:
            return f"{h} ended" in t.error and t.state in ("leased", "done")

        def rejoin(t: TaskView, h: str = alive) -> bool:
            return t.holder == h

        _find(client, holding, time.time() + 600, f"{dead} leasing")
        pid = next(w.pid for w in client.workers(JOB) if w.name == WORKER)
        assert pid is not None
        t0 = time.time()
        os.killpg(pid, signal.SIGKILL)
        _find(client, handed_on, t0 + 60, f"the shard {dead} held to be leased again")
        handed.append(time.time() - t0)
        _find(client, rejoin, t0 + 120, f"{alive} leasing")
        rejoined.append(time.time() - t0)
    return handed, rejoined


def submit(srv: Server, base: Path, passes: int, kills: int) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "data.py"), str(base / "dataset")], check=True)
    srv.cli("pfs", "cp", "-r", "-q", str(base / "dataset"), "pfs:data/fit-a-line")
    srv.cli(
        "submit", str(EXAMPLE), "--name", JOB, "--framework", "paddle-ps", "--entry", "python train.py",
        "--pservers", "2", "--trainers", "2", "--input", "pfs:data/fit-a-line", "--tasks-from-input",
        "--passes", str(passes), "--task-timeout", "30", "--restart-policy", "OnFailure",
        "--max-restarts", str(kills), "--restart-backoff", "0",
    )  # fmt: skip


def report(
    passes: int, handed: list[float], rejoined: list[float], status: TaskList, job: str, log: str
) -> None:
    print(
        f"fit_a_line (2 pservers + 2 trainers, {passes} passes over 8 shards), {len(handed)} kills of "
        f"{WORKER} (SIGKILL to its process group), OnFailure, lease 30 s, real server on loopback"
    )
    for label, xs in (("its shard leased again", handed), ("restarted trainer leasing", rejoined)):
        print(
            f"  kill -> {label:26s} median {statistics.median(xs):.3f} s, max {max(xs):.3f} s "
            f"(min {min(xs):.3f} s)"
        )
    once = all(t.state == "done" and t.done_passes == passes for t in status.items)
    leases = sum(t.leases for t in status.items)
    m = re.search(r"^final loss ([0-9.]+)$", log, re.M)
    print(
        f"  job {job}; every shard done once per pass: {once}; {leases} leases for "
        f"{len(status.items) * passes} shard-passes; final loss {m.group(1) if m else '?'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--passes", type=int, default=60, help="long enough to outlast every kill")
    args = ap.parse_args()
    with platform() as (srv, client, base):
        submit(srv, base, args.passes, args.kills)
        handed, rejoined = measure(client, args.kills)
        job = client.wait(JOB, timeout=900)
        status = client.tasks.status(JOB)
        log = "".join(client.logs(JOB, worker="trainer-0"))
    report(args.passes, handed, rejoined, status, f"{job.phase}", log)


if __name__ == "__main__":
    main()
