"""What the local backend's sandbox costs a worker start (``backends/local/sandbox.py``).

For each run: ``WorkerProc.spawn`` of a worker whose entry is ``true``, in a job environment with no
requirements, until its launcher has exited (launcher start, the entry, the exit status written),
with isolation ``sandbox`` and ``none`` alternately. Prints the median, min and max of each and the
difference of the medians.

    .venv/bin/python bench/sandbox_spawn.py [--runs 20] [--entry true]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.local.backend import LocalBackend
from paddlecloud.backends.local.envs import EnvCache
from paddlecloud.backends.local.process import WorkerProc
from paddlecloud.backends.local.sandbox import JobJail, choose, worker_base_env


def spawn_once(root: Path, run: int, jail: JobJail | None, entry: str, env: dict[str, str]) -> float:
    job = root / "jobs" / "bench" / f"spawn-{run}"
    cwd = job / "workers" / "trainer-0"
    cwd.mkdir(parents=True)
    w = WorkerProc(
        name="trainer-0", role="trainer", index=0, node="node-0", endpoint="127.0.0.1:1", gpus=(),
        cwd=cwd, run_dir=job / "run", log_path=job / "logs" / "trainer-0.0.log",
    )  # fmt: skip
    start = time.perf_counter()
    w.spawn(entry, env, time.time(), jail)
    assert w.popen is not None
    rc = w.popen.wait()
    took = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"the worker failed (exit {rc}): {w.log_path.read_text()[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--entry", default="true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        root = Path(tmp).resolve()
        shim = LocalBackend._install_runtime_shim(root / "pythonpath")  # the backend's own shim
        box, isolation = choose("sandbox", shim, gpus=False)
        assert box is not None
        env_dir = EnvCache(root / "envs").ensure("", root / "prepare.log")
        home, public = root / "pfs" / "home" / "bench", root / "pfs" / "public"
        output = home / "jobs" / "spawn" / "output"
        output.mkdir(parents=True)
        public.mkdir(parents=True)
        launch = JobLaunch(
            key="bench/spawn", user="bench", name="spawn", framework="none", entry=args.entry,
            package=root / "package.tar.gz", output_dir=output, placement=(),
            home_dir=home, public_dir=public,
        )  # fmt: skip
        jail = box.jail(launch, env_dir)
        envs = {
            mode: worker_base_env(os.environ, (), sandboxed=mode == "sandbox", env_dir=env_dir, shim=shim,
                                  user="bench")
            for mode in ("sandbox", "none")
        }  # fmt: skip
        times: dict[str, list[float]] = {"sandbox": [], "none": []}
        for run in range(args.runs + 1):  # run 0 of each warms the page cache and is dropped
            for mode in ("sandbox", "none"):
                took = spawn_once(
                    root / mode, run, jail if mode == "sandbox" else None, args.entry, envs[mode]
                )
                if run:
                    times[mode].append(took)
    print(f"isolation: {isolation}")
    print(f"worker start to launcher exit, entry {args.entry!r}, {args.runs} runs each (alternating):")
    for mode, values in times.items():
        ms = [v * 1000 for v in values]
        print(f"  {mode:8} median {statistics.median(ms):6.1f} ms   min {min(ms):6.1f}   max {max(ms):6.1f}")
    extra = (statistics.median(times["sandbox"]) - statistics.median(times["none"])) * 1000
    print(f"  sandbox overhead: {extra:+.1f} ms per worker start (median difference)")


if __name__ == "__main__":
    main()
