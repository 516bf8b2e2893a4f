"""User administration through the SDK → ASGI app → controller: grant and revoke admin (never your
own revocation, never no admin left, even when two admins revoke each other at once) and deleting a
user (refused while they have active jobs unless forced; their jobs go, their home stays unless asked)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    InvalidInput,
    NotFound,
    PaddleCloudError,
    Unauthorized,
)
from paddlecloud.api.models import JobDetail
from paddlecloud.client import Client
from paddlecloud.controller import Identity, Platform

pytestmark = pytest.mark.timeout(90)

MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]
ClientFor = Callable[..., Client]

HELLO = {"main.py": "print('hello')\n"}
SLEEPER = {"main.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n"}


def submit(client: Client, package: Path, name: str) -> None:
    client.submit({"name": name, "entry": "python main.py", "trainers": {"cpu": "100m"}}, package_dir=package)


def error_of(call: Callable[[], object]) -> PaddleCloudError:
    with pytest.raises(PaddleCloudError) as info:
        call()
    return info.value


def admins(root: Client) -> set[str]:
    return {u.name for u in root.users() if u.is_admin}


def test_a_non_admin_gets_403_forbidden_and_changes_nothing(
    alice: Client, root: Client, raw_http: httpx.Client, platform: Platform
) -> None:
    for call in (
        lambda: alice.set_admin("alice", True),
        lambda: alice.set_admin("root", False),
        lambda: alice.delete_user("root"),
        lambda: alice.delete_user("nobody", force=True),  # forbidden, not not-found: learns nothing
    ):
        err = error_of(call)
        assert isinstance(err, Forbidden) and err.code == ErrorCode.FORBIDDEN, err
    headers = {"Authorization": f"Bearer {platform.ensure_user('mallory')}"}
    for method, path, body in [
        ("PUT", "/api/v1/users/mallory/admin", {"admin": True}),
        ("DELETE", "/api/v1/users/root?force=true", None),
    ]:
        r = raw_http.request(method, path, headers=headers, json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert admins(root) == {"root"} and alice.whoami().name == "alice"


def test_admin_status_is_granted_and_revoked(root: Client, alice: Client) -> None:
    assert root.set_admin("alice", True).is_admin
    assert alice.whoami().is_admin and admins(alice) == {"alice", "root"}  # alice acts as an admin now
    assert not root.set_admin("alice", False).is_admin
    assert not alice.whoami().is_admin
    assert isinstance(error_of(alice.users), Forbidden)
    err = error_of(lambda: root.set_admin("nobody", True))
    assert isinstance(err, NotFound) and err.code == ErrorCode.USER_NOT_FOUND
    bad = error_of(lambda: root.request("PUT", "/users/alice/admin", json={"admin": "yes"}))
    assert isinstance(bad, InvalidInput) and bad.code == ErrorCode.INVALID_REQUEST  # no coercion


def test_an_admin_cannot_lock_themselves_out(root: Client) -> None:
    for call in (lambda: root.set_admin("root", False), lambda: root.delete_user("root", force=True)):
        err = error_of(call)
        assert isinstance(err, Conflict) and err.code == ErrorCode.OWN_ACCOUNT, err
        assert "ask another admin" in err.message
    assert root.whoami().is_admin and admins(root) == {"root"}
    assert root.set_admin("root", True).is_admin  # granting yourself what you have changes nothing


def test_two_admins_revoking_each_other_at_once_leave_one_admin(platform: Platform, root: Client) -> None:
    root.create_user("ops", admin=True)
    # both requests were authenticated as admins before either change
    callers = {"root": Identity("root", is_admin=True), "ops": Identity("ops", is_admin=True)}
    start = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def revoke(caller: str, target: str) -> None:
        start.wait(timeout=10)
        with platform.ctx.session() as s:
            try:
                platform.users.set_admin(s, callers[caller], target, False)
                outcome[caller] = "revoked"
            except Forbidden as exc:
                outcome[caller] = exc.message

    threads = [threading.Thread(target=revoke, args=pair) for pair in (("root", "ops"), ("ops", "root"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert list(outcome.values()).count("revoked") == 1
    (loser,) = [c for c, o in outcome.items() if o != "revoked"]
    assert outcome[loser] == f"user {loser!r} is no longer an admin"
    with platform.ctx.session() as s:
        left = {u.name for u in platform.users.list_users(s, Identity("x", True)).items if u.is_admin}
    assert left == {"root", "ops"} - {loser}


def test_a_user_with_active_jobs_is_deleted_only_when_forced(
    root: Client, alice: Client, client_for: ClientFor, make_package: MakePackage, drive: Drive,
    wait_gone: Callable[..., list[int]],
) -> None:  # fmt: skip
    submit(alice, make_package(HELLO), "done-job")
    drive(alice, "done-job", {"Succeeded"})
    submit(alice, make_package(SLEEPER), "sleepy")
    pid = drive(alice, "sleepy", {"Running"}).workers[0].pid
    assert pid is not None

    err = error_of(lambda: root.delete_user("alice"))
    assert isinstance(err, Conflict) and err.code == ErrorCode.USER_HAS_JOBS
    assert "1 active job(s) (sleepy)" in err.message and "--force" in err.message
    assert alice.whoami().name == "alice" and alice.job("sleepy").phase == "Running"  # nothing changed

    done = root.delete_user("alice", force=True)
    assert (done.name, done.killed, done.jobs_removed, done.home) == ("alice", ["sleepy"], 2, "kept")
    assert isinstance(error_of(alice.whoami), Unauthorized)  # the token stopped working
    assert wait_gone([pid]) == []
    assert "alice" not in {u.name for u in root.users()}
    assert isinstance(error_of(lambda: root.job("sleepy", user="alice")), NotFound)
    home = done.home_path
    assert home == "/pfs/local/home/alice"
    assert root.pfs.stat(home).type == "dir"  # the home is kept for admins ...
    gone = error_of(lambda: root.pfs.stat(f"{home}/jobs/sleepy/package.tar.gz"))
    assert isinstance(gone, NotFound)  # ... without the packages, which went with their jobs
    again = client_for("alice")  # the name is free again; the new alice has no jobs
    assert again.jobs(all=True) == []


def test_deleting_with_delete_files_removes_the_home(root: Client, bob: Client, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    bob.pfs.cp([str(tmp_path / "notes.txt")], "pfs:notes.txt")
    done = root.delete_user("bob", delete_files=True)
    assert (done.killed, done.jobs_removed, done.home) == ([], 0, "deleted")
    err = error_of(lambda: root.pfs.stat("/pfs/local/home/bob/notes.txt"))
    assert isinstance(err, NotFound) and err.code == ErrorCode.PATH_NOT_FOUND
    missing = error_of(lambda: root.delete_user("bob"))
    assert isinstance(missing, NotFound) and missing.code == ErrorCode.USER_NOT_FOUND
