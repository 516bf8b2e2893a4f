"""Multi-user tenancy through the SDK → ASGI app → controller: users and tokens, admins acting for other
users, and a user's jobs staying invisible to everyone else who is not an admin. User administration:
grant and revoke admin (never your own revocation, never no admin left, even when two admins revoke
each other at once) and deleting a user (refused while they have active jobs unless forced; their
jobs go, their home stays unless asked)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from paddlecloud.api.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    InvalidInput,
    NotFound,
    PaddleCloudError,
    Unauthorized,
)
from paddlecloud.api.models import JobDetail, UserView
from paddlecloud.client import Client
from paddlecloud.controller import Identity, Platform
from paddlecloud.store.tables import UserRow

pytestmark = pytest.mark.timeout(90)

MakePackage = Callable[[dict[str, str]], Path]
Drive = Callable[..., JobDetail]
ClientFor = Callable[..., Client]

HELLO = {"main.py": "import os\nprint('hello from', os.environ['PADDLECLOUD_WORKER'])\n"}
SLEEPER = {"main.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n"}


def submit(client: Client, package: Path, name: str) -> None:
    client.submit({"name": name, "entry": "python main.py", "trainers": {"cpu": "100m"}}, package_dir=package)


def error_of(call: Callable[[], object]) -> PaddleCloudError:
    with pytest.raises(PaddleCloudError) as info:
        call()
    return info.value


def consume_logs(client: Client, name: str, user: str | None = None) -> str:
    return "".join(client.logs(name, user=user))


# -- users and tokens --------------------------------------------------------------------------------


def test_whoami(alice: Client, root: Client) -> None:
    assert alice.whoami() == UserView(name="alice", is_admin=False)
    assert root.whoami() == UserView(name="root", is_admin=True)


def test_admin_creates_and_lists_users(root: Client, client_for: ClientFor, alice: Client) -> None:
    issued = root.create_user("bob")
    assert issued.name == "bob" and issued.token.startswith("pc_")
    carol = root.create_user("carol", admin=True)
    assert carol.token != issued.token

    as_bob = client_for(None, token=issued.token)
    assert as_bob.whoami() == UserView(name="bob", is_admin=False)
    assert client_for(None, token=carol.token).whoami().is_admin is True

    users = root.users()
    assert [u.name for u in users] == ["alice", "bob", "carol", "root"]
    assert {u.name for u in users if u.is_admin} == {"carol", "root"}


def test_tokens_are_stored_only_as_their_sha256(root: Client, platform: Platform) -> None:
    issued = root.create_user("bob")
    with platform.ctx.session() as s:
        row = s.scalars(select(UserRow).where(UserRow.name == "bob")).one()
        assert row.token_sha256 == hashlib.sha256(issued.token.encode()).hexdigest()
        assert issued.token not in {str(v) for v in vars(row).values()}


def test_creating_a_taken_name_is_user_exists(root: Client, alice: Client) -> None:
    err = error_of(lambda: root.create_user("alice"))
    assert isinstance(err, Conflict) and err.code == ErrorCode.USER_EXISTS
    assert "rotate-token alice" in err.message
    alice.whoami()  # alice's token was not touched


def test_user_names_are_dns_labels(root: Client) -> None:
    err = error_of(lambda: root.create_user("Bad_Name"))
    assert isinstance(err, InvalidInput) and err.field == "name"


def test_rotate_issues_a_new_token_and_the_old_one_stops_working(root: Client, client_for: ClientFor) -> None:
    first = root.create_user("bob")
    old = client_for(None, token=first.token)
    assert old.whoami().name == "bob"

    second = root.rotate_token("bob")
    assert second.name == "bob" and second.token != first.token
    err = error_of(old.whoami)
    assert isinstance(err, Unauthorized) and err.code == ErrorCode.UNAUTHORIZED
    assert client_for(None, token=second.token).whoami().name == "bob"


def test_rotating_an_unknown_user_is_user_not_found(root: Client) -> None:
    err = error_of(lambda: root.rotate_token("nobody"))
    assert isinstance(err, NotFound) and err.code == ErrorCode.USER_NOT_FOUND


def test_non_admin_is_forbidden_on_admin_endpoints(alice: Client, root: Client) -> None:
    calls: list[Callable[[], object]] = [
        alice.users,
        lambda: alice.create_user("mallory"),
        lambda: alice.create_user("mallory", admin=True),
        lambda: alice.rotate_token("alice"),
        lambda: alice.rotate_token("root"),
        lambda: alice.rotate_token("nobody"),  # forbidden, not not-found: learns nothing about users
    ]
    for call in calls:
        err = error_of(call)
        assert isinstance(err, Forbidden) and err.code == ErrorCode.FORBIDDEN, err
    assert "mallory" not in {u.name for u in root.users()}
    alice.whoami()  # alice's token still works: nothing rotated


def test_forbidden_on_the_wire(raw_http: httpx.Client, platform: Platform) -> None:
    headers = {"Authorization": f"Bearer {platform.ensure_user('alice')}"}
    for method, path in [("GET", "/api/v1/users"), ("POST", "/api/v1/users/alice/token")]:
        r = raw_http.request(method, path, headers=headers)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
    r = raw_http.post("/api/v1/users", json={"name": "mallory"}, headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert raw_http.get("/api/v1/whoami").status_code == 401  # no token at all


# -- admins act for other users --------------------------------------------------------------------


def test_admin_gets_workers_and_logs_of_another_users_job(
    alice: Client, root: Client, make_package: MakePackage, drive: Drive
) -> None:
    submit(alice, make_package(HELLO), "hello")
    drive(alice, "hello", {"Succeeded", "Failed"})

    job = root.job("hello", user="alice")
    assert (job.user, job.phase) == ("alice", "Succeeded")
    assert [w.name for w in root.workers("hello", user="alice")] == ["trainer-0"]
    assert consume_logs(root, "hello", user="alice") == "hello from trainer-0\n"
    # without user=: the admin's own jobs, where there is no "hello"
    assert isinstance(error_of(lambda: root.job("hello")), NotFound)


def test_admin_kills_and_deletes_another_users_running_job(
    alice: Client, root: Client, make_package: MakePackage, drive: Drive
) -> None:
    submit(alice, make_package(SLEEPER), "sleepy")
    drive(alice, "sleepy", {"Running"})

    view = root.kill("sleepy", 0.0, user="alice")
    assert view.phase == "Killed" and view.user == "alice"
    assert alice.job("sleepy").message == "killed by root"

    root.delete("sleepy", user="alice")
    assert isinstance(error_of(lambda: alice.job("sleepy")), NotFound)


def test_anyone_may_name_themselves(alice: Client, make_package: MakePackage) -> None:
    submit(alice, make_package(HELLO), "mine")
    assert alice.job("mine", user="alice").name == "mine"
    assert [j.name for j in alice.jobs(user="alice")] == ["mine"]
    assert alice.workers("mine", user="alice") == []
    assert alice.kill("mine", 0.0, user="alice").phase == "Killed"
    alice.delete("mine", user="alice")


def test_non_admin_naming_another_user_is_forbidden(
    alice: Client, bob: Client, make_package: MakePackage
) -> None:
    submit(alice, make_package(HELLO), "hello")
    for name in ("hello", "no-such-job"):  # the same answer whether or not the job exists
        calls: list[Callable[[], object]] = [
            lambda n=name: bob.job(n, user="alice"),
            lambda n=name: bob.workers(n, user="alice"),
            lambda n=name: consume_logs(bob, n, user="alice"),
            lambda n=name: bob.kill(n, 0.0, user="alice"),
            lambda n=name: bob.delete(n, user="alice"),
        ]
        for call in calls:
            err = error_of(call)
            assert isinstance(err, Forbidden) and err.code == ErrorCode.FORBIDDEN, err
    err = error_of(lambda: bob.jobs(user="alice"))
    assert isinstance(err, Forbidden)
    assert alice.job("hello").phase == "Queued"  # untouched


def _job_endpoint_errors(client: Client, name: str) -> list[tuple[type, str, str]]:
    calls: list[Callable[[], object]] = [
        lambda: client.job(name),
        lambda: client.workers(name),
        lambda: consume_logs(client, name),
        lambda: client.kill(name, 0.0),
        lambda: client.delete(name),
    ]
    out = []
    for call in calls:
        err = error_of(call)
        out.append((type(err), str(err.code), err.message))
    return out


def test_another_users_job_is_not_found_exactly_as_a_missing_one(
    alice: Client,
    client_for: ClientFor,
    make_package: MakePackage,
    raw_http: httpx.Client,
    platform: Platform,
) -> None:
    token = platform.ensure_user("bob")
    bob = client_for(None, token=token)
    auth = {"Authorization": f"Bearer {token}"}
    paths = [("GET", "/jobs/secret"), ("GET", "/jobs/secret/workers"), ("GET", "/jobs/secret/logs"),
             ("POST", "/jobs/secret/kill"), ("DELETE", "/jobs/secret")]  # fmt: skip

    def wire() -> list[tuple[int, object]]:
        answers = [raw_http.request(m, "/api/v1" + p, headers=auth) for m, p in paths]
        return [(r.status_code, r.json()) for r in answers]

    before = _job_endpoint_errors(bob, "secret")  # no job "secret" anywhere yet
    assert {(t, code) for t, code, _ in before} == {(NotFound, "job_not_found")}
    before_wire = wire()
    assert {status for status, _ in before_wire} == {404}

    submit(alice, make_package(HELLO), "secret")
    assert _job_endpoint_errors(bob, "secret") == before
    assert wire() == before_wire
    assert "secret" not in {j.name for j in bob.jobs(all=True)}
    assert alice.job("secret").phase == "Queued"  # bob's kill and delete did nothing


def test_all_users_listing(alice: Client, bob: Client, root: Client, make_package: MakePackage) -> None:
    package = make_package(HELLO)
    submit(alice, package, "a1")
    submit(bob, package, "b1")
    submit(root, package, "r1")

    everyone = root.jobs(all_users=True)
    assert {(j.user, j.name) for j in everyone} == {("alice", "a1"), ("bob", "b1"), ("root", "r1")}
    assert [j.name for j in root.jobs()] == ["r1"]
    assert [(j.user, j.name) for j in root.jobs(user="alice")] == [("alice", "a1")]
    assert [j.name for j in alice.jobs()] == ["a1"]

    root.kill("b1", 0.0, user="bob")
    assert "b1" not in {j.name for j in root.jobs(all_users=True)}
    assert "b1" in {j.name for j in root.jobs(all_users=True, all=True)}

    err = error_of(lambda: alice.jobs(all_users=True))
    assert isinstance(err, Forbidden) and err.code == ErrorCode.FORBIDDEN
    err = error_of(lambda: root.jobs(all_users=True, user="alice"))
    assert isinstance(err, InvalidInput)


# -- user administration ---------------------------------------------------------------------------


@pytest.fixture
def client_of(asgi: Callable[[Platform], httpx.Client]) -> Callable[..., Client]:
    """``client_of(platform, name, admin=False)``: an SDK client of that user on ``platform``."""

    def make(platform: Platform, name: str, admin: bool = False) -> Client:
        token = platform.ensure_user(name, admin=admin)
        return Client(endpoint="http://testserver", token=token, http=asgi(platform))

    return make


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


def test_a_forced_deletion_kills_the_users_jobs_together(
    platform_factory: Callable[..., Platform], client_of: Callable[..., Client], make_package: MakePackage
) -> None:
    """Four jobs that ignore SIGTERM each take the whole 2 s kill grace: one after another that is at
    least 8 s; together about one grace."""
    platform = platform_factory(kill_grace=2.0)
    root, dave = client_of(platform, "root", admin=True), client_of(platform, "dave")
    stubborn = make_package(
        {"main.py": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"}
    )
    names = [f"stubborn-{i}" for i in range(4)]
    for name in names:
        submit(dave, stubborn, name)
    deadline = time.monotonic() + 60
    while {j.phase for j in dave.jobs()} != {"Running"} or len(dave.jobs()) < 4:
        assert time.monotonic() < deadline, dave.jobs()
        platform.reconciler.tick()
        time.sleep(0.2)
    started = time.monotonic()
    done = root.delete_user("dave", force=True)
    took = time.monotonic() - started
    assert sorted(done.killed) == names and done.jobs_removed == 4
    assert took < 6.0, f"deleting dave took {took:.1f} s: the kills ran one after another"
