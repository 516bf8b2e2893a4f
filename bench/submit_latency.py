"""Benchmark: time from submit to all trainers running, for a job of 8 trainers (`sleep 30`).

Starts a real server on loopback (fresh data dir), submits through the SDK, polls the job every 5 ms
until its 8 trainer processes run, then kills it. Prints cold (first job: builds the empty runtime
environment) and warm figures. Goal: <= 1 s.

    .venv/bin/python bench/submit_latency.py [--runs 10]
    eval "$(scripts/ensure-registry.sh start)"
    .venv/bin/python bench/submit_latency.py --image "$PADDLECLOUD_TEST_IMAGE" [--runs 10]
    eval "$(scripts/ensure-slurm.sh start)"; .venv/bin/python bench/submit_latency.py --backend slurm --runs 5

With ``--backend slurm`` the trainers are Slurm jobs on the private cluster of
``scripts/ensure-slurm.sh`` (3 nodes of 4 CPUs): each asks for a whole CPU (``--cpu 1``), as Slurm
allocates whole CPUs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import write_package  # noqa: E402

from paddlecloud.client import Client  # noqa: E402


def one_run(client: Client, pkg: Path, name: str, cpu: str = "100m", image: str = "") -> tuple[float, float]:
    spec: dict[str, object] = {"name": name, "entry": "sleep 30", "framework": "none",
                               "trainers": {"count": 8, "cpu": cpu, "memory": "64Mi"}}  # fmt: skip
    if image:
        spec["image"] = image
    t0 = time.perf_counter()
    client.submit(spec, package_dir=pkg)
    t_ack = time.perf_counter() - t0
    deadline = t0 + 30
    while True:
        workers = client.workers(name)
        if len(workers) == 8 and all(w.state == "Running" for w in workers):
            break
        if time.perf_counter() > deadline:
            raise SystemExit(f"{name}: trainers not running after 30 s")
        time.sleep(0.005)
    t_run = time.perf_counter() - t0
    client.kill(name, grace=1)
    client.delete(name)
    return t_ack, t_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--backend", choices=["local", "slurm"], default="local")
    ap.add_argument("--image", default="", help="run the trainers in this image (the first job pulls it)")
    args = ap.parse_args()
    up_args, cpu = None, "100m"
    if args.backend == "slurm":
        up_args, cpu = ["--backend", "slurm"], "1"
    with platform(up_args) as (_, client, base):
        pkg = write_package(base / "pkg", {"README": "sleep job\n"})
        cold = one_run(client, pkg, "cold", cpu, args.image)
        warm = [one_run(client, pkg, f"warm-{i}", cpu, args.image) for i in range(args.runs)]
    runs = [w[1] for w in warm]
    acks = [w[0] for w in warm]
    print(
        f"submit -> 8 trainers running on the {args.backend} backend (framework none, entry `sleep 30`, "
        f"cpu {cpu}{', image ' + args.image if args.image else ''}), real server on loopback"
    )
    first = "pulls the image" if args.image else "builds the empty runtime env"
    print(f"  cold (first job, {first}): {cold[1]:.3f} s")
    print(f"  warm, {len(runs)} runs: median {statistics.median(runs):.3f} s, "
          f"min {min(runs):.3f} s, max {max(runs):.3f} s   (goal <= 1 s)")  # fmt: skip
    print(f"  submit acknowledged (upload + commit): median {statistics.median(acks):.3f} s")


if __name__ == "__main__":
    main()
