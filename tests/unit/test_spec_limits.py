"""Submit refuses what can be known to be wrong then, with a 422 naming the field (issue 11).

Each case was accepted with 201 on 005407f: specs whose workers cannot be started (a NUL byte, an
environment over the kernel's limits), absurd or zero resources (``cpu: "99999999999999999999"``
waited forever), numbers written as strings (``"3"`` was taken as 3), a job that no node of this
fixed-capacity cluster (one node: 4 cpu, 8Gi, no GPU) could ever hold. Through the real app and the
SDK, with a real package, so that only the rule under test can refuse the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import paddlecloud
from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.client import Client
from paddlecloud.controller import Platform

MakePackage = Callable[[dict[str, str]], Path]
Post = Callable[[dict[str, Any]], PaddleCloudError | None]

KIB = 1024


@pytest.fixture
def post(alice: Client, make_package: MakePackage) -> Post:
    """``post(over)``: submit a small valid spec changed by ``over`` (nested dicts merged); the error
    the server answered, or None for 201."""
    package = alice.upload_package(make_package({"main.py": "print(1)\n"}), "j").path
    count = iter(range(1000))

    def run(over: dict[str, Any]) -> PaddleCloudError | None:
        body: dict[str, Any] = {
            "name": f"j{next(count)}",
            "package": package,
            "entry": "python main.py",
            "trainers": {"cpu": "100m", "memory": "64Mi"},
        }
        for key, value in over.items():
            body[key] = {**body[key], **value} if isinstance(body.get(key), dict) else value
        try:
            alice.request("POST", "/jobs", json=body)
        except PaddleCloudError as err:
            return err
        return None

    return run


def refused(err: PaddleCloudError | None, code: str, field: str, *words: str) -> None:
    assert err is not None, "accepted (201)"
    assert (err.http_status, str(err.code), err.field) == (422, code, field), err.message
    for w in words:
        assert w in err.message


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"entry": "python main.py\x00 --x"}, "entry", ["NUL byte"]),
        ({"env": {"TOKEN": "a\x00b"}}, "env", ["TOKEN", "NUL byte"]),
        ({"env": {f"V{i}": "x" for i in range(257)}}, "env", ["257 variables", "at most 256"]),
        ({"env": {"BIG": "x" * (65 * KIB)}}, "env", ["at most 65536", "in a file"]),
        ({"env": {f"V{i}": "x" * 300 for i in range(220)}}, "env", ["bytes of variables", "at most 65536"]),
        ({"input": "/pfs/local/home/alice/\x00x"}, "input", ["NUL byte"]),  # was invalid_path, field "path"
        ({"entry": "x" * 4097}, "entry", ["at most 4096"]),
    ],
    ids=[
        "nul-entry",
        "nul-env",
        "env-entries",
        "env-value-bytes",
        "env-total-bytes",
        "nul-path",
        "long-entry",
    ],
)
def test_a_spec_whose_workers_could_not_be_started_is_refused(
    post: Post, over: dict[str, Any], field: str, words: list[str]
) -> None:
    refused(post(over), "invalid_spec", field, *words)


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"trainers": {"memory": "0"}}, "trainers.memory", ["less than 1Mi", "512Mi"]),
        ({"trainers": {"cpu": "0"}}, "trainers.cpu", ["zero", "500m"]),
        (
            {"trainers": {"cpu": "99999999999999999999"}},
            "trainers.cpu",
            ["more than 1024 cores", "ask for less"],
        ),
        ({"trainers": {"memory": "65Ti"}}, "trainers.memory", ["more than 64Ti"]),
        ({"pservers": {"count": 1, "cpu": "0m"}}, "pservers.cpu", ["zero"]),
        ({"pservers": {"count": 1, "memory": "1"}}, "pservers.memory", ["less than 1Mi"]),
        ({"trainers": {"cpu": "1" * 40}}, "trainers.cpu", ["40 characters"]),
        ({"trainers": {"gpu": 17}}, "trainers.gpu", ["less than or equal to 16"]),
    ],
    ids=[
        "memory-0",
        "cpu-0",
        "cpu-absurd",
        "memory-absurd",
        "pserver-cpu-0",
        "pserver-memory-1",
        "cpu-long",
        "gpu-17",
    ],
)
def test_zero_and_absurd_resources_are_refused(
    post: Post, over: dict[str, Any], field: str, words: list[str]
) -> None:
    refused(post(over), "invalid_spec", field, *words)


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"trainers": {"count": "3"}}, "trainers.count"),
        ({"trainers": {"gpu": "0"}}, "trainers.gpu"),
        ({"trainers": {"count": 1.0}}, "trainers.count"),
        ({"pservers": {"count": True}}, "pservers.count"),
        ({"max_restarts": "3"}, "max_restarts"),
        ({"restart_backoff_max_s": "30"}, "restart_backoff_max_s"),
        ({"priority": 5.0}, "priority"),
        ({"retry_exit_codes": ["3"], "trainers": {"restart": "ExitCode"}}, "retry_exit_codes.0"),
        ({"tasks": {"items": ["a"], "num_passes": "2"}}, "tasks.num_passes"),
    ],
)
def test_numbers_are_not_taken_from_strings(post: Post, over: dict[str, Any], field: str) -> None:
    refused(post(over), "invalid_spec", field)


def test_the_documented_conveniences_stay(post: Post) -> None:
    assert post({"priority": "high"}) is None  # a priority class name
    assert post({"priority": "-5"}) is None  # the CLI's --priority N of earlier versions
    assert post({"restart_backoff_s": 2}) is None  # an integer where seconds are a float


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        (
            {"trainers": {"cpu": "64"}},
            "trainers",
            ["a trainer needs cpu 64", "largest node has cpu 4, memory 8Gi"],
        ),
        ({"trainers": {"memory": "16Gi"}}, "trainers", ["memory 16Gi", "largest node has"]),
        ({"trainers": {"gpu": 1}}, "trainers", ["gpu 1", "largest node has cpu 4, memory 8Gi"]),
        ({"pservers": {"count": 1, "cpu": "5"}}, "pservers", ["a pserver needs cpu 5", "--pscpu"]),
        (
            {"trainers": {"count": 5, "cpu": "1"}},
            "trainers",
            ["5 trainers (cpu 1", "1 node, cpu 4, memory 8Gi in all"],
        ),
        (
            {
                "framework": "paddle-ps",
                "pservers": {"count": 2, "cpu": "2"},
                "trainers": {"count": 1, "cpu": "1"},
            },
            "trainers",
            ["2 pservers (cpu 2", "1 trainer (cpu 1, memory 64Mi) do not fit"],
        ),
    ],
    ids=["cpu", "memory", "gpu", "pserver", "gang", "gang-with-pservers"],
)
def test_a_job_no_node_could_ever_hold_is_refused_with_the_capacity(
    post: Post, over: dict[str, Any], field: str, words: list[str]
) -> None:
    err = post(over)
    refused(err, "exceeds_capacity", field, *words, "--queue-anyway")


def test_an_elastic_job_needs_only_its_minimum_to_fit(post: Post) -> None:
    assert post({"trainers": {"count": 3, "min": 1, "max": 8, "cpu": "2"}}) is None


def test_queue_anyway_queues_it_with_a_reason_that_says_it_fits_no_node(
    post: Post, alice: Client, platform: Platform
) -> None:
    assert post({"name": "huge", "trainers": {"cpu": "64"}, "queue_anyway": True}) is None
    platform.reconciler.tick()
    job = alice.job("huge")
    assert (job.phase, job.reason) == ("Queued", "ExceedsNodeCapacity")
    assert "largest node has cpu 4" in job.message
    assert job.spec.queue_anyway is True


def test_a_cluster_that_may_grow_queues_such_a_job(post: Post, platform: Platform, alice: Client) -> None:
    """Without ``fixed-capacity`` (Kubernetes may autoscale) the job is queued, as before."""
    backend = platform.ctx.backend
    backend.capabilities = frozenset(c for c in backend.capabilities if c != "fixed-capacity")
    assert post({"name": "later", "trainers": {"cpu": "64"}}) is None
    platform.reconciler.tick()
    assert alice.job("later").reason == "ExceedsNodeCapacity"


def test_the_sdk_says_queue_anyway_too(alice: Client, make_package: MakePackage) -> None:
    pkg = make_package({"main.py": "print(1)\n"})
    with pytest.raises(PaddleCloudError) as err:
        paddlecloud.train(pkg, name="sdk-huge", entry="python main.py", cpu="64", client=alice)
    assert str(err.value.code) == "exceeds_capacity"
    job = paddlecloud.train(
        pkg, name="sdk-huge", entry="python main.py", cpu="64", queue_anyway=True, client=alice
    )
    assert (job.phase, job.spec.queue_anyway) == ("Queued", True)
