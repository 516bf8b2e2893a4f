"""What the sandbox costs a Slurm worker's start (``backends/slurm/jail.py``).

On the private cluster of ``scripts/ensure-slurm.sh`` (``eval`` its ``start`` first): per run,
``SlurmBackend.start`` of a job of one trainer (framework none, node n1) whose program prints the
time it started, with isolation ``sandbox`` and ``none`` alternately. The batch script also prints
the time it began (``date``, before its usual command), which splits the start in two:

- start -> batch script: the server's part (package, spec, ``sbatch``) and Slurm's scheduling;
- batch script -> the program's first statement: the node's part, where the sandbox is (the jail's
  Python, bwrap, then the launcher and the program's interpreter, as without it).

Median, min and max of each, and the differences of the medians.

    eval "$(scripts/ensure-slurm.sh start)"; .venv/bin/python bench/slurm_sandbox_start.py [--runs 9]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from paddlecloud.backends.base import JobLaunch, LogRequest
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.backends.slurm.script import BatchScripts
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

MODES = ("sandbox", "none")
PROGRAM = "import time; print('started', repr(time.time()), flush=True)\n"
PARTS = ("start -> program", "start -> batch script", "batch script -> program")


class StampedScripts(BatchScripts):
    """Batch scripts that print when they began, before their usual command."""

    def sbatch(self, *args: Any) -> tuple[list[str], dict[str, str]]:
        argv, env = super().sbatch(*args)
        return [a.replace("--wrap=exec ", "--wrap=date +batch%s.%N; exec ", 1) for a in argv], env


class StampedBackend(SlurmBackend):
    """The Slurm backend with :class:`StampedScripts`."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        s = self._scripts
        self._scripts = StampedScripts(s.settings, s.pythonpath, s.sandbox)


def one_start(backend: SlurmBackend, root: Path, name: str) -> tuple[float, float, float]:
    home = root / "pfs" / "home" / "bench"
    launch = JobLaunch(
        key=f"bench/{name}", user="bench", name=name, framework="none", entry="python main.py",
        package=root / "package.tar.gz", output_dir=home / "jobs" / name / "output",
        placement=(WorkerPlacement("trainer", 0, "n1"),), resources={"trainer": Resources(1000, 256 * 2**20)},
        home_dir=home, public_dir=root / "pfs" / "public",
    )  # fmt: skip
    t0 = time.time()
    backend.start(launch)
    deadline = time.monotonic() + 60
    while not (status := backend.sync(launch.key)).finished:
        if time.monotonic() > deadline:
            raise SystemExit(f"{launch.key} did not finish in 60 s: {status}")
        time.sleep(0.1)
    log = b"".join(backend.read_log(LogRequest(launch.key, ("trainer-0",)))).decode()
    batch, program = re.search(r"^batch(\S+)$", log, re.M), re.search(r"^started (\S+)$", log, re.M)
    if status.failure or not batch or not program:
        raise SystemExit(f"{launch.key}: {status.failure or 'no times in its log'}\n{log[-2000:]}")
    backend.forget(launch.key)
    t_batch, t_program = float(batch.group(1)), float(program.group(1))
    return t_program - t0, t_batch - t0, t_program - t_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ:
        raise SystemExit('no Slurm cluster: eval "$(scripts/ensure-slurm.sh start)" first')
    with tempfile.TemporaryDirectory(prefix="slurm-sandbox-bench-") as tmp:
        root = Path(tmp).resolve()
        for d in ("pfs/home/bench", "pfs/public"):
            (root / d).mkdir(parents=True)
        with tarfile.open(root / "package.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo("main.py")
            info.size = len(PROGRAM)
            tar.addfile(info, io.BytesIO(PROGRAM.encode()))
        backends = {
            mode: StampedBackend(SlurmSettings(root=root / mode, isolation=mode), time.time, lambda: None)
            for mode in MODES
        }
        times: dict[str, list[tuple[float, float, float]]] = {m: [] for m in MODES}
        for run in range(args.runs + 1):  # run 0 of each warms caches and is dropped
            for mode in MODES:
                took = one_start(backends[mode], root, f"{mode}{run}")
                if run:
                    times[mode].append(took)
    print(f"isolation sandbox: {backends['sandbox'].confinement().description}")
    print(f"a Slurm worker's start, {args.runs} runs each (alternating), ms: median (min-max)")
    medians = {m: [statistics.median(t[i] for t in times[m]) * 1000 for i in range(3)] for m in MODES}
    for i, part in enumerate(PARTS):
        row = "  ".join(
            f"{m} {medians[m][i]:6.0f} ({min(t[i] for t in times[m]) * 1000:.0f}-"
            f"{max(t[i] for t in times[m]) * 1000:.0f})"
            for m in MODES
        )
        print(f"  {part:24} {row}   sandbox {medians['sandbox'][i] - medians['none'][i]:+.0f}")


if __name__ == "__main__":
    main()
