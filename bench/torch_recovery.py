"""Benchmark: how fast an elastic PyTorch job trains again after one of its trainers is killed.

Starts a real server on loopback (bench/_server.py: a fresh data dir, one virtual node of
``--trainers`` CPUs; builds the job's PyTorch environment) and submits examples/torch_ddp as an
elastic job
(``--framework torch --entry "torchrun train.py" --trainers 2 --min-instance 1 --max-instance 4
--cpu 1``: with 2 CPUs it stays at 2 trainers) with ``PROGRESS_EVERY`` set, so rank 0 prints
``step S epoch E world W at T started T0`` every few optimizer steps. Then, ``--kills`` times, once
steps flow in a group of every trainer: SIGKILL the process group of a trainer picked by
``random.Random(--seed)`` (its torchrun agent and its worker) and measure, from the job's log files
(polled every 10 ms)

  - kill -> training steps flowing again: the first step line of a worker started after the kill
    (the survivors' new group, whatever its size); also printed: when that worker entered main()
  - kill -> the job back at full size: the first such line with every trainer in the world (the
    killed trainer was restarted by its OnFailure policy and rejoined)

Then the job is killed (it would train for ``EPOCHS``). Not a test.

    .venv/bin/python bench/torch_recovery.py [--kills 10] [--seed 1] [--env PET_RDZV_CONF=...]
        [--backoff S] [--keep-logs DIR]

``--env K=V`` is passed to the job (``submit --env``; it wins over the platform's variables), e.g. to
compare rendezvous settings; ``--backoff`` sets ``--restart-backoff`` (default: the platform's).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402

from paddlecloud.client import Client  # noqa: E402

EXAMPLE = ROOT / "examples" / "torch_ddp"
JOB = "torch-elastic"
STEP = re.compile(r"^step (\d+) epoch (\d+) world (\d+) at ([0-9.]+) started ([0-9.]+)$", re.M)


@dataclass
class Steps:
    """Step lines of every run of every trainer, read as the log files grow."""

    logs: Path
    offsets: dict[Path, int] = field(default_factory=dict)
    #: (at, started, world)
    seen: list[tuple[float, float, int]] = field(default_factory=list)

    def poll(self) -> None:
        for path in sorted(self.logs.glob("trainer-*.log")):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # whole lines only
            self.offsets[path] = self.offsets.get(path, 0) + end
            for m in STEP.finditer(chunk[:end].decode(errors="replace")):
                self.seen.append((float(m.group(4)), float(m.group(5)), int(m.group(3))))

    def first(self, since: float, world: int = 0) -> tuple[float, float] | None:
        """The first step of a worker started after ``since`` (in a world of ``world`` trainers,
        0: any): when it was logged, and when its worker (rank 0) started."""
        found = [
            (at, started) for at, started, w in self.seen if started > since and (not world or w == world)
        ]
        return min(found) if found else None

    def wait(self, since: float, world: int, timeout: float) -> tuple[float, float]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.poll()
            step = self.first(since, world)
            if step is not None:
                return step
            time.sleep(0.01)
        raise SystemExit(
            f"no step of a group started after {since:.3f} (world {world or 'any'}) in {timeout} s"
        )


def measure(
    client: Client, steps: Steps, kills: int, trainers: int, seed: int
) -> list[tuple[str, float, float]]:
    rng = random.Random(seed)
    results = []
    since = 0.0
    for _ in range(kills):
        full, _ = steps.wait(since, trainers, 600)  # steps flow with every trainer in the group ...
        while time.time() < full + 2.0:  # ... for a moment (the group is past its start-up)
            time.sleep(0.05)
        victim = rng.choice([f"trainer-{i}" for i in range(trainers)])
        pid = next(w.pid for w in client.workers(JOB) if w.name == victim)
        assert pid is not None
        t0 = time.time()
        os.killpg(pid, signal.SIGKILL)
        at, started = steps.wait(t0, 0, 300)
        flowing, back = at - t0, steps.wait(t0, trainers, 300)[0] - t0
        print(
            f"  killed {victim}: steps again after {flowing:6.2f} s (that group's rank 0 in its "
            f"main() after {started - t0:5.2f} s), all {trainers} trainers after {back:6.2f} s"
        )
        results.append((victim, flowing, back))
        since = t0
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--progress-every", type=int, default=5, help="optimizer steps per step line")
    ap.add_argument("--backoff", type=float, default=None, help="--restart-backoff (default: the platform's)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="more job env (submit --env)")
    ap.add_argument("--keep-logs", type=Path, help="copy the job's log files here at the end")
    args = ap.parse_args()
    extra = [] if args.backoff is None else ["--restart-backoff", str(args.backoff)]
    for kv in args.env:
        extra += ["--env", kv]
    with platform(["--node-cpu", str(args.trainers), "--node-memory", "32Gi"]) as (srv, client, _):
        srv.cli(
            "submit", str(EXAMPLE), "--name", JOB, "--framework", "torch", "--entry", "torchrun train.py",
            "--trainers", str(args.trainers), "--min-instance", "1", "--max-instance", "4", "--cpu", "1",
            "--max-restarts", str(10 * args.kills + 10), "--env", "EPOCHS=100000",
            "--env", f"PROGRESS_EVERY={args.progress_every}", *extra,
        )  # fmt: skip
        srv.wait_phase(JOB, {"Running"}, timeout=600)
        logs = Path(next(w.log for w in client.workers(JOB) if w.name == "trainer-0")).parent
        print(
            f"torch_ddp elastic (torchrun, min 1, max 4, {args.trainers} trainers on "
            f"{args.trainers} CPUs), {args.kills} kills of a random trainer (seed {args.seed}; SIGKILL "
            f"to its process group), real server on loopback"
            f"{'; env ' + ' '.join(args.env) if args.env else ''}"
            f"{'' if args.backoff is None else f'; restart backoff {args.backoff:g} s'}"
        )
        results = measure(client, Steps(logs), args.kills, args.trainers, args.seed)
        job = client.job(JOB)
        restarts = sum(1 for e in job.events if e.reason == "WorkerRestarted")
        client.kill(JOB, grace=1)
        if args.keep_logs:
            shutil.copytree(logs, args.keep_logs, dirs_exist_ok=True)
    for label, xs in (
        ("steps flowing again", [r[1] for r in results]),
        ("all trainers training", [r[2] for r in results]),
    ):
        print(
            f"  kill -> {label:22s} median {statistics.median(xs):6.2f} s, max {max(xs):6.2f} s "
            f"(min {min(xs):.2f} s)"
        )
    print(f"  job {job.phase} until killed; {restarts} trainer restarts by the platform")


if __name__ == "__main__":
    main()
