"""Adaptive batch size on Kubernetes: the TrainingJob's ``spec.batch`` (schema, what the platform writes
from a launch) becomes the workers' ``PADDLECLOUD_BATCH_*`` variables; ``spec.env`` wins (the platform
writes the batch it assigned there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kube_helpers import training_job
from test_kube_crd import check
from test_kube_objects import env_of

from paddlecloud.api.adaptive import BatchRange, BatchSpec, LrRule
from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.kubernetes import pods
from paddlecloud.backends.kubernetes.launch import training_job as launch_job
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.kubernetes.spec import read_job
from paddlecloud.scheduler import WorkerPlacement

BATCH = {"size": 64, "min": 32, "max": 512, "lrRule": "sqrt"}


def test_a_batch_validates_and_becomes_the_workers_variables() -> None:
    job = training_job(batch=BATCH)
    check(job)
    env = env_of(pods.pod(read_job(job), pods.TRAINER, 0, 0))
    got = {k: v for k, v in env.items() if "BATCH" in k or "LR_RULE" in k}
    assert got == {
        "PADDLECLOUD_BATCH_SIZE": "64", "PADDLECLOUD_BATCH_MIN": "32", "PADDLECLOUD_BATCH_MAX": "512",
        "PADDLECLOUD_BATCH_INIT": "64", "PADDLECLOUD_LR_RULE": "sqrt",
    }  # fmt: skip


def test_the_assigned_batch_in_env_wins_and_a_fixed_batch_sets_nothing() -> None:
    job = read_job(training_job(batch=BATCH, env={"PADDLECLOUD_BATCH_SIZE": "256"}))
    env = env_of(pods.pod(job, pods.TRAINER, 0, 0))
    assert (env["PADDLECLOUD_BATCH_SIZE"], env["PADDLECLOUD_BATCH_INIT"]) == ("256", "64")
    fixed = env_of(pods.pod(read_job(training_job(batch={"size": 64})), pods.TRAINER, 0, 0))
    assert not any("BATCH" in k for k in fixed)


@pytest.mark.parametrize(
    "batch",
    [{"size": 0}, {"min": 1, "max": 2}, {"size": 8, "lrRule": "cubic"}, {"size": 2**25}, {"size": 8, "x": 1}],
    ids=["zero", "no-size", "rule", "too-large", "unknown"],
)
def test_bad_batches_are_refused(batch: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        check(training_job(batch=batch))


def test_the_platform_writes_an_adaptive_launch_into_the_training_job(tmp_path: Path) -> None:
    batch = BatchSpec(size=64, adaptive=BatchRange(min=32, max=512), lr_rule=LrRule.LINEAR)
    launch = JobLaunch(
        key="alice/fit", user="alice", name="fit", framework="torch", entry="python train.py",
        package=tmp_path / "p.tgz", output_dir=tmp_path, placement=(WorkerPlacement("trainer", 0, "n1"),),
        env={"PADDLECLOUD_BATCH_SIZE": "128"}, package_path="/pfs/local/home/alice/jobs/fit/package.tar.gz",
        batch=batch,
    )  # fmt: skip
    obj = launch_job(launch, KubeSettings(image="python:3.11"), "local")
    assert obj["spec"]["batch"] == {"size": 64, "min": 32, "max": 512, "lrRule": "linear"}
    check(obj)
    env = env_of(pods.pod(read_job(obj), pods.TRAINER, 0, 0))
    assert (env["PADDLECLOUD_BATCH_SIZE"], env["PADDLECLOUD_LR_RULE"]) == ("128", "linear")
    fixed = JobLaunch(**{**launch.__dict__, "batch": BatchSpec(size=64)})
    assert "batch" not in launch_job(fixed, KubeSettings(image="python:3.11"), "local")["spec"]
