"""A job that writes its log at full speed: how much of it stays on disk (issue 24: ``--max-log-size``).

A real server on loopback (``--isolation sandbox``, ``--max-log-size SIZE``); one job whose program
writes 100-byte lines as fast as it can for ``--seconds`` (default 60) on one CPU. While it runs, the
size of its log file is sampled every 0.5 s (the largest is printed: it must never pass the
limit); at the end, what it wrote (the marker's count of dropped bytes + what is kept) and the file's
size and blocks on disk.

    .venv/bin/python bench/log_flood.py [--seconds 60] [--max-log-size 100Mi]

Not a test: prints figures (bench/README.md, "Isolation between jobs").
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import write_package  # noqa: E402

from paddlecloud.core.quantity import parse_memory  # noqa: E402

SPEW = """\
import os, sys, time
line = "x" * 99 + "\\n"
block = line * 1000
t = time.time()
while time.time() - t < float(os.environ["SECONDS_"]):
    sys.stdout.write(block)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-log-size", default="100Mi")
    args = parser.parse_args()
    limit = parse_memory(args.max_log_size)
    with platform(up_args=["--node-cpu", "2", "--max-log-size", args.max_log_size]) as (srv, _client, base):
        pkg = write_package(base / "spew", {"spew.py": SPEW})
        srv.cli("submit", str(pkg), "--name", "flood", "--entry", "python spew.py", "--cpu", "1",
                "--env", f"SECONDS_={args.seconds}")  # fmt: skip
        srv.wait_phase("flood", {"Running"})
        log = Path(srv.json("get", "workers", "flood")["items"][0]["log"])
        largest, done = 0, threading.Event()

        def sample() -> None:
            nonlocal largest
            while not done.is_set():
                if log.exists():
                    largest = max(largest, log.stat().st_size)
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.monotonic()
        job = srv.wait_phase("flood", {"Succeeded", "Failed"}, timeout=args.seconds + 120)
        took = time.monotonic() - t0
        done.set()
        sampler.join()
        st = os.stat(log)
        text = log.read_bytes()
    m = re.search(rb"\[paddlecloud: ([0-9,]+) bytes", text)
    dropped = int(m.group(1).replace(b",", b"")) if m else 0
    written = dropped + len(text) - (256 if m else 0)
    mib = 2**20
    rate = written / took / mib
    print(f"a job writing its log at full speed for {args.seconds:g} s (1 CPU), limit {args.max_log_size}:")
    print(f"  job {job['phase']} after {took:.1f} s; it wrote {written / mib:,.0f} MiB ({rate:.0f} MiB/s)")
    blocks = st.st_blocks * 512 / mib
    print(f"  on disk: {st.st_size / mib:.1f} MiB ({blocks:.1f} MiB of blocks), limit {limit / mib:.0f} MiB")
    print(f"  largest seen while it ran: {largest / mib:.1f} MiB; {dropped / mib:,.0f} MiB dropped (said so)")
    if st.st_size > limit or largest > limit:
        raise SystemExit("the log passed its limit")


if __name__ == "__main__":
    main()
