"""Benchmark: time from submit to all trainers running, for a job of 8 trainers (`sleep 30`).

Starts a real server on loopback (fresh data dir), submits through the SDK, polls the job every 5 ms
until its 8 trainer processes run, then kills it. Prints cold (first job: builds the empty runtime
environment) and warm figures. Goal: <= 1 s. With ``--image`` the same jobs also run in that image,
alternating with the ones without, in the same server: the first one's pull (the image's size, the
time to pull and unpack it), and the warm difference (issue 27's goal: <= 2 s).

    .venv/bin/python bench/submit_latency.py [--runs 10]
    eval "$(scripts/ensure-registry.sh start)"
    .venv/bin/python bench/submit_latency.py --image "$PADDLECLOUD_TEST_IMAGE" [--runs 10]
    eval "$(scripts/ensure-registry.sh train)"   # the training image: 466 MiB compressed, 1.3 GB unpacked
    .venv/bin/python bench/submit_latency.py --image "$PADDLECLOUD_TRAIN_IMAGE" --runs 5
    eval "$(scripts/ensure-slurm.sh start)"; .venv/bin/python bench/submit_latency.py --backend slurm --runs 5

With ``--backend slurm`` the trainers are Slurm jobs on the private cluster of
``scripts/ensure-slurm.sh`` (3 nodes of 4 CPUs): each asks for a whole CPU (``--cpu 1``), as Slurm
allocates whole CPUs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _server import platform  # noqa: E402
from tests.e2e.conftest import write_package  # noqa: E402

from paddlecloud.client import Client  # noqa: E402


def one_run(
    client: Client, pkg: Path, name: str, cpu: str = "100m", image: str = "", timeout: float = 30
) -> tuple[float, float, list[str]]:
    """(submit acknowledged, all 8 running, the job's event messages) in seconds."""
    spec: dict[str, object] = {"name": name, "entry": "sleep 30", "framework": "none",
                               "trainers": {"count": 8, "cpu": cpu, "memory": "64Mi"}}  # fmt: skip
    if image:
        spec["image"] = image
    t0 = time.perf_counter()
    client.submit(spec, package_dir=pkg)
    t_ack = time.perf_counter() - t0
    deadline = t0 + timeout
    while True:
        workers = client.workers(name)
        if len(workers) == 8 and all(w.state == "Running" for w in workers):
            break
        if time.perf_counter() > deadline:
            raise SystemExit(
                f"{name}: trainers not running after {timeout:.0f} s: {client.job(name).message}"
            )
        time.sleep(0.005)
    t_run = time.perf_counter() - t0
    said = [e.message for e in client.job(name).events]
    client.kill(name, grace=1)
    client.delete(name)
    return t_ack, t_run, said


def _pull(said: list[str]) -> str:
    """What the first job's events say of its pull: the image's size and how long it took."""
    sizes = [m.group(1) for e in said if (m := re.search(r"/ (\d+) MiB\)", e))]
    ready = [m.group(1) for e in said if (m := re.search(r"ready in ([0-9.]+) s", e))]
    size, took = sizes[-1] if sizes else "?", ready[-1] if ready else "?"
    return f"{size} MiB compressed, pulled and unpacked in {took} s"


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
        cold = one_run(client, pkg, "cold", cpu)
        cold_image = one_run(client, pkg, "cold-image", cpu, args.image, timeout=1800) if args.image else None
        warm, warm_image = [], []
        for i in range(args.runs):  # alternating, so both see the same machine
            warm.append(one_run(client, pkg, f"warm-{i}", cpu))
            if args.image:
                warm_image.append(one_run(client, pkg, f"warm-image-{i}", cpu, args.image))
    print(
        f"submit -> 8 trainers running on the {args.backend} backend (framework none, entry `sleep 30`, "
        f"cpu {cpu}), real server on loopback"
    )
    _report("without an image", cold, warm, "builds the empty runtime env")
    if cold_image is not None:
        print(f"  {args.image}: {_pull(cold_image[2])}")
        _report(f"in {args.image}", cold_image, warm_image, "pulls the image, makes its venv")
        delta = statistics.median(r[1] for r in warm_image) - statistics.median(r[1] for r in warm)
        print(f"  warm, in the image minus without: {delta:+.3f} s (goal <= 2 s)")


def _report(what: str, cold: tuple[float, float, list[str]], warm: list[tuple[float, float, list[str]]],
            first: str) -> None:  # fmt: skip
    runs = [w[1] for w in warm]
    acks = [w[0] for w in warm]
    print(f"  {what}:")
    print(f"    cold (first job, {first}): {cold[1]:.3f} s")
    print(f"    warm, {len(runs)} runs: median {statistics.median(runs):.3f} s, "
          f"min {min(runs):.3f} s, max {max(runs):.3f} s   (goal <= 1 s)")  # fmt: skip
    print(f"    submit acknowledged (upload + commit): median {statistics.median(acks):.3f} s")


if __name__ == "__main__":
    main()
