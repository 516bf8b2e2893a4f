"""The local backend runs a job's workers in its container image (issue 27): the image pulled once
at Preparing (its progress as events), its root file system the sandbox's system, its python3
running the platform's launcher, the job's PFS places and output as without an image; what cannot
work fails the job at Preparing with what to change.

The image is the test bed's (``scripts/ensure-registry.sh``): Debian 12 with python3 and
``/etc/paddlecloud-image``, a file this host does not have."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.registry_bed import Bed

from paddlecloud.api.models import JobDetail
from paddlecloud.backends.images import ImageStore
from paddlecloud.backends.local.sandbox import Sandbox, WorkerDirs
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.imageref import parse_image_ref

__all__: list[str] = []

MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]

pytestmark = pytest.mark.timeout(300)

#: the longest a job in an image may take here: a pull and unpack, a venv, pip (a loaded machine)
IMAGE_JOB_S = 180

PROBE = {
    "probe.py": """\
import json, os, sys
from pathlib import Path
out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
seen = {
    "marker": Path("/etc/paddlecloud-image").read_text(),
    "python": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": sys.version.split()[0],
    "host_python": Path(sys.argv[1]).exists(),
    "path": os.environ["PATH"],
    "virtual_env": os.environ.get("VIRTUAL_ENV"),
    "role": os.environ["PADDLECLOUD_ROLE"],
}
(out / f"seen-{os.environ['PADDLECLOUD_TRAINER_ID']}.json").write_text(json.dumps(seen))
print("ran in", seen["marker"].strip(), flush=True)
"""
}


def _submit(client: Client, pkg: Path, name: str, image: str, trainers: int = 2) -> None:
    body = {
        "name": name, "entry": f"python probe.py {sys.executable}", "image": image,
        "trainers": {"count": trainers, "cpu": "250m", "memory": "256Mi"},
    }  # fmt: skip
    client.submit(body, package_dir=pkg)


def test_each_worker_runs_in_the_image(
    bed: Bed, platform: Platform, alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    pkg = make_package(PROBE)
    _submit(alice, pkg, "inimage", bed.image)
    job = drive(alice, "inimage", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert job.phase == "Succeeded", (job.message, alice.logs("inimage", worker="trainer-0"))
    for i in range(2):
        seen = json.loads((Path(job.output_dir) / f"seen-{i}.json").read_text())
        assert seen["marker"].startswith("built for the PaddleCloud image tests")  # only the image has it
        # the job's environment, a venv the image's own Python made: not the host's (3.11.7 here)
        assert seen["base_prefix"] == "/usr" and seen["version"] != sys.version.split()[0], seen
        assert seen["python"] == f"{seen['prefix']}/bin/python" and seen["virtual_env"] == seen["prefix"]
        assert seen["host_python"] is False  # the server's own Python is not there
        assert seen["path"].startswith(f"{seen['prefix']}/bin:/usr/local/sbin"), seen["path"]
        assert seen["role"] == "trainer"
    said = [e.message for e in alice.job("inimage").events]
    assert any(m.startswith(f"Pulling {bed.image}") for m in said), said
    assert any(m.startswith(f"{bed.image} is sha256:") for m in said), said


def test_the_second_job_on_an_image_pulls_nothing(
    bed: Bed, platform: Platform, alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    pkg = make_package(PROBE)
    _submit(alice, pkg, "first", bed.image, trainers=1)
    assert drive(alice, "first", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S).phase == "Succeeded"
    _submit(alice, pkg, "second", bed.image, trainers=1)
    job = drive(alice, "second", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert job.phase == "Succeeded", job.message
    said = [e.message for e in alice.job("second").events]
    assert not any("MiB)" in m for m in said), said  # no pull progress: the digest was cached


@pytest.mark.parametrize(
    ("image", "reason", "says"),
    [
        ("{registry}/paddlecloud-test/base:no-such-tag", "ImageNotFound", "is not on"),
        ("{private}", "ImageUnauthorized", "paddlecloud image login"),
        ("127.0.0.1:9/paddlecloud-test/base:2", "RegistryUnreachable", "cannot reach"),
    ],
)
def test_an_image_that_cannot_be_pulled_fails_the_job_at_preparing(
    bed: Bed, platform: Platform, alice: Client, make_package: MakePackage, drive: Drive,
    image: str, reason: str, says: str,
) -> None:  # fmt: skip
    ref = image.format(registry=bed.registry, private=bed.private_image)
    _submit(alice, make_package(PROBE), "nopull", ref, trainers=1)
    job = drive(alice, "nopull", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert (job.phase, job.reason) == ("Failed", reason), job.message
    assert says in job.message and bed.password not in job.message


SIX = {
    "probe.py": """\
import os, sys
from pathlib import Path
import six
out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
(out / "six.txt").write_text(f"{six.__file__} {sys.base_prefix}")
""",
    "requirements.txt": "six\n",
}


def test_requirements_are_installed_by_the_images_python_once_per_image_and_content(
    bed: Bed, platform: Platform, alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    _submit(alice, make_package(SIX), "withreq", bed.image, trainers=1)
    job = drive(alice, "withreq", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert job.phase == "Succeeded", (job.message, "".join(alice.logs("withreq", worker="prepare")))
    where, base = (Path(job.output_dir) / "six.txt").read_text().split()
    assert base == "/usr" and "/lib/python3.11/site-packages/six.py" in where  # in the job's venv
    built = "".join(alice.logs("withreq", worker="prepare"))
    assert "installing requirements.txt with the image's /usr/bin/python3" in built, built
    _submit(alice, make_package(SIX), "again", bed.image, trainers=1)
    job = drive(alice, "again", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert job.phase == "Succeeded", job.message
    assert (Path(job.output_dir) / "six.txt").read_text().split()[0] == where  # the same environment
    assert "installing" not in "".join(alice.logs("again", worker="prepare"))  # nothing built again


def test_requirements_the_images_python_cannot_install_fail_at_preparing_with_what_to_do(
    bed: Bed, platform: Platform, alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    reqs = {**PROBE, "requirements.txt": "paddlecloud-no-such-package-exists==0.0.1\n"}
    _submit(alice, make_package(reqs), "badreq", bed.image, trainers=1)
    job = drive(alice, "badreq", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert (job.phase, job.reason) == ("Failed", "ImageUnusable"), job.message
    assert "the image's Python (/usr/bin/python3) could not install requirements.txt" in job.message
    assert "use an image whose Python can" in job.message
    assert "paddlecloud-no-such-package-exists" in "".join(alice.logs("badreq", worker="prepare"))


READS = {
    "reads.py": """\
import json, os
from pathlib import Path
out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
seen = {}
for path in json.loads(os.environ["TARGETS"]):
    try:
        with open(path, "rb") as f:
            seen[path] = f.read(64).decode(errors="replace")
    except OSError as exc:
        seen[path] = f"refused: {type(exc).__name__}"
(out / "reads.json").write_text(json.dumps(seen))
"""
}


def test_a_job_in_an_image_reads_nothing_of_the_data_dir_nor_other_users_files(
    bed: Bed, platform: Platform, alice: Client, client_for: Callable[..., Client],
    make_package: MakePackage, drive: Drive,
) -> None:  # fmt: skip
    bob = client_for("bob")
    bob.registry_login(bed.private_registry, bed.user, bed.password)  # the server's key file exists now
    data = platform.ctx.config.data_dir
    home = platform.files.local_path(platform.files.home("bob"))
    assert home is not None
    bobs = home / "secret.txt"
    bobs.parent.mkdir(parents=True, exist_ok=True)
    bobs.write_text("bob's secret\n")
    mine = home.parent / "alice" / "mine.txt"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("alice's own\n")
    key = data / "secrets" / "registry.key"
    db = next(data.glob("*.db"))
    targets = [str(bobs), str(key), str(db), str(mine)]
    body = {"name": "reads", "entry": "python reads.py", "image": bed.image,
            "env": {"TARGETS": json.dumps(targets)}, "trainers": {"count": 1, "cpu": "250m"}}  # fmt: skip
    alice.submit(body, package_dir=make_package(READS))
    job = drive(alice, "reads", {"Succeeded", "Failed"}, timeout=IMAGE_JOB_S)
    assert job.phase == "Succeeded", job.message
    seen = json.loads((Path(job.output_dir) / "reads.json").read_text())
    assert seen[str(mine)] == "alice's own\n"  # her own home is there
    for path in (bobs, key, db):
        assert seen[str(path)].startswith("refused"), (path, seen[str(path)])


def test_a_host_folder_under_opt_gets_its_mount_point_in_an_image(bed: Bed, tmp_path: Path) -> None:
    """The image's /opt is bound entry by entry in a folder of the sandbox's own, so a platform
    place of the host under /opt (a data dir, pip's wheels) is bound there too; before, bwrap could
    not make its mount point in the image's read-only /opt and the job failed."""
    image = ImageStore(tmp_path / "images").ensure(parse_image_ref(bed.image))
    host = Path("/opt") / f"paddlecloud-test-{uuid.uuid4().hex[:8]}"
    host.mkdir()
    try:
        (host / "f").write_text("from the host\n")
        box = Sandbox(tmp_path, gpus=False)
        assert box.probe() is None
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        dirs = WorkerDirs(cwd=cwd, status=cwd, tmp=tmp_path / "tmp", hostname="probe")
        argv = ["/usr/bin/cat", str(host / "f"), "/etc/paddlecloud-image"]
        binds = ["--ro-bind", str(host), str(host), "--bind", str(cwd), str(cwd)]
        with box._command("alice", dirs, binds, [], argv, image.rootfs) as cmd:
            r = subprocess.run(cmd.argv, pass_fds=cmd.fds, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("from the host\nbuilt for the PaddleCloud image tests"), r.stdout
    finally:
        shutil.rmtree(host)
