"""What the isolation between jobs (issue 24) costs: a worker's start, and a whole torch job.

``--part spawn``: worker start to launcher exit (launcher start, the entry ``true``, the exit status
written), median of ``--runs`` alternating runs of:

  before   the sandbox as it was before issue 24: ``env --ignore-signal bwrap ... launcher``, started
           directly by the backend with the log file as its stdout (no monitor, no cgroup, the host's
           network)
  now      ``WorkerProc.spawn`` as the local backend runs it: the run's monitor (``node.monitor``,
           log cap, API relay), a cgroup with memory / CPU / pids limits, the job's network namespace
           (made once per job, as the backend does: its cost is printed on its own), then the sandbox

``--part torch``: the wall time of examples/torch_ddp as an elastic torch job (2 trainers of 1 CPU,
torchrun on the platform's rendezvous store, ``EPOCHS`` epochs) on one real server per mode, from submit to
Succeeded, with ``--isolation sandbox`` (everything) and with ``--isolation none --resource-limits
off`` (nothing: workers on the host's network, no limits, no sandbox), ``--repeat`` times each,
alternating; the job's environment is built first (not timed).

    .venv/bin/python bench/isolation_cost.py --part spawn [--runs 30]
    .venv/bin/python bench/isolation_cost.py --part torch [--epochs 40] [--repeat 3]

Not a test: prints figures (bench/README.md, "Isolation between jobs").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paddlecloud.backends.base import JobLaunch  # noqa: E402
from paddlecloud.backends.local.backend import LocalBackend  # noqa: E402
from paddlecloud.backends.local.envs import EnvCache  # noqa: E402
from paddlecloud.backends.local.isolation import choose_all  # noqa: E402
from paddlecloud.backends.local.process import RunPlan, WorkerProc  # noqa: E402
from paddlecloud.backends.local.sandbox import JobJail, worker_base_env  # noqa: E402
from paddlecloud.node import netns  # noqa: E402
from paddlecloud.node.cgroups import Limits  # noqa: E402


def _worker(root: Path, run: int) -> WorkerProc:
    job = root / "jobs" / "bench" / f"spawn-{run}"
    cwd = job / "workers" / "trainer-0"
    cwd.mkdir(parents=True)
    return WorkerProc(
        name="trainer-0", role="trainer", index=0, node="node-0", endpoint="127.0.0.1:1", gpus=(),
        cwd=cwd, run_dir=job / "run", log_path=job / "logs" / "trainer-0.0.log",
    )  # fmt: skip


def _before(w: WorkerProc, jail: JobJail, entry: str, env: dict[str, str]) -> float:
    """The pre-issue-24 chain: bwrap started by the backend, its output straight into the log."""
    w.log_path.parent.mkdir(parents=True, exist_ok=True)
    w.status_dir.mkdir(parents=True, exist_ok=True)
    launcher = [jail.python, "-m", "paddlecloud.runtime.launcher", "--status", str(w.status_file),
                "--cwd", str(w.cwd), entry]  # fmt: skip
    start = time.perf_counter()
    with jail.wrap(w.dirs(), launcher) as cmd, open(w.log_path, "ab") as log:
        proc = subprocess.Popen(cmd.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=w.cwd, start_new_session=True, pass_fds=cmd.fds)  # fmt: skip
    rc = proc.wait()
    if rc != 0:
        raise SystemExit(f"before: the worker failed (exit {rc}): {w.log_path.read_text()[-2000:]}")
    return time.perf_counter() - start


def _now(w: WorkerProc, jail: JobJail, entry: str, env: dict[str, str], plan: RunPlan) -> float:
    start = time.perf_counter()
    w.spawn(entry, env, time.time(), jail, plan)
    assert w.popen is not None
    rc = w.popen.wait()
    took = time.perf_counter() - start
    w.release_cgroup()
    if rc != 0:
        raise SystemExit(f"now: the worker failed (exit {rc}): {w.log_path.read_text()[-2000:]}")
    return took


def _stats(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"  {label:8} median {statistics.median(ms):6.1f} ms   min {min(ms):6.1f}   max {max(ms):6.1f}"


def spawn(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="isolation-bench-") as tmp:
        root = Path(tmp).resolve()
        shim = LocalBackend._install_runtime_shim(root / "pythonpath")
        confiners = choose_all("sandbox", shim, gpus=False)
        assert confiners.sandbox is not None and confiners.cgroups is not None and confiners.network
        env_dir = EnvCache(root / "envs").ensure("", root / "prepare.log")
        home, public = root / "pfs" / "home" / "bench", root / "pfs" / "public"
        output = home / "jobs" / "spawn" / "output"
        output.mkdir(parents=True)
        public.mkdir(parents=True)
        launch = JobLaunch(
            key="bench/spawn", user="bench", name="spawn", framework="none", entry="true",
            package=root / "package.tar.gz", output_dir=output, placement=(), home_dir=home,
            public_dir=public,
        )  # fmt: skip
        jail = confiners.sandbox.jail(launch, env_dir)
        env = worker_base_env(os.environ, (), sandboxed=True, env_dir=env_dir, shim=shim, user="bench")
        name = netns.name_for(f"bench{os.getpid()}")
        made: list[float] = []
        try:
            t0 = time.perf_counter()
            netns.ensure(netns.JobNet(name))
            made.append(time.perf_counter() - t0)
            plan = RunPlan(
                cgroups=confiners.cgroups, limits=Limits(memory=512 * 2**20, cpu_m=1000, pids=1024),
                names=("bench", "spawn"), netns=name, api_target="127.0.0.1:9", max_log_bytes=100 * 2**20,
            )  # fmt: skip
            times: dict[str, list[float]] = {"before": [], "now": []}
            modes: dict[str, Callable[[WorkerProc], float]] = {
                "before": lambda w: _before(w, jail, "true", env),
                "now": lambda w: _now(w, jail, "true", env, plan),
            }
            for run in range(runs + 1):  # run 0 of each warms the page cache and is dropped
                for mode, go in modes.items():
                    took = go(_worker(root / mode, run))
                    if run:
                        times[mode].append(took)
        finally:
            netns.remove(name)
    print(f"isolation: {confiners.isolation}")
    print(f"worker start to launcher exit, entry 'true', {runs} runs each (alternating):")
    for mode, values in times.items():
        print(_stats(mode, values))
    extra = (statistics.median(times["now"]) - statistics.median(times["before"])) * 1000
    print(f"  the new isolation: {extra:+.1f} ms per worker start (median difference)")
    print(f"  + once per job: its network namespace made in {made[0] * 1000:.1f} ms")


def torch(epochs: int, repeat: int) -> None:
    from _server import platform

    modes = {
        "isolated": ["--isolation", "sandbox"],
        "none": ["--isolation", "none", "--resource-limits", "off"],
    }
    walls: dict[str, list[float]] = {m: [] for m in modes}
    with contextlib.ExitStack() as stack:  # one server per mode for every round (one environment each)
        servers = {
            m: stack.enter_context(platform(up_args=["--node-cpu", "2", *a]))[0] for m, a in modes.items()
        }
        for srv in servers.values():  # each server's torch environment built first: not timed
            srv.cli("submit", str(ROOT / "examples" / "torch_ddp"), "--name", "warm", "--framework", "torch",
                    "--entry", "python -c pass", "--wait", timeout=900)  # fmt: skip
        for i in range(1, repeat + 1):
            for mode, srv in servers.items():
                name = f"elastic-{i}"
                start = time.monotonic()
                srv.cli(
                    "submit", str(ROOT / "examples" / "torch_ddp"), "--name", name, "--framework",
                    "torch", "--entry", "torchrun train.py", "--trainers", "2", "--min-instance", "1",
                    "--max-instance", "2", "--cpu", "1", "--memory", "2Gi", "--env", f"EPOCHS={epochs}",
                    "--wait", timeout=1800,
                )  # fmt: skip
                took = time.monotonic() - start
                phase = srv.job(name)["phase"]
                if phase != "Succeeded":
                    raise SystemExit(f"{mode}: the job ended {phase}: {srv.cli('logs', name).stdout[-2000:]}")
                walls[mode].append(took)
                print(f"  round {i} {mode:8} {took:6.1f} s", flush=True)
    print(f"examples/torch_ddp, elastic, 2 trainers x 1 CPU, EPOCHS={epochs}, submit -> Succeeded:")
    for mode, values in walls.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {mode:8} median {statistics.median(values):6.1f} s   runs {runs}")
    ratio = statistics.median(walls["isolated"]) / statistics.median(walls["none"])
    print(f"  isolated / none: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("spawn", "torch"), default="spawn")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.part == "spawn":
        spawn(args.runs)
    else:
        torch(args.epochs, args.repeat)


if __name__ == "__main__":
    main()
