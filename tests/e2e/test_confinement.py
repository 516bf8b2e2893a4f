"""A job sees only its owner's data (issue 11), tried as a hostile user would on the real server.

Two users, ``victim`` and ``mallory``, on the session's ``paddlecloud up`` (local backend, isolation
sandbox). The victim keeps a secret in her PFS home and runs a long job; mallory's job then tries, by
host path, everything a job of hers must never reach: the victim's file, the database, the data dir's
listing, any token file, the server's client config (the admin's token), the running job's
``/proc/<pid>/environ`` (its job token) and the environments of every process it can see; and it tries
to write into the victim's home and into public. Every one is refused. The positive side: the job reads
and writes its own home and output, reads its input and public, and public stays read-only.

On 005407f (no sandbox, the token in ``<data>/default-user.token``) every read succeeded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import PADDLECLOUD, Server, free_port, write_package
from .test_account_cli import User, admin_token

pytestmark = pytest.mark.e2e

#: mallory's job: every attempt is recorded as ("ok", what it got) or ("refused", the error)
PROBE = r"""
import glob, json, os
from pathlib import Path

t = json.loads(Path("targets.json").read_text())
out = {}

def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except Exception as exc:
        out[name] = ["refused", f"{type(exc).__name__}: {exc}"[:300]]

def read(path):
    return Path(path).read_bytes()[:200].decode(errors="replace")

def write(path):
    Path(path).write_text("written by mallory's job")
    return "written"

def foreign_job_tokens():
    mine = os.environ["PADDLECLOUD_JOB_TOKEN"]
    found = set()
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            for var in Path(environ).read_bytes().split(b"\0"):
                if var.startswith(b"PADDLECLOUD_JOB_TOKEN=") and var.split(b"=", 1)[1].decode() != mine:
                    found.add(var.decode())
        except OSError:
            pass
    if found:
        return sorted(found)
    raise PermissionError("no other job's token is visible")

def token_files():
    found = [p for p in glob.glob(t["data_dir"] + "/**/*token*", recursive=True) if os.path.isfile(p)]
    if found:
        return {p: read(p) for p in found}
    raise FileNotFoundError("no token file is visible")

attempt("victim_file", lambda: read(t["victim_file"]))
attempt("victim_home_listing", lambda: os.listdir(t["victim_home"]))
attempt("database", lambda: read(t["database"]))
attempt("data_dir_listing", lambda: sorted(os.listdir(t["data_dir"])))
attempt("default_user_token", lambda: read(t["data_dir"] + "/default-user.token"))
attempt("token_files", token_files)
attempt("server_client_config", lambda: read(t["client_config"]))
attempt("server_home", lambda: os.listdir(t["server_home"]))
attempt("victim_job_environ", lambda: read(f"/proc/{t['victim_pid']}/environ"))
attempt("foreign_job_tokens", foreign_job_tokens)
attempt("victim_job_logs", lambda: os.listdir(t["victim_job_dir"]))
attempt("write_victim_home", lambda: write(t["victim_home"] + "/planted.txt"))
attempt("write_public", lambda: write(t["public_file"] + ".planted"))
# what the job may do
attempt("own_home_write", lambda: write(t["own_home"] + "/from-job.txt"))
attempt("own_home_read", lambda: read(t["own_home"] + "/from-job.txt"))
attempt("output_write", lambda: write(os.environ["PADDLECLOUD_OUTPUT_DIR"] + "/result.txt"))
attempt("input_read", lambda: read(os.environ["PADDLECLOUD_INPUT_DIR"] + "/data.txt"))
attempt("input_write", lambda: write(os.environ["PADDLECLOUD_INPUT_DIR"] + "/data.txt"))
attempt("public_read", lambda: read(t["public_file"]))
print("RESULTS " + json.dumps(out, default=str), flush=True)
"""

REFUSED = (
    "victim_file", "victim_home_listing", "database", "default_user_token", "token_files",
    "server_client_config", "server_home", "victim_job_environ", "foreign_job_tokens", "victim_job_logs",
    "write_victim_home", "write_public", "input_write",
)  # fmt: skip
ALLOWED = ("own_home_write", "own_home_read", "output_write", "input_read", "public_read")


def _user(server: Server, admin: User, name: str, tmp_path: Path) -> User:
    token = admin.json("admin", "create-user", name)["token"]
    user = User(server, tmp_path / f"{name}.yaml")
    user.login(token)
    return user


def _results(user: User, job: str) -> dict[str, list[Any]]:
    log = user.cli("logs", job).stdout
    lines = [ln for ln in log.splitlines() if ln.startswith("RESULTS ")]
    assert lines, f"no results in the log of {job}:\n{log[-3000:]}"
    results: dict[str, list[Any]] = json.loads(lines[-1][len("RESULTS ") :])
    return results


def _running_pid(admin: User, job: str, user: str) -> int:
    deadline = time.monotonic() + 120
    while True:
        workers = admin.json("get", "workers", job, "-u", user)["items"]
        if workers and workers[0]["state"] == "Running" and workers[0]["pid"]:
            return int(workers[0]["pid"])
        assert time.monotonic() < deadline, f"{job} never ran: {workers}"
        time.sleep(0.3)


def test_a_job_reaches_nothing_but_its_owners_data(server: Server, tmp_path: Path) -> None:
    started = time.monotonic()
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    victim = _user(server, admin, "victim", tmp_path)
    mallory = _user(server, admin, "mallory", tmp_path)
    files = server.data_dir / "pfs" / "files"

    secret = tmp_path / "secret.txt"
    secret.write_text("the victim's secret\n")
    victim.cli("pfs", "cp", str(secret), "pfs:secret.txt")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("public data\n")
    admin.cli("pfs", "cp", "-r", str(shared), "/pfs/local/public/confinement")
    sleeper = write_package(tmp_path / "sleeper", {"main.py": "import time\ntime.sleep(300)\n"})
    victim.cli("submit", str(sleeper), "--name", "victim-job", "--entry", "python main.py", "--cpu", "100m")
    try:
        targets = {
            "data_dir": str(server.data_dir),
            "database": str(server.data_dir / "paddlecloud.db"),
            "victim_home": str(files / "home" / "victim"),
            "victim_file": str(files / "home" / "victim" / "secret.txt"),
            "victim_job_dir": str(server.data_dir / "cluster" / "jobs" / "victim" / "victim-job"),
            "victim_pid": _running_pid(admin, "victim-job", "victim"),
            "client_config": server.env["PADDLECLOUD_CONFIG"],
            "server_home": str(server.home),
            "public_file": str(files / "public" / "confinement" / "data.txt"),
            "own_home": str(files / "home" / "mallory"),
        }
        probe = write_package(tmp_path / "probe", {"probe.py": PROBE, "targets.json": json.dumps(targets)})
        mallory.cli("submit", str(probe), "--name", "probe", "--entry", "python probe.py", "--cpu", "100m",
                    "--input", "/pfs/local/public/confinement", "--wait")  # fmt: skip
        results = _results(mallory, "probe")
    finally:
        admin.cli("kill", "victim-job", "-u", "victim", "--grace", "1", check=False)

    for name in REFUSED:
        assert results[name][0] == "refused", f"{name}: the job got {results[name][1]}"
    for name in ALLOWED:
        assert results[name][0] == "ok", f"{name}: {results[name][1]}"
    # what the sandbox shows of the data dir is the way to the job's own places, nothing in it
    assert results["data_dir_listing"][0] == "ok"
    assert set(results["data_dir_listing"][1]) <= {"cluster", "pfs"}
    # nothing was planted, and what the job wrote is where its owner finds it
    assert not (files / "home" / "victim" / "planted.txt").exists()
    assert not (files / "public" / "confinement" / "data.txt.planted").exists()
    assert (files / "home" / "mallory" / "from-job.txt").read_text() == "written by mallory's job"
    output = Path(mallory.json("describe", "probe")["output_dir"])
    assert (output / "result.txt").read_text() == "written by mallory's job"
    assert server.log_path is not None and "isolation: sandbox (bubblewrap" in server.log_path.read_text()
    print(f"attack test: {len(REFUSED) + 1} attempts refused, {len(ALLOWED)} allowed, "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip


def test_an_admins_job_reads_an_input_outside_its_home_read_only(server: Server, tmp_path: Path) -> None:
    """An input in another user's home is bound on its own, read-only (admins may name one)."""
    admin = User(server, Path(server.env["PADDLECLOUD_CONFIG"]))
    owner = _user(server, admin, "lender", tmp_path)
    data = tmp_path / "lent"
    data.mkdir()
    (data / "data.txt").write_text("lent data\n")
    owner.cli("pfs", "cp", "-r", str(data), "pfs:lent")
    code = (
        "import os\nfrom pathlib import Path\nd = Path(os.environ['PADDLECLOUD_INPUT_DIR'])\n"
        "print('read', (d / 'data.txt').read_text().strip())\n"
        "try:\n    (d / 'data.txt').write_text('changed')\n    print('write ok')\n"
        "except OSError as exc:\n    print('write refused', type(exc).__name__)\n"
        "print('home of lender visible:', os.path.exists(str(d.parent) + '/../..'))\n"
    )
    pkg = write_package(tmp_path / "reader", {"main.py": code})
    admin.cli("submit", str(pkg), "--name", "lent-reader", "--entry", "python main.py", "--cpu", "100m",
              "--input", "/pfs/local/home/lender/lent", "--wait")  # fmt: skip
    log = admin.cli("logs", "lent-reader").stdout
    assert "read lent data" in log and "write refused OSError" in log, log
    lent = server.data_dir / "pfs" / "files" / "home" / "lender" / "lent" / "data.txt"
    assert lent.read_text() == "lent data\n"


def _files_holding(root: Path, secret: str) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return [p for p in files if secret.encode() in p.read_bytes()]


def test_no_token_in_the_data_dir_and_a_restart_keeps_the_clients(tmp_path: Path) -> None:
    """The default user's token lives only in the client config (0600): no file of the data dir holds
    it (005407f wrote ``<data>/default-user.token``), and ``up`` run again on the same data dir keeps
    the client's token working."""
    (tmp_path / "home").mkdir()
    srv = Server(data_dir=tmp_path / "data", home=tmp_path / "home")
    srv.start()
    try:
        token = admin_token(srv)
        assert srv.cli("admin", "users").returncode == 0  # the default user, an admin
        assert not _files_holding(srv.data_dir, token)
        assert oct(Path(srv.env["PADDLECLOUD_CONFIG"]).stat().st_mode & 0o777) == "0o600"
        srv.stop()
        srv.start()
        assert admin_token(srv) == token  # handed back, not rotated: other copies keep working
        assert srv.cli("admin", "users").returncode == 0
        assert not _files_holding(srv.data_dir, token)
        # a client config whose token no longer authenticates gets a new one
        Path(srv.env["PADDLECLOUD_CONFIG"]).write_text(
            Path(srv.env["PADDLECLOUD_CONFIG"]).read_text().replace(token, "pc_stale")
        )
        srv.stop()
        srv.start()
        assert admin_token(srv) not in (token, "pc_stale")
        assert srv.cli("admin", "users").returncode == 0
    finally:
        srv.stop()


def _start_up(tmp_path: Path, isolation: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    """``up`` where bubblewrap cannot be found (PATH holds only the venv's scripts)."""
    port = free_port()
    err = tmp_path / f"up-{isolation}.err"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")},
           "PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path),
           "PADDLECLOUD_CONFIG": str(tmp_path / "config")}  # fmt: skip
    with open(err, "wb") as f:
        proc = subprocess.Popen(
            [PADDLECLOUD, "up", "--port", str(port), "--data-dir", str(tmp_path / f"data-{isolation}"),
             "--isolation", isolation], stdout=subprocess.DEVNULL, stderr=f, env=env,
        )  # fmt: skip
    return proc, err, port


def test_without_bubblewrap_sandbox_refuses_and_auto_warns(tmp_path: Path) -> None:
    proc, err, _ = _start_up(tmp_path, "sandbox")
    assert proc.wait(timeout=60) == 1
    text = err.read_text()
    assert text.startswith("error: --isolation sandbox: bubblewrap is not installed"), text
    assert "Traceback" not in text

    proc, err, port = _start_up(tmp_path, "auto")
    try:
        deadline = time.monotonic() + 60
        while "WARNING" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        # the warning comes before the server listens: it serves once it is up (bounded wait)
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5).status_code == 200
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.2)
        text = err.read_text()
        assert "WARNING: isolation: none (bubblewrap is not installed" in text
        assert "any user's job can" in text and "--isolation sandbox" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
