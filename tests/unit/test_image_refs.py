"""Container images per job, the user's side (issue 27): references parsed once
(``core/imageref.py``), ``JobSpec.image`` stored in its canonical form, refused at submit on a backend
that cannot run images, handed to one that can (``JobLaunch.image``), and the Kubernetes backend's
pods run it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from memory_platform import MemoryWorld
from pydantic import ValidationError

from paddlecloud.api.errors import Conflict, ErrorCode
from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import Capability, JobLaunch
from paddlecloud.backends.kubernetes import pods
from paddlecloud.backends.kubernetes.launch import training_job
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.kubernetes.spec import read_job
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.cli import jobs as cli_jobs
from paddlecloud.core.imageref import ImageRef, ImageRefError, parse_image_ref
from paddlecloud.scheduler import WorkerPlacement

__all__: list[str] = []

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("127.0.0.1:5000/train:1", ImageRef("127.0.0.1:5000", "train", "1")),
        ("localhost/team/train", ImageRef("localhost", "team/train", "latest")),
        (
            "registry.example/a.b/c_d/e__f/g-h:v1.2_x",
            ImageRef("registry.example", "a.b/c_d/e__f/g-h", "v1.2_x"),
        ),
        (f"reg.example:443/train@{DIGEST}", ImageRef("reg.example:443", "train", None, DIGEST)),
        (f"reg.example/train:1@{DIGEST}", ImageRef("reg.example", "train", "1", DIGEST)),
    ],
)
def test_a_reference_parses_into_registry_repository_tag_and_digest(text: str, ref: ImageRef) -> None:
    assert parse_image_ref(text) == ref
    assert parse_image_ref(str(ref)) == ref  # the canonical form reads back the same


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("train:1", "names no registry"),
        ("team/train:1", "names no registry"),  # Docker would add docker.io: the platform never does
        ("127.0.0.1:5000/Train:1", "repository part 'Train'"),
        ("127.0.0.1:5000/train:-x", "tag '-x'"),
        ("127.0.0.1:5000/train:" + "t" * 129, "tag"),
        ("127.0.0.1:5000/train@sha256:abc", "digest"),
        ("127.0.0.1:5000/tr ain", "no spaces"),
        ("127.0.0.1:5000/train\x00", "control characters"),
        ("bad_host.example/train", "registry 'bad_host.example'"),
        ("127.0.0.1:5000//train", "repository part ''"),
        ("reg.example/" + "a" * 256, "1 to 255"),
        ("", "1 to 512"),
    ],
)
def test_a_bad_reference_says_what_to_change(text: str, says: str) -> None:
    with pytest.raises(ImageRefError, match=says.replace("(", r"\(")):
        parse_image_ref(text)


def _spec(**image: str) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "fit", "package": "/pfs/local/home/u/p.tgz", "entry": "x", **image}
    )


def test_the_spec_keeps_the_canonical_reference_and_refuses_a_bad_one() -> None:
    assert _spec(image="localhost/train").image == "localhost/train:latest"
    assert _spec().image is None
    with pytest.raises(ValidationError, match="names no registry"):
        _spec(image="train")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print('hi')\n")
    return pkg


def test_a_backend_without_images_refuses_the_job_at_submit(tmp_path: Path, package: Path) -> None:
    world = MemoryWorld(tmp_path)
    try:
        alice = world.client("alice")
        with pytest.raises(Conflict, match="cannot run jobs in container images") as err:
            world.submit(alice, "fit", package, image="127.0.0.1:5000/train:1")
        assert err.value.code == ErrorCode.IMAGES_UNAVAILABLE
        assert alice.jobs() == []  # nothing was kept of it
    finally:
        world.close()


def test_a_backend_with_images_is_handed_the_jobs_image(tmp_path: Path, package: Path) -> None:
    world = MemoryWorld(tmp_path, capabilities=ALL | {Capability.IMAGES})
    try:
        alice = world.client("alice")
        world.submit(alice, "fit", package, image="127.0.0.1:5000/train")
        world.tick()
        assert world.engine.jobs["alice/fit"].launch.image == "127.0.0.1:5000/train:latest"
        assert alice.job("fit").spec.image == "127.0.0.1:5000/train:latest"  # describe shows it
    finally:
        world.close()


def _launch(tmp_path: Path, image: str | None) -> JobLaunch:
    return JobLaunch(
        key="alice/fit", user="alice", name="fit", framework="torch", entry="python train.py",
        package=tmp_path / "p.tgz", output_dir=tmp_path, placement=(WorkerPlacement("trainer", 0, "n1"),),
        package_path="/pfs/local/home/alice/jobs/fit/package.tar.gz", image=image,
    )  # fmt: skip


def test_kubernetes_pods_run_the_jobs_image_or_the_servers_default(tmp_path: Path) -> None:
    settings = KubeSettings(image="python:3.11-slim")
    mine = read_job(training_job(_launch(tmp_path, "127.0.0.1:5000/train:1"), settings, "local"))
    plain = read_job(training_job(_launch(tmp_path, None), settings, "local"))

    def images(pod: dict[str, object]) -> set[str]:
        spec = pod["spec"]
        assert isinstance(spec, dict)
        return {c["image"] for c in spec["containers"]} | {c["image"] for c in spec.get("initContainers", [])}

    mine_pod, plain_pod = pods.pod(mine, pods.TRAINER, 0, 0), pods.pod(plain, pods.TRAINER, 0, 0)
    assert {c["image"] for c in mine_pod["spec"]["containers"]} == {"127.0.0.1:5000/train:1"}
    assert {c["image"] for c in plain_pod["spec"]["containers"]} == {"python:3.11-slim"}
    # the install init container runs in the job's image too (its python installs the requirements)
    assert "127.0.0.1:5000/train:1" in images(mine_pod)
    assert "python:3.11-slim" not in images(mine_pod)


def test_submit_image_puts_the_reference_in_the_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent: dict[str, Any] = {}

    class FakeClient:
        def submit(self, spec: dict[str, Any], package_dir: Path) -> SimpleNamespace:
            sent.update(spec)
            return SimpleNamespace(name=spec["name"], phase="Queued", message="")

    monkeypatch.setattr(cli_jobs, "Client", FakeClient)
    args = [str(tmp_path), "--name", "j", "--entry", "x", "--image", "127.0.0.1:5000/train:1"]
    result = CliRunner().invoke(cli_jobs.submit, args)
    assert result.exit_code == 0, result.output
    assert sent["image"] == "127.0.0.1:5000/train:1"
    sent.clear()
    assert CliRunner().invoke(cli_jobs.submit, args[:-2]).exit_code == 0
    assert "image" not in sent  # no --image: the spec says nothing of one
