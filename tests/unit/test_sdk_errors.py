"""In-process SDK error paths: every failure arrives as the PaddleCloudError subclass and code of the
wire contract (``api.errors``), naming the field where there is one."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddlecloud.api import HEADER_API_VERSION
from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    InvalidInput,
    NotFound,
    PackageTooLarge,
    PaddleCloudError,
    Unauthorized,
    VersionMismatch,
    error_from_body,
)
from paddlecloud.api.models import JobDetail
from paddlecloud.client import Client
from paddlecloud.controller import Platform

pytestmark = pytest.mark.timeout(60)

# fixture types (see conftest.py)
MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]

MAIN = {"main.py": "print('hi')\n"}


def test_duplicate_name_is_a_conflict(alice: Client, make_package: MakePackage) -> None:
    pkg = make_package(MAIN)
    alice.submit({"name": "dup", "entry": "python main.py"}, package_dir=pkg)
    with pytest.raises(Conflict) as info:
        alice.submit({"name": "dup", "entry": "python main.py"}, package_dir=pkg)
    assert (info.value.code, info.value.field) == (ErrorCode.JOB_EXISTS, "name")
    assert "dup" in info.value.message
    assert [j.name for j in alice.jobs(all=True)] == ["dup"]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.job("ghost"),
        lambda c: c.workers("ghost"),
        lambda c: c.kill("ghost"),
        lambda c: c.delete("ghost"),
        lambda c: list(c.logs("ghost")),
    ],
    ids=["job", "workers", "kill", "delete", "logs"],
)
def test_unknown_job_is_not_found(alice: Client, call: Callable[[Client], Any]) -> None:
    with pytest.raises(NotFound) as info:
        call(alice)
    assert info.value.code == ErrorCode.JOB_NOT_FOUND
    assert "ghost" in info.value.message


def test_unknown_worker_is_not_found(alice: Client, make_package: MakePackage) -> None:
    alice.submit({"name": "w", "entry": "python main.py"}, package_dir=make_package(MAIN))
    with pytest.raises(NotFound) as info:
        list(alice.logs("w", worker="trainer-9"))
    assert info.value.code == ErrorCode.WORKER_NOT_FOUND


def test_missing_entry_is_caught_before_upload(alice: Client, make_package: MakePackage) -> None:
    with pytest.raises(InvalidInput) as info:
        alice.submit({"name": "e", "entry": "python nothere.py"}, package_dir=make_package(MAIN))
    assert (info.value.code, info.value.field) == (ErrorCode.ENTRY_NOT_FOUND, "entry")
    assert "nothere.py" in info.value.message and "main.py" in info.value.message


def test_missing_entry_is_caught_by_the_server(alice: Client, make_package: MakePackage) -> None:
    package = alice.upload_package(make_package(MAIN), "e")
    assert package.files == 1
    assert package.path == "/pfs/local/home/alice/jobs/e/package.tar.gz"
    with pytest.raises(InvalidInput) as info:
        alice.submit({"name": "e", "entry": "python nothere.py", "package": package.path})
    assert (info.value.code, info.value.field) == (ErrorCode.ENTRY_NOT_FOUND, "entry")
    assert alice.jobs(all=True) == []


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"trainers": {"cpu": "1x"}}, "trainers.cpu", ["'1x'", "cpu"]),
        ({"trainers": {"memory": "1Gb"}}, "trainers.memory", ["'1Gb'"]),
        ({"pservers": {"count": 1, "cpu": "-1"}}, "pservers.cpu", ["'-1'"]),
        ({"trainers": {"count": 0}}, "trainers.count", ["greater than or equal to 1"]),
        ({"trainers": {"count": 3, "max": 2}}, "trainers", ["min <= count <= max"]),
        ({"name": "Bad_Name"}, "name", ["DNS-1123"]),
        ({"env": {"1X": "y"}}, "env", ["environment variable"]),
        ({"gpus": 1}, "gpus", ["Extra inputs"]),
        ({"framework": "paddle-ps"}, None, ["at least 1 pserver"]),
    ],
)
def test_invalid_spec_names_the_field(
    alice: Client, make_package: MakePackage, over: dict[str, Any], field: str | None, words: list[str]
) -> None:
    package = alice.upload_package(make_package(MAIN), "spec")
    body = {"name": "spec", "entry": "python main.py", "package": package.path, **over}
    with pytest.raises(InvalidInput) as info:
        alice.submit(body)
    assert info.value.code == ErrorCode.INVALID_SPEC
    assert info.value.field == field
    for w in words:
        assert w in info.value.message
    if field:
        assert info.value.message.startswith(f"{field}: ")


def test_unknown_package_is_not_found(alice: Client) -> None:
    with pytest.raises(NotFound) as info:
        alice.submit({"name": "p", "entry": "python main.py", "package": "pfs:nothing/here.tar.gz"})
    assert (info.value.code, info.value.field) == (ErrorCode.PATH_NOT_FOUND, "package")
    assert "/pfs/local/home/alice/nothing/here.tar.gz does not exist" in info.value.message


def test_unknown_input_is_not_found(alice: Client, make_package: MakePackage) -> None:
    with pytest.raises(NotFound) as info:
        alice.submit(
            {"name": "i", "entry": "python main.py", "input": "pfs:no-data"}, package_dir=make_package(MAIN)
        )
    assert (info.value.code, info.value.field) == (ErrorCode.PATH_NOT_FOUND, "input")
    assert alice.jobs(all=True) == []


def test_kill_grace_out_of_range(alice: Client, make_package: MakePackage) -> None:
    alice.submit({"name": "g", "entry": "python main.py"}, package_dir=make_package(MAIN))
    with pytest.raises(InvalidInput) as info:
        alice.kill("g", grace=-1)
    assert (info.value.code, info.value.field) == (ErrorCode.INVALID_REQUEST, "grace")
    assert alice.job("g").phase == "Queued"


@pytest.mark.parametrize(
    ("token", "words"), [(None, "no API token"), ("pc_not-a-token", "not recognised")], ids=["none", "bad"]
)
def test_missing_or_bad_token_is_unauthorized(
    client_for: Callable[..., Client], token: str | None, words: str
) -> None:
    client = client_for(None, token=token)
    for call in (client.jobs, client.quota, lambda: client.job("x")):
        with pytest.raises(Unauthorized) as info:
            call()
        assert info.value.code == ErrorCode.UNAUTHORIZED
        assert words in info.value.message
    # health and version need no token
    assert client.health() is True
    assert client.version().api_version >= 1


def test_rotated_token_stops_working(platform: Platform, client_for: Callable[..., Client]) -> None:
    old = client_for("carol")
    assert old.jobs() == []
    platform.ensure_user("carol")  # rotates the token
    with pytest.raises(Unauthorized):
        old.jobs()


@pytest.mark.parametrize("sent", ["0", "abc", "-1"])
def test_old_client_api_version_is_refused(platform: Platform, raw_http: httpx.Client, sent: str) -> None:
    r = raw_http.get("/api/v1/version", headers={HEADER_API_VERSION: sent})
    assert r.status_code == 426
    err = error_from_body(r.status_code, r.json())
    assert type(err) is VersionMismatch
    assert err.code == ErrorCode.CLIENT_TOO_OLD
    assert sent in err.message


def test_sdk_surfaces_client_too_old(platform: Platform, asgi: Callable[[Platform], httpx.Client]) -> None:
    http = asgi(platform)
    client = Client(endpoint="http://testserver", token=platform.ensure_user("dave"), http=http)
    http.headers[HEADER_API_VERSION] = "0"  # pretend to be an ancient client
    with pytest.raises(VersionMismatch) as info:
        client.jobs()
    assert info.value.code == ErrorCode.CLIENT_TOO_OLD


def test_unknown_route_has_an_error_body(raw_http: httpx.Client) -> None:
    r = raw_http.get("/api/v1/no-such-route")
    assert r.status_code == 404
    assert set(r.json()["error"]) >= {"code", "message"}


def _tar_bytes(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        ti = tarfile.TarInfo(name)
        ti.size = 3
        tar.addfile(ti, io.BytesIO(b"bad"))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "not a readable"),
        (b"this is not a tarball", "not a readable"),
        (_tar_bytes("../evil.py"), "unsafe path"),
        (_tar_bytes("/etc/evil"), "unsafe path"),
    ],
    ids=["empty", "garbage", "dotdot", "absolute"],
)
def test_bad_package_is_rejected_at_submit(
    platform: Platform, alice: Client, tmp_path: Path, body: bytes, words: str
) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(body)
    alice.pfs.cp([str(bad)], "pfs:bad.tar.gz")
    with pytest.raises(InvalidInput) as info:
        alice.submit({"name": "bad", "entry": "python main.py", "package": "pfs:bad.tar.gz"})
    assert (info.value.code, info.value.field) == (ErrorCode.INVALID_PACKAGE, "package")
    assert words in info.value.message
    assert alice.jobs(all=True) == []
    assert not (platform.ctx.config.data_dir / "evil.py").exists()


def test_package_size_limit(
    platform_factory: Callable[..., Platform],
    asgi: Callable[[Platform], httpx.Client],
    make_package: MakePackage,
) -> None:
    small = platform_factory(max_package_bytes=4096)
    pkg: Path = make_package(MAIN)
    (pkg / "data.bin").write_bytes(os.urandom(64 * 1024))
    http = asgi(small)
    client = Client(endpoint="http://testserver", token=small.ensure_user("alice"), http=http)
    with pytest.raises(PackageTooLarge) as info:  # refused by the client before uploading
        client.upload_package(pkg, "big")
    assert info.value.code == ErrorCode.PACKAGE_TOO_LARGE
    assert ".paddlecloudignore" in info.value.message
    # and by the server at submit, for an archive put in PFS some other way
    big = pkg.parent / "big.tar.gz"
    big.write_bytes(os.urandom(8192))
    client.pfs.cp([str(big)], "pfs:big.tar.gz")
    with pytest.raises(PackageTooLarge) as info:
        client.submit({"name": "big", "entry": "python main.py", "package": "pfs:big.tar.gz"})
    assert info.value.code == ErrorCode.PACKAGE_TOO_LARGE
    (pkg / ".paddlecloudignore").write_text("*.bin\n")
    assert client.upload_package(pkg, "big").files == 2  # main.py and the ignore file


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_unreadable_stored_package_fails_the_job(
    alice: Client, platform: Platform, make_package: MakePackage, drive: Drive
) -> None:
    job = alice.submit({"name": "rot", "entry": "python main.py"}, package_dir=make_package(MAIN))
    local = platform.ctx.files.local_path(platform.ctx.files.parse(job.spec.package))
    assert local is not None
    local.write_bytes(b"bit rot")
    failed = drive(alice, "rot", {"Failed", "Succeeded"}, timeout=3.0)
    assert failed.phase == "Failed"
    assert "preparing the job failed" in failed.message


def test_a_package_folder_swapped_for_a_link_after_its_check_is_refused(
    platform: Platform, alice: Client, bob: Client, make_package: MakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of alice's can swap a folder of her home for a link to bob's between the submit's
    access check and its read of the package: the read must not follow it (it used to open the
    package by path and list bob's file names in the entry error)."""
    from paddlecloud.controller.services.jobs import JobService

    package = alice.upload_package(make_package(MAIN), "e")
    bob.upload_package(make_package({"bob_secret.py": "print('mine')\n"}), "secret")
    home = platform.files.store.files / "home"  # type: ignore[attr-defined]
    checked = JobService._exists

    def swap_after_check(self: JobService, who: Any, path: str, field: str) -> Any:
        info = checked(self, who, path, field)
        if field == "package":
            (home / "alice" / "jobs" / "e").rename(home / "alice" / "jobs" / "e.moved")
            (home / "alice" / "jobs" / "e").symlink_to("../../bob/jobs/secret")
        return info

    monkeypatch.setattr(JobService, "_exists", swap_after_check)
    with pytest.raises(PaddleCloudError) as info:
        alice.submit({"name": "e", "entry": "python nothere.py", "package": package.path})
    assert "bob_secret" not in info.value.message
    assert info.value.code != ErrorCode.ENTRY_NOT_FOUND  # the package was never read
    assert alice.jobs(all=True) == []
