"""Does one user's bad job slow another user's job? (issue 24: memory hog, fork bomb)

A real server on loopback (``--isolation sandbox``: cgroups with memory, CPU and pids limits, a
network namespace per job), one virtual node of the machine's CPUs. User bob's job measures its
own step time: ``--steps`` steps of a fixed amount of CPU work (``--work`` loop iterations) on one
CPU (``--cpu 1``), printing each step's duration. It runs

  alone          nothing else on the server
  beside a hog   alice's job allocates 4 x its ``--memory 256Mi`` over and over: each run is
                 OOM-killed at its limit and restarted at once (``--restart-policy OnFailure``)
  beside a bomb  alice's job forks until it cannot (the pids limit), every process spinning on
                 fork()

and the median step time of each is printed, with the ratios to the time alone (goal: within
1.25). alice's job has ``--cpu 1`` too: what it does beyond that is throttled by its cgroup, and
its memory and processes stay within its own limits.

    .venv/bin/python bench/noisy_neighbour.py [--steps 200] [--work 300000] [--up-arg=--max-pids=1024]

Not a test: prints figures (bench/README.md, "Isolation between jobs").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import Server, write_package  # noqa: E402
from tests.e2e.test_account_cli import User  # noqa: E402

STEPS = """\
import os, sys, time
work = int(os.environ["WORK"])
for step in range(int(os.environ["STEPS"])):
    t = time.perf_counter()
    x = 0
    for i in range(work):
        x += i * i
    print(f"step {step} {time.perf_counter() - t:.6f}", flush=True)
"""
HOG = "x = bytearray(4 * 256 * 2**20)\nprint('survived', flush=True)\n"
BOMB = """\
import os, time
print("bombing", flush=True)
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
STEP = re.compile(r"^step (\d+) ([0-9.]+)$", re.M)


def _bob(srv: Server, base: Path) -> User:
    admin = User(srv, Path(srv.env["PADDLECLOUD_CONFIG"]))
    token = admin.json("admin", "create-user", "bob")["token"]
    bob = User(srv, base / "bob" / "config")
    bob.login(token, "--user", "bob")
    return bob


def _steps(bob: User, pkg: Path, name: str, steps: int, work: int) -> list[float]:
    bob.cli("submit", str(pkg), "--name", name, "--entry", "python steps.py", "--cpu", "1",
            "--env", f"STEPS={steps}", "--env", f"WORK={work}", "--wait")  # fmt: skip
    job = bob.json("describe", name)
    if job["phase"] != "Succeeded":
        raise SystemExit(f"{name}: {job['phase']} {job['message']}")
    times = [float(m.group(2)) for m in STEP.finditer(bob.cli("logs", name).stdout)]
    return times[5:]  # the first steps warm up


def _neighbour(alice: User, pkg: Path, name: str, entry: str, *extra: str) -> None:
    alice.cli("submit", str(pkg), "--name", name, "--entry", entry, "--cpu", "1", "--memory", "256Mi",
              *extra)  # fmt: skip
    deadline = time.monotonic() + 120
    while alice.json("describe", name)["phase"] not in ("Running", "Failed", "Succeeded"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not start")
        time.sleep(0.5)
    time.sleep(3)  # well under way


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--work", type=int, default=300_000)
    parser.add_argument("--up-arg", action="append", default=[])
    args = parser.parse_args()
    cpus = str(os.cpu_count() or 2)
    with platform(up_args=["--node-cpu", cpus, *args.up_arg]) as (srv, _client, base):
        alice = User(srv, Path(srv.env["PADDLECLOUD_CONFIG"]))
        bob = _bob(srv, base)
        steps = write_package(base / "steps", {"steps.py": STEPS})
        hog = write_package(base / "hog", {"hog.py": HOG})
        bomb = write_package(base / "bomb", {"bomb.py": BOMB})
        results = {"alone": _steps(bob, steps, "alone", args.steps, args.work)}
        again = ("--restart-policy", "OnFailure", "--max-restarts", "1000", "--restart-backoff", "0")
        _neighbour(alice, hog, "hog", "python hog.py", *again)
        results["beside a hog"] = _steps(bob, steps, "beside-hog", args.steps, args.work)
        hogged = alice.json("describe", "hog")
        alice.cli("kill", "hog", "--grace", "1", check=False)  # it may have run out of restarts
        _neighbour(alice, bomb, "bomb", "python bomb.py", *again)
        results["beside a bomb"] = _steps(bob, steps, "beside-bomb", args.steps, args.work)
        bombed = alice.json("describe", "bomb")
        alice.cli("kill", "bomb", "--grace", "1", check=False)
    alone = statistics.median(results["alone"])
    print(f"bob's step ({args.work} loop iterations, 1 CPU), median of {args.steps - 5} steps:")
    for label, values in results.items():
        med, p90 = statistics.median(values), statistics.quantiles(values, n=10)[-1]
        print(f"  {label:14} {med * 1000:7.2f} ms   x{med / alone:.3f}   (p90 {p90 * 1000:.2f} ms)")
    restarts = sum(w.get("restarts", 0) for w in hogged["workers"])
    reason = hogged["workers"][0]["reason"]
    print(f"  the hog: {restarts} OOM kills and restarts while bob ran; last reason {reason!r}")
    w = bombed["workers"][0]
    last = f"{w['reason'] or w['state']} {w['message']}"
    print(f"  the bomb: {w['restarts']} runs while bob ran; its last: {last}")


if __name__ == "__main__":
    main()
