"""The local backend's sandbox (``backends/local/sandbox.py``) from the platform's side.

In-process platform, reconcile loop ticked by hand, isolation ``sandbox`` (bubblewrap; ``make test``
installs it). What a job sees and is refused is tried end to end in ``tests/e2e/test_confinement.py``;
here: the backend still finds sandboxed processes by their run tag, a worker's environment is a
whitelist, a link planted in a home never widens a later job's view, the launcher's status file is
read safely, environment builds run confined, and the sandbox refuses what it cannot protect.
"""

from __future__ import annotations

import ast
import functools
import http.server
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import Drive, MakePackage
from paddlecloud.backends.local.process import tagged_pids
from paddlecloud.backends.local.sandbox import (
    SYSTEM_PATH,
    ConfinementError,
    IsolationError,
    Sandbox,
    choose,
    make_dirs,
    open_file_nofollow,
    open_nofollow,
    read_status,
)
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import JobPhase

pytestmark = pytest.mark.timeout(120)

DONE = {JobPhase.SUCCEEDED, JobPhase.FAILED}
PASSED = "OMP_NUM_THREADS"  # the operator's --pass-env in this module


@pytest.fixture
def platform(platform_factory: Callable[..., Platform]) -> Platform:
    return platform_factory(pass_env=(PASSED,))


def _log(client: Client, name: str, worker: str | None = None) -> str:
    return "".join(client.logs(name, worker=worker))


def _job_dir(platform: Platform, user: str, name: str) -> Path:
    return platform.ctx.config.cluster_dir / "jobs" / user / name


# -- processes ------------------------------------------------------------------------------------


def test_the_run_tag_scan_finds_sandboxed_processes(
    platform: Platform,
    alice: Client,
    make_package: MakePackage,
    drive: Drive,
    wait_gone: Callable[..., list[int]],
) -> None:
    """The backend kills a run's escaped processes by the tag in their environment, read from the
    host's /proc: processes in a sandbox (their own pid and user namespaces) are found by host pid."""
    pkg = make_package({"main.py": "import time\ntime.sleep(120)\n"})
    alice.submit({"name": "tagged", "entry": "python main.py sandboxed-sleeper"}, pkg)
    job = drive(alice, "tagged", {JobPhase.RUNNING})
    pid_file = _job_dir(platform, "alice", "tagged") / "run" / "trainer-0.pid.json"
    tag = json.loads(pid_file.read_text())["tag"]
    deadline = time.monotonic() + 20
    while True:  # the worker is Running once its launcher is; the program follows
        procs = psutil.process_iter(["cmdline"])
        sleeper = [p.pid for p in procs if "sandboxed-sleeper" in (p.info["cmdline"] or [])]
        if sleeper or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert sleeper, "the job's program is not visible from the host"

    found = set(tagged_pids({tag}))
    assert set(sleeper) <= found  # the program inside the sandbox, by its host pid ...
    assert job.workers[0].pid in found  # ... and the outer bwrap the backend started
    assert not found & set(tagged_pids({"another-run"}))
    alice.kill("tagged", 0.5)
    drive(alice, "tagged", {JobPhase.KILLED})
    assert wait_gone(sorted(found)) == []


def test_each_worker_has_its_own_host_name_that_resolves_to_loopback(
    alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    """In pid namespaces of their own all agents have the same pid; torch's elastic rendezvous tells
    nodes apart by (host name, pid), so with one host name every trainer formed a world of its own
    (found by tests/e2e/test_elastic_torch.py). Gloo and Paddle resolve the host name to bind."""
    code = "import socket\nh = socket.gethostname()\nprint('HOST', h, socket.gethostbyname(h))\n"
    alice.submit(
        {"name": "hosts", "entry": "python main.py", "trainers": {"count": 2}},
        make_package({"main.py": code}),
    )
    job = drive(alice, "hosts", DONE)
    assert job.phase == JobPhase.SUCCEEDED, job.message
    seen = [ln.split()[-2:] for ln in _log(alice, "hosts").splitlines() if "HOST " in ln]
    assert len(seen) == 2 and seen[0][0] != seen[1][0], seen
    assert {addr for _, addr in seen} == {"127.0.0.1"}


KERNEL_PROBE = """\
import os
seen = {}
try:  # a host sysctl (kernel.core_pattern, kernel.modprobe... would run a program as host root);
    # the value it has is written back, so that a sandbox that lets it through changes nothing
    with open("/proc/sys/kernel/core_uses_pid") as f:
        value = f.read()
    with open("/proc/sys/kernel/core_uses_pid", "w") as f:
        f.write(value)
    seen["sysctl"] = "written"
except OSError as exc:
    seen["sysctl"] = exc.strerror
for path in ("/proc/sysrq-trigger", "/proc/kcore", "/proc/keys", "/proc/kallsyms", "/proc/timer_list"):
    try:
        with open(path, "rb") as f:
            seen[path] = f"read {len(f.read(64))}"
    except OSError as exc:
        seen[path] = exc.strerror
seen["ssl private"] = os.path.exists("/etc/ssl/private")
seen["ssl certs"] = os.path.isdir("/etc/ssl/certs")
seen["firmware"] = os.listdir("/sys/firmware") if os.path.isdir("/sys/firmware") else []
print("SEEN", seen)
"""


def test_a_worker_cannot_change_the_hosts_kernel_settings_or_read_its_secrets(
    alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    """The sandbox's uid is the server's outside (host root when the server is root): without
    capabilities, but the owner of /proc/sys and of root-only files. Found in review: a job wrote a
    host sysctl (kernel.core_pattern would have run its script as root on the host). /proc/sys is
    read-only, the kernel's special files are masked, /etc/ssl holds only the certificates."""
    alice.submit({"name": "kernel", "entry": "python main.py"}, make_package({"main.py": KERNEL_PROBE}))
    job = drive(alice, "kernel", DONE)
    assert job.phase == JobPhase.SUCCEEDED, job.message
    line = next(ln for ln in _log(alice, "kernel").splitlines() if ln.startswith("SEEN "))
    seen = ast.literal_eval(line.removeprefix("SEEN "))
    assert seen["sysctl"] == "Read-only file system", seen
    assert not any(str(v).startswith("read") for k, v in seen.items() if k.startswith("/proc/")), seen
    assert seen["ssl private"] is False and seen["ssl certs"] is True and seen["firmware"] == [], seen


# -- environment ----------------------------------------------------------------------------------


def test_a_worker_gets_a_whitelist_of_the_servers_environment(
    monkeypatch: pytest.MonkeyPatch, alice: Client, make_package: MakePackage, drive: Drive
) -> None:
    """The server's environment may hold secrets (a database URL, cloud credentials): a worker gets
    the env contract, locale and TLS paths, and what the operator names (``up --pass-env``). On
    005407f every server variable but ``PADDLECLOUD_*`` reached every job."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "server-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://paddlecloud:hunter2@db/paddlecloud")
    monkeypatch.setenv(PASSED, "3")
    monkeypatch.setenv("LANG", "C.UTF-8")
    pkg = make_package({"main.py": "import json, os\nprint('ENV ' + json.dumps(dict(os.environ)))\n"})
    alice.submit({"name": "env", "entry": "python main.py"}, pkg)
    job = drive(alice, "env", DONE)
    assert job.phase == JobPhase.SUCCEEDED, job.message
    (line,) = [ln for ln in _log(alice, "env").splitlines() if ln.startswith("ENV ")]
    env: dict[str, str] = json.loads(line[4:])
    assert "AWS_SECRET_ACCESS_KEY" not in env and "DATABASE_URL" not in env
    assert "server-secret" not in line and "hunter2" not in line
    assert env[PASSED] == "3" and env["LANG"] == "C.UTF-8"
    assert env["HOME"] == "/tmp" and env["USER"] == "alice" and env["PADDLECLOUD_JOB_TOKEN"]
    assert env["PATH"] == f"{env['VIRTUAL_ENV']}/bin:{SYSTEM_PATH}"  # not the server's PATH


# -- links planted by jobs ------------------------------------------------------------------------


def test_paths_are_reached_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.close(open_nofollow(tmp_path / "real" / "sub"))
    with pytest.raises(ConfinementError, match="symbolic link"):
        open_nofollow(tmp_path / "link" / "sub")
    with pytest.raises(ConfinementError, match="symbolic link"):
        open_nofollow(tmp_path / "link")
    with pytest.raises(ConfinementError, match="does not exist"):
        open_nofollow(tmp_path / "real" / "missing")
    (tmp_path / "real" / "package.tar.gz").write_bytes(b"pkg")
    with open_file_nofollow(tmp_path / "real" / "package.tar.gz") as f:
        assert f.read() == b"pkg"
    for bad in (tmp_path / "link" / "package.tar.gz", tmp_path / "real" / "fifo"):
        if bad.name == "fifo":
            os.mkfifo(bad)
        with pytest.raises(ConfinementError):  # never another user's package through a link
            open_file_nofollow(bad).close()
    (tmp_path / "real" / "pkg-link").symlink_to(tmp_path / "real" / "package.tar.gz")
    with pytest.raises(ConfinementError):
        open_file_nofollow(tmp_path / "real" / "pkg-link").close()
    make_dirs(tmp_path / "real" / "a" / "b")
    assert (tmp_path / "real" / "a" / "b").is_dir()
    with pytest.raises(ConfinementError, match="symbolic link"):
        make_dirs(tmp_path / "link" / "c")
    assert not (tmp_path / "real" / "c").exists()


def test_a_link_planted_in_a_home_fails_the_job_instead_of_widening_its_view(
    platform: Platform, root: Client, bob: Client, make_package: MakePackage, drive: Drive
) -> None:
    """An admin's job writes into bob's home; between submit and start, a job of bob's (which may
    change anything in his home) replaces that output folder with a link to the data dir. The job
    must fail, not be given the data dir read-write (on 005407f it ran and wrote there)."""
    bob.pfs.mkdir("pfs:shared", parents=True)
    code = "import os\nopen(os.environ['PADDLECLOUD_OUTPUT_DIR'] + '/planted', 'w').write('x')\n"
    root.submit(
        {"name": "linked", "entry": "python main.py", "output": "/pfs/local/home/bob/shared/out"},
        make_package({"main.py": code}),
    )
    out = platform.ctx.config.pfs_dir / "files" / "home" / "bob" / "shared" / "out"
    out.rmdir()
    out.symlink_to(platform.ctx.config.data_dir)  # what bob's running job could do
    job = drive(root, "linked", DONE)
    assert job.phase == JobPhase.FAILED
    assert "symbolic link" in job.message and str(out) in job.message
    assert not (platform.ctx.config.data_dir / "planted").exists()


def test_the_status_file_is_read_without_following_links_or_blocking(tmp_path: Path) -> None:
    """The launcher writes its status where the job can write too: a link or a FIFO in its place is
    an unreadable status (the worker's exit is taken from its process), never a stalled loop."""
    (tmp_path / "ok.json").write_text('{"exit_code": 0}')
    assert read_status(tmp_path / "ok.json") == b'{"exit_code": 0}'
    (tmp_path / "link.json").symlink_to(tmp_path / "ok.json")
    with pytest.raises(OSError):
        read_status(tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(OSError, match="not a regular file"):
        read_status(tmp_path / "fifo.json")


# -- environment builds ---------------------------------------------------------------------------

SETUP_PY = """\
import json, sys
from pathlib import Path
found = {}
for name, path in json.loads(%r).items():
    try:
        Path(path).read_bytes() if Path(path).is_file() else Path(path).iterdir().__next__()
        found[name] = "read"
    except Exception as exc:
        found[name] = "refused"
sys.stderr.write("PROBE " + json.dumps(found) + "\\n")
sys.exit(1)
"""


@pytest.fixture
def sdist_server(tmp_path: Path) -> Iterator[Callable[[str, str], str]]:
    """``serve(name, setup_py)``: the URL of a source package whose build runs ``setup_py``, on a
    loopback HTTP server (as a user's own job could serve one)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(name: str, setup_py: str) -> str:
        with tarfile.open(root / f"{name}-0.1.tar.gz", "w:gz") as tar:
            data = setup_py.encode()
            info = tarfile.TarInfo(f"{name}-0.1/setup.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return f"http://127.0.0.1:{server.server_port}/{name}-0.1.tar.gz"

    yield serve
    server.shutdown()


def test_an_environment_build_runs_confined(
    platform: Platform,
    alice: Client,
    bob: Client,
    make_package: MakePackage,
    drive: Drive,
    sdist_server: Callable[[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A requirement may be a source package whose build runs any code, outside the job's sandbox
    on 005407f (as the server's user): it read the database, the client config with the admin's
    token and other users' files. The build now sees none of them."""
    config = Path(os.environ["PADDLECLOUD_CONFIG"])
    config.write_text("token: pc_admin\n")
    files = platform.ctx.config.pfs_dir / "files"
    bob.pfs.mkdir("pfs:private", parents=True)
    targets = {
        "database": str(platform.ctx.config.data_dir / "paddlecloud.db"),
        "client_config": str(config),
        "other_home": str(files / "home" / "bob"),
        "jobs": str(platform.ctx.config.cluster_dir / "jobs"),
    }
    url = sdist_server("probe-build", SETUP_PY % json.dumps(targets))
    pkg = make_package({"main.py": "print('never runs')\n", "requirements.txt": f"probe-build @ {url}\n"})
    alice.submit({"name": "build", "entry": "python main.py"}, pkg)
    job = drive(alice, "build", DONE, timeout=90)
    assert job.phase == JobPhase.FAILED
    log = _log(alice, "build", worker="prepare")
    (line,) = [ln.strip() for ln in log.splitlines() if "PROBE " in ln]
    found = json.loads(line.split("PROBE ", 1)[1])
    assert found == dict.fromkeys(targets, "refused"), log[-3000:]


# -- what the sandbox refuses ---------------------------------------------------------------------


def test_isolation_modes(tmp_path: Path) -> None:
    box, isolation = choose("none", tmp_path, gpus=False)
    assert box is None and not isolation.sandboxed and "--isolation none" in str(isolation)
    box, isolation = choose("sandbox", tmp_path, gpus=False)
    assert box is not None and isolation.sandboxed and "bubblewrap" in isolation.detail
    with pytest.raises(IsolationError, match="unknown isolation 'strict'"):
        choose("strict", tmp_path, gpus=False)


def test_a_data_dir_that_every_job_would_see_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsolationError, match="lies under /usr, which every job sees"):
        Sandbox(tmp_path, gpus=False, private=[Path("/usr/local/paddlecloud")])
