"""Several users on the real server through the CLI: an admin creates users, they log in to their own
client configs, see only their own jobs; admins act for them with ``-u``; datacenters in the config."""

from __future__ import annotations

import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import PADDLECLOUD, ROOT, Server, write_package

pytestmark = pytest.mark.e2e

HELLO = {"main.py": "print('hello from', __import__('os').environ['PADDLECLOUD_WORKER'])\n"}


class User:
    """The CLI as one user: its own client config file."""

    def __init__(self, server: Server, config: Path) -> None:
        self.server = server
        self.config = config
        self.endpoint = f"http://127.0.0.1:{server.port}"

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**self.server.env, "PADDLECLOUD_CONFIG": str(self.config)}
        r = subprocess.run(
            [PADDLECLOUD, *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if check and r.returncode != 0:
            raise AssertionError(f"paddlecloud {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def login(self, token: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cli("login", "--endpoint", self.endpoint, "--token", token, *args, check=check)


def admin_token(server: Server) -> str:
    data = yaml.safe_load(Path(server.env["PADDLECLOUD_CONFIG"]).read_text())
    return str(data["datacenters"]["local"]["token"])


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def wait_done(as_: User, name: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = as_.json("describe", name, *args)
        if job["phase"] in ("Succeeded", "Failed", "Killed"):
            return job
        assert time.monotonic() < deadline, f"{name} still {job['phase']}"
        time.sleep(0.3)


def test_new_user_logs_in_and_sees_only_their_own_jobs(server: Server, tmp_path: Path) -> None:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    issued = admin.json("admin", "create-user", "bob")
    assert issued["name"] == "bob" and issued["token"].startswith("pc_")
    users = {u["name"]: u["is_admin"] for u in admin.json("admin", "users")["items"]}
    assert users["bob"] is False and users["default"] is True

    bob = User(server, tmp_path / "bob" / "config")
    r = bob.login(issued["token"], "--user", "bob")
    assert f"logged in to {bob.endpoint} as bob" in r.stdout and "current datacenter: default" in r.stdout
    assert stat.S_IMODE(bob.config.stat().st_mode) == 0o600
    saved = yaml.safe_load(bob.config.read_text())
    assert saved["current"] == "default"
    assert saved["datacenters"]["default"]["username"] == "bob"

    pkg = write_package(tmp_path / "hello", HELLO)
    admin.cli("submit", str(pkg), "--name", "acct-admin-job", "--entry", "python main.py", "--cpu", "100m")
    bob.cli("submit", str(pkg), "--name", "bob-job", "--entry", "python main.py", "--cpu", "100m")
    try:
        assert [j["name"] for j in bob.json("get", "jobs", "-a")["items"]] == ["bob-job"]
        assert "acct-admin-job" not in bob.cli("get", "jobs", "-a").stdout
        assert "bob-job" not in {j["name"] for j in admin.json("get", "jobs", "-a")["items"]}

        # another user's job is simply not there for bob; --user and --all-users are for admins
        assert "not found" in one_error_line(bob.cli("describe", "acct-admin-job", check=False))
        r = bob.cli("get", "jobs", "--all-users", check=False)
        assert r.returncode == 1 and "admins only" in one_error_line(r)
        r = bob.cli("logs", "acct-admin-job", "-u", "default", check=False)
        assert r.returncode == 1 and "admins only" in one_error_line(r)
        assert bob.cli("admin", "users", check=False).returncode == 1

        # the admin acts for bob
        everyone = {(j["user"], j["name"]) for j in admin.json("get", "jobs", "-a", "--all-users")["items"]}
        assert {("bob", "bob-job"), ("default", "acct-admin-job")} <= everyone
        assert "USER" in admin.cli("get", "jobs", "-a", "--all-users").stdout.splitlines()[0]
        job = wait_done(admin, "bob-job", "-u", "bob")
        assert (job["user"], job["phase"]) == ("bob", "Succeeded")
        assert admin.cli("logs", "bob-job", "-u", "bob").stdout == "hello from trainer-0\n"
        assert [w["name"] for w in admin.json("get", "workers", "bob-job", "-u", "bob")["items"]] == [
            "trainer-0"
        ]
    finally:
        admin.cli("kill", "bob-job", "-u", "bob", "--rm", "--grace", "1", check=False)
        admin.cli("kill", "acct-admin-job", "--rm", "--grace", "1", check=False)
    assert bob.json("get", "jobs", "-a")["items"] == []

    # a rotated token stops working at once
    rotated = admin.cli("admin", "rotate-token", "bob").stdout
    assert "paddlecloud login" in rotated and issued["token"] not in rotated
    r = bob.cli("get", "jobs", check=False)
    assert r.returncode == 1 and "not recognised" in one_error_line(r)


def test_create_user_prints_the_token_once_with_a_login_hint(server: Server, tmp_path: Path) -> None:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    out = admin.cli("admin", "create-user", "carol").stdout
    (token,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("pc_")]
    assert out.count(token) == 1
    assert f"paddlecloud login --endpoint {admin.endpoint} --user carol" in out

    r = admin.cli("admin", "create-user", "carol", check=False)
    assert r.returncode == 1 and "already exists" in one_error_line(r)

    carol = User(server, tmp_path / "carol.yaml")
    carol.login(token)
    assert carol.json("get", "jobs")["items"] == []


def test_wrong_token_login_fails_with_one_line_and_changes_nothing(server: Server, tmp_path: Path) -> None:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    token = admin.json("admin", "create-user", "dave")["token"]
    dave = User(server, tmp_path / "dave.yaml")
    dave.login(token)
    before = dave.config.read_bytes()

    r = dave.login("pc_not-a-real-token", "--datacenter", "other", check=False)
    assert r.returncode == 1
    assert "does not accept this token" in one_error_line(r) and "nothing saved" in r.stderr
    assert dave.config.read_bytes() == before

    r = dave.login(token, "--user", "someone-else", check=False)
    assert r.returncode == 1 and "belongs to user 'dave'" in one_error_line(r)
    assert dave.config.read_bytes() == before

    r = User(server, tmp_path / "fresh.yaml").login("pc_nope", check=False)
    assert r.returncode == 1 and not (tmp_path / "fresh.yaml").exists()


def test_config_use_and_view(server: Server, tmp_path: Path) -> None:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    erin_token = admin.json("admin", "create-user", "erin")["token"]
    root_token = admin_token(server)
    me = User(server, tmp_path / "config")
    me.login(erin_token)
    me.login(root_token, "--datacenter", "ops")

    view = me.cli("config", "view").stdout
    rows = {ln.split()[-4]: ln for ln in view.splitlines()[1:-1]}  # NAME ENDPOINT USER TLS end a row
    assert rows["ops"].startswith("*") and not rows["default"].startswith("*")
    assert erin_token not in view and root_token not in view
    data = me.json("config", "view")
    assert data["current"] == "ops"
    assert {n: (d["username"], d["token"]) for n, d in data["datacenters"].items()} == {
        "default": ("erin", "REDACTED"),
        "ops": ("default", "REDACTED"),
    }
    assert me.cli("admin", "users").returncode == 0  # as the admin

    assert "current datacenter: default" in me.cli("config", "use", "default").stdout
    assert me.json("config", "view")["current"] == "default"
    r = me.cli("admin", "users", check=False)  # now as erin
    assert r.returncode == 1 and "user 'erin' is not one" in one_error_line(r)

    r = me.cli("config", "use", "staging", check=False)
    assert r.returncode == 1 and "known: default, ops" in one_error_line(r)

    # a re-login to the same endpoint as the same user refreshes that entry instead of adding one
    me.login(erin_token)
    assert set(me.json("config", "view")["datacenters"]) == {"default", "ops"}
    # the environment still wins over the file
    env_view = subprocess.run(
        [PADDLECLOUD, "config", "view", "-o", "json"], capture_output=True, text=True, timeout=60,
        env={**server.env, "PADDLECLOUD_CONFIG": str(me.config), "PADDLECLOUD_DATACENTER": "ops"},
    )  # fmt: skip
    assert json.loads(env_view.stdout)["current"] == "ops"
    assert "PADDLECLOUD_DATACENTER" in env_view.stderr


def test_admins_grant_and_revoke_admin_and_delete_users(server: Server, tmp_path: Path) -> None:
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    frank = User(server, tmp_path / "frank.yaml")
    frank.login(admin.json("admin", "create-user", "frank")["token"])
    assert admin.cli("admin", "grant-admin", "frank").stdout == "frank is now an admin\n"
    assert frank.json("admin", "users")["items"]  # frank acts as an admin now
    r = frank.cli("admin", "revoke-admin", "frank", check=False)
    assert r.returncode == 1 and "ask another admin" in one_error_line(r)
    assert admin.cli("admin", "revoke-admin", "frank").stdout == "frank is no longer an admin\n"
    r = frank.cli("admin", "delete-user", "default", "--yes", check=False)
    assert r.returncode == 1 and "admins only" in one_error_line(r)

    pkg = write_package(tmp_path / "sleeper", {"main.py": "import time\ntime.sleep(60)\n"})
    frank.cli("submit", str(pkg), "--name", "frank-job", "--entry", "python main.py", "--cpu", "100m")
    r = admin.cli("admin", "delete-user", "frank", check=False)  # no terminal to confirm on
    assert r.returncode == 2 and "pass --yes" in r.stderr
    r = admin.cli("admin", "delete-user", "frank", "--yes", check=False)
    assert r.returncode == 1 and "active job(s) (frank-job)" in one_error_line(r)
    out = admin.cli("admin", "delete-user", "frank", "--yes", "--force").stdout
    assert out == "user frank deleted: 1 job(s) removed, killed frank-job; home /pfs/local/home/frank kept\n"
    r = frank.cli("get", "jobs", check=False)
    assert r.returncode == 1 and "not recognised" in one_error_line(r)
    assert "frank" not in {u["name"] for u in admin.json("admin", "users")["items"]}
