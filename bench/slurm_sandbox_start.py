"""What the sandbox costs a Slurm worker's start (``backends/slurm/jail.py``).

On the private cluster of ``scripts/ensure-slurm.sh`` (``eval`` its ``start`` first), two figures,
with isolation ``sandbox`` and ``none`` alternately, median, min and max of each:

- **through Slurm**: ``SlurmBackend.start`` of a job of one trainer (framework none, node n1) whose
  program prints the time it started -> that time (sbatch, Slurm's scheduling, the batch script,
  the jail and bwrap or the bare launcher, the program's interpreter);
- **on the node alone**: the batch script's command run as a plain process, entry ``true``, until
  it exits: ``python -I -m paddlecloud.backends.slurm.jail SPEC`` (reads the spec, builds the
  jail, execs bwrap, which runs the launcher under the job's interpreter) or ``python -m
  paddlecloud.runtime.launcher`` (none).

    eval "$(scripts/ensure-slurm.sh start)"; .venv/bin/python bench/slurm_sandbox_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from paddlecloud.backends.base import JobLaunch, LogRequest
from paddlecloud.backends.local.envs import install_runtime_shim
from paddlecloud.backends.local.sandbox import JobJail, WorkerDirs, choose, worker_base_env
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.backends.slurm.jail import JailSpec
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

MODES = ("sandbox", "none")
PROGRAM = "import time; print('started', repr(time.time()), flush=True)\n"


def _package(root: Path) -> Path:
    path = root / "package.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("main.py")
        info.size = len(PROGRAM)
        tar.addfile(info, io.BytesIO(PROGRAM.encode()))
    return path


def through_slurm(backend: SlurmBackend, root: Path, run: int) -> float:
    name = f"start{run}"
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
    found = re.search(r"^started (\S+)$", log, re.M)
    if status.failure or not found:
        raise SystemExit(f"{launch.key}: {status.failure or 'no start time'}\n{log[-2000:]}")
    backend.forget(launch.key)
    return float(found.group(1)) - t0


def on_the_node(root: Path, mode: str, run: int) -> float:
    """The batch script's command for one worker, entry ``true``, as Slurm would start it."""
    shim = root / "slurm-sandbox" / "pythonpath"
    job = root / "node" / mode / str(run)
    cwd, status = job / "workers" / "trainer-0", job / "run" / "trainer-0.0"
    cwd.mkdir(parents=True)
    status.mkdir(parents=True)
    exit_json = status / "exit.json"
    launcher = ["-m", "paddlecloud.runtime.launcher", "--status", str(exit_json), "--cwd", str(cwd), "true"]
    if mode == "sandbox":
        box, _ = choose("sandbox", shim, gpus=False)
        assert box is not None
        home = root / "pfs" / "home" / "bench"
        jail = JobJail(box, "bench", Path(sys.prefix), (("--bind-fd", home, True),))
        dirs = WorkerDirs(cwd=cwd, status=status, tmp=job / "tmp" / "trainer-0", hostname="trainer-0-bench")
        JailSpec.of(jail, dirs, launcher, gpus=False).write(job / "run" / "trainer-0.0.jail.json")
        argv = [
            sys.executable,
            "-I",
            "-m",
            "paddlecloud.backends.slurm.jail",
            str(job / "run" / "trainer-0.0.jail.json"),
        ]
    else:
        argv = [sys.executable, *launcher]
    env = worker_base_env(
        os.environ, (), sandboxed=mode == "sandbox", env_dir=Path(sys.prefix), shim=shim, user="bench"
    )
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _report(title: str, times: dict[str, list[float]]) -> None:
    print(title)
    for mode, values in times.items():
        ms = [v * 1000 for v in values]
        print(f"  {mode:8} median {statistics.median(ms):7.1f} ms   min {min(ms):7.1f}   max {max(ms):7.1f}")
    extra = (statistics.median(times["sandbox"]) - statistics.median(times["none"])) * 1000
    print(f"  sandbox overhead: {extra:+.1f} ms per worker start (median difference)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ:
        raise SystemExit('no Slurm cluster: eval "$(scripts/ensure-slurm.sh start)" first')
    with tempfile.TemporaryDirectory(prefix="slurm-sandbox-bench-") as tmp:
        root = Path(tmp).resolve()
        for d in ("pfs/home/bench", "pfs/public"):
            (root / d).mkdir(parents=True)
        _package(root)
        backends = {
            mode: SlurmBackend(
                SlurmSettings(root=root / f"slurm-{mode}", isolation=mode), time.time, lambda: None
            )
            for mode in MODES
        }
        install_runtime_shim(root / "slurm-sandbox" / "pythonpath")
        slurm: dict[str, list[float]] = {m: [] for m in MODES}
        node: dict[str, list[float]] = {m: [] for m in MODES}
        for run in range(args.runs + 1):  # run 0 of each warms caches and is dropped
            for mode in MODES:
                took = through_slurm(backends[mode], root, run * 2 + MODES.index(mode))
                took_node = on_the_node(root, mode, run)
                if run:
                    slurm[mode].append(took)
                    node[mode].append(took_node)
    print(f"isolation sandbox: {backends['sandbox'].confinement().description}")
    _report(f"through Slurm: start -> the program's first statement, {args.runs} runs each:", slurm)
    _report(f"on the node alone: the batch script's command, entry 'true', {args.runs} runs each:", node)


if __name__ == "__main__":
    main()
