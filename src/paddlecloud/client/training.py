"""``paddlecloud.train(...)``: submit a job from Python in one call, like the seed's ``paddle.dist.train``.

import paddlecloud
job = paddlecloud.train("examples/fit_a_line", entry="python train.py", framework="paddle-ps",
                        pservers=2, trainers=2, wait=True)
print(job.phase, job.output_dir)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paddlecloud.api.models import Framework, JobDetail, PserverSpec, RestartPolicy, TrainerSpec
from paddlecloud.client.client import Client

__all__ = ["train"]


def train(
    package: str | Path,
    *,
    entry: str,
    name: str | None = None,
    framework: str = "none",
    trainers: int = 1,
    pservers: int = 0,
    cpu: str = "500m",
    memory: str = "512Mi",
    gpu: int = 0,
    env: dict[str, str] | None = None,
    input: str | None = None,
    output: str | None = None,
    restart_policy: str = "Never",
    max_restarts: int | None = None,
    queue_anyway: bool = False,
    expected_duration_s: float | None = None,
    image: str | None = None,
    wait: bool = False,
    timeout: float | None = None,
    client: Client | None = None,
) -> JobDetail:
    """Upload ``package``, submit it, and (with ``wait``) block until it ends. Returns the job.

    ``restart_policy`` (``Never``, ``OnFailure``, ``ExitCode``) applies to trainers and pservers;
    ``max_restarts`` limits restarts over the whole job (the server's default when None).
    ``queue_anyway`` queues a job that no node of a fixed-capacity cluster could hold (by default
    the server refuses it with ``exceeds_capacity``, naming the capacity).
    ``expected_duration_s``: how long it runs at ``trainers``, for the start-time estimates
    (docs/scheduler.md). ``image``: the container image the workers run in,
    ``REGISTRY/REPOSITORY[:TAG][@DIGEST]`` (backends that declare ``images``; docs/cli.md).
    """
    client = client or Client()
    job_name = name or Path(package).resolve().name.replace("_", "-").lower()
    spec: dict[str, Any] = {
        "name": job_name,
        "entry": entry,
        "framework": Framework(framework).value,
        "pservers": PserverSpec(
            count=pservers, cpu=cpu, memory=memory, restart=RestartPolicy(restart_policy)
        ).model_dump(),
        "trainers": TrainerSpec(
            count=trainers, cpu=cpu, memory=memory, gpu=gpu, restart=RestartPolicy(restart_policy)
        ).model_dump(exclude_none=True),
        "env": env or {},
    }
    if max_restarts is not None:
        spec["max_restarts"] = max_restarts
    if queue_anyway:
        spec["queue_anyway"] = True
    if expected_duration_s is not None:
        spec["expected_duration_s"] = expected_duration_s
    if image is not None:
        spec["image"] = image
    if input:
        spec["input"] = input
    if output:
        spec["output"] = output
    job = client.submit(spec, package_dir=package)
    return client.wait(job.name, timeout=timeout) if wait else job
