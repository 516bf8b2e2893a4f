"""A user's registry logins (``paddlecloud image login``): stored sealed, listed without a password,
used for that user's pulls only, and never seen in a job's events, logs or environment."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from tests.registry_bed import Bed

from paddlecloud.api.errors import InvalidInput, NotFound
from paddlecloud.api.models import JobDetail
from paddlecloud.cli import images as cli_images
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.store.tables import RegistryLoginRow

__all__: list[str] = []

MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]

pytestmark = pytest.mark.timeout(300)

ENV_DUMP = {
    "dump.py": """\
import json, os
from pathlib import Path
out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
(out / "env.json").write_text(json.dumps(dict(os.environ)))
print("marker:", Path("/etc/paddlecloud-image").read_text().strip(), flush=True)
"""
}


def _submit(client: Client, pkg: Path, name: str, image: str) -> None:
    body = {"name": name, "entry": "python dump.py", "image": image, "trainers": {"count": 1, "cpu": "250m"}}
    client.submit(body, package_dir=pkg)


def test_a_login_is_stored_sealed_and_listed_without_its_password(
    bed: Bed, platform: Platform, alice: Client, client_for: Callable[..., Client]
) -> None:
    alice.registry_login(bed.private_registry, bed.user, bed.password)
    [login] = alice.registry_logins()
    assert (login.registry, login.username) == (bed.private_registry, bed.user)
    assert bed.password not in login.model_dump_json()
    assert client_for("bob").registry_logins() == []  # nobody else sees it
    with platform.ctx.session() as s:
        row = s.scalar(select(RegistryLoginRow))
        assert row is not None and bed.password.encode() not in row.secret
    key = platform.ctx.config.data_dir / "secrets" / "registry.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    alice.registry_logout(bed.private_registry)
    assert alice.registry_logins() == []
    with pytest.raises(NotFound, match="no login"):
        alice.registry_logout(bed.private_registry)
    with pytest.raises(InvalidInput, match="registry"):
        alice.registry_login("not a registry!", bed.user, bed.password)


def test_a_private_image_pulls_with_its_owners_login_only(
    bed: Bed, platform: Platform, alice: Client, client_for: Callable[..., Client],
    make_package: MakePackage, drive: Drive,
) -> None:  # fmt: skip
    bob = client_for("bob")
    alice.registry_login(bed.private_registry, bed.user, bed.password)
    pkg = make_package(ENV_DUMP)
    _submit(bob, pkg, "bobs", bed.private_image)  # bob gave no credentials: alice's are not his
    job = drive(bob, "bobs", {"Succeeded", "Failed"}, timeout=180)
    assert (job.phase, job.reason) == ("Failed", "ImageUnauthorized"), job.message
    _submit(alice, pkg, "alices", bed.private_image)
    job = drive(alice, "alices", {"Succeeded", "Failed"}, timeout=180)
    assert job.phase == "Succeeded", job.message
    env = json.loads((Path(job.output_dir) / "env.json").read_text())
    assert not [k for k, v in env.items() if bed.password in v]  # not in the worker's environment
    detail = alice.job("alices")
    assert bed.password not in detail.model_dump_json()  # nor in describe (events, spec, message)
    logs = "".join(alice.logs("alices", worker="trainer-0"))
    assert "marker: built for the PaddleCloud image tests" in logs and bed.password not in logs
    prepare = "".join(alice.logs("alices", worker="prepare"))
    assert bed.password not in prepare


def test_cli_login_reads_the_password_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, str]] = []

    class FakeClient:
        def registry_login(self, registry: str, username: str, password: str) -> None:
            sent.append((registry, username, password))

    monkeypatch.setattr(cli_images, "Client", FakeClient)
    args = ["login", "127.0.0.1:5001", "-u", "me", "--password-stdin"]
    result = CliRunner().invoke(cli_images.image, args, input="s3cret\n")
    assert result.exit_code == 0, result.output
    assert sent == [("127.0.0.1:5001", "me", "s3cret")] and "s3cret" not in result.output
    no_tty = CliRunner().invoke(cli_images.image, args[:-1], input="s3cret\n")
    assert no_tty.exit_code == 2 and "--password-stdin" in no_tty.output
