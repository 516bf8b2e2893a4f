"""The chaos check again and again: tests/e2e/test_chaos.py's elastic torch part (``KILLS`` random
trainer kills during the elastic torch example, ``--max-restarts KILLS``), ``--runs`` times, each
with its own kill schedule (``PADDLECLOUD_CHAOS_SEED`` = 1, 2, ...), optionally beside ``--hogs``
CPU hogs (``python3 -c 'while True: pass'``, stopped at the end). Prints each run's result and time,
and the count that passed. Each run is one pytest session (its own server, its torch environment
built again: part of its time).

    .venv/bin/python bench/chaos_repeat.py [--runs 10] [--hogs 2] [--test elastic_torch]

Not a test: prints figures (bench/README.md, "Isolation between jobs").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--test", default="elastic_torch_survives")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    results = []
    try:
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            proc = subprocess.run(
                [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", "-x",
                 "tests/e2e/test_chaos.py", "-k", args.test],
                cwd=ROOT, capture_output=True, text=True,
                env={**os.environ, "PADDLECLOUD_CHAOS_SEED": str(run)},
            )  # fmt: skip
            took = time.monotonic() - start
            last = (proc.stdout.strip().splitlines() or ["?"])[-1]
            results.append((run, proc.returncode == 0, took))
            verdict = "passed" if proc.returncode == 0 else "FAILED"
            print(f"run {run} (seed {run}): {verdict} in {took:.0f} s: {last}")
            if proc.returncode != 0:
                print(proc.stdout[-4000:])
            sys.stdout.flush()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    passed = sum(ok for _, ok, _ in results)
    print(f"{passed} of {len(results)} passed, {args.hogs} CPU hogs beside them")


if __name__ == "__main__":
    main()
