"""Benchmark: the adaptive torch example against the same example at a fixed batch, on the same
contended cluster. Not a test.

One server (bench/_server.py: a fresh data dir, one virtual node of 4 CPUs, the default policy). A
warm-up run builds the job's PyTorch environment first, so no timed run pays for it. Then, per run
and in the order given: a blocker job holds 3 of the 4 CPUs; examples/torch_ddp is submitted in its
adaptive mode (``--env ADAPTIVE=1 --env EPOCHS=N``, torchrun, elastic 1..4 trainers of 1 CPU,
``--batch-size 32``), so it starts on 1 trainer; ``--hold`` seconds after it starts training (its
log's ``adaptive:`` line) the blocker is killed and the scheduler grows the job to 4 trainers.
The two modes differ only in the spec:

- ``adaptive``: ``--adaptive-batch-size 32:1024``: the job reports its gradient noise scale and step
  time, and the scheduler picks the global batch when it grows the job (AdaScale LR gain);
- ``fixed``: no ``--adaptive-batch-size``: the same program keeps the global batch 32 (the API answers
  ``not_adaptive``; it measures nothing, reports nothing, gain 1).

Both train the same length: EPOCHS epochs at the initial batch (the adaptive job's progress counts
``gain x 32`` samples per step). Printed per run: wall time from Running to Succeeded and from
submit, the final test accuracy, the global batches trained at, the job's BatchSize events.

    .venv/bin/python bench/adaptive_torch.py [--epochs 16] [--hold 10] [--order fixed,adaptive,...]

``--probe PYTHON`` instead runs bench/_adaptive_probe.py under ``PYTHON -m torch.distributed.run``
(an interpreter with torch) on 1, 2 and 4 local processes: the helper's per-step overhead against
plain DDP, and its noise estimate on a problem whose noise scale is known.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import Server, free_port, write_package  # noqa: E402

EXAMPLE = ROOT / "examples" / "torch_ddp"
INIT = 32


def _wait(srv: Server, name: str, phases: set[str], timeout: float) -> dict[str, Any]:
    return srv.wait_phase(name, phases, timeout=timeout)


def run(srv: Server, mode: str, index: int, epochs: int, hold: float) -> dict[str, Any]:
    blocker = write_package(
        Path(srv.data_dir).parent / "blocker", {"main.py": "import time\ntime.sleep(900)\n"}
    )
    hold_name, name = f"hold-{index}", f"{mode}-{index}"
    srv.cli("submit", str(blocker), "--name", hold_name, "--entry", "python main.py", "--trainers", "3",
            "--cpu", "1")  # fmt: skip
    _wait(srv, hold_name, {"Running"}, 120)
    adaptive = ["--adaptive-batch-size", f"{INIT}:1024"] if mode == "adaptive" else []
    submitted = time.monotonic()
    srv.cli(
        "submit", str(EXAMPLE), "--name", name, "--framework", "torch", "--entry", "torchrun train.py",
        "--trainers", "1", "--min-instance", "1", "--max-instance", "4", "--cpu", "1",
        "--batch-size", str(INIT), *adaptive, "--env", "ADAPTIVE=1", "--env", f"EPOCHS={epochs}",
    )  # fmt: skip
    _wait(srv, name, {"Running"}, 600)
    running = time.monotonic()
    logs = srv.data_dir / "cluster/jobs/default" / name / "logs"
    while "adaptive: global batch" not in _read(logs):
        assert time.monotonic() - running < 600, f"{name} never started training"
        time.sleep(0.5)
    time.sleep(hold)  # training on 1 trainer (the adaptive job reports 2 s after it starts)
    srv.cli("kill", hold_name, "--grace", "1")
    job = _wait(srv, name, {"Succeeded", "Failed"}, 1800)
    done = time.monotonic()
    text = _read(logs)
    acc = re.findall(r"final accuracy ([0-9.]+)$", text, re.M)
    batches = sorted({int(b) for b in re.findall(r"progress [0-9.]+ global batch (\d+)", text)})
    events = [e["message"] for e in job["events"] if e["reason"] == "BatchSize"]
    return {
        "mode": mode, "phase": job["phase"], "running_s": done - running, "submit_s": done - submitted,
        "accuracy": float(acc[-1]) if acc else None, "batches": batches, "events": events,
    }  # fmt: skip


def _read(logs: Path) -> str:
    return "".join(p.read_text() for p in sorted(logs.glob("trainer-*")))


def live(epochs: int, hold: float, order: list[str]) -> None:
    with platform(up_args=["--node-cpu", "4"]) as (srv, _client, _base):
        try:
            runs(srv, epochs, hold, order)
        finally:  # jobs outlive their server: stop them first
            for job in srv.json("get", "jobs")["items"]:
                srv.cli("kill", job["name"], "--grace", "1", check=False)


def runs(srv: Server, epochs: int, hold: float, order: list[str]) -> None:
    srv.cli("submit", str(EXAMPLE), "--name", "warmup", "--framework", "torch", "--entry",
            "python train.py", "--trainers", "1", "--cpu", "1", "--env", "EPOCHS=1")  # fmt: skip
    _wait(srv, "warmup", {"Succeeded"}, 900)
    results = []
    for i, mode in enumerate(order):
        r = run(srv, mode, i, epochs, hold)
        results.append(r)
        print(
            f"{mode:8s} {r['phase']}: {r['running_s']:.1f} s from Running ({r['submit_s']:.1f} s from "
            f"submit), accuracy {r['accuracy']}, global batches {r['batches']}, events {r['events']}",
            flush=True,
        )
    for mode in sorted(set(order)):
        times = [float(r["running_s"]) for r in results if r["mode"] == mode]
        print(f"{mode:8s} median {statistics.median(times):.1f} s over {len(times)} run(s)")


def probe(python: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    for n in (1, 2, 4):
        cmd = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-port",
               str(free_port()), str(ROOT / "bench" / "_adaptive_probe.py")]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        lines = [x for x in out.stdout.splitlines() if x.startswith(("overhead", "noise"))]
        print("\n".join(lines) if lines else out.stderr[-2000:], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=16, help="training length: epochs at the initial batch")
    ap.add_argument(
        "--hold", type=float, default=15.0, help="seconds the blocker holds 3 CPUs after the start"
    )
    ap.add_argument("--order", default="fixed,adaptive", help="runs, in order (comma-separated modes)")
    ap.add_argument(
        "--probe", metavar="PYTHON", help="measure the helper's overhead and noise estimate instead"
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that the server and its jobs are stopped
    if args.probe:
        probe(args.probe)
        return
    order = [m for m in args.order.split(",") if m]
    if not order or set(order) - {"fixed", "adaptive"}:
        ap.error("--order takes fixed and adaptive, comma-separated")
    live(args.epochs, args.hold, order)


if __name__ == "__main__":
    main()
