"""What a person sees in the terminal: ``submit --wait`` shows the program, not the frameworks'
chatter (which ``logs`` and the log files keep); ``get jobs --watch`` / ``get workers -w``;
``up --detach`` / ``down``; quantities written for people; no warnings from ``up``."""

from __future__ import annotations

import itertools
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import ISOLATION, PADDLECLOUD, ROOT, Server, free_port, write_package

pytestmark = pytest.mark.e2e

# prints what PaddlePaddle prints around a program's own lines (copied from the demo's logs), then
# fails with a traceback when FAIL is set
CHATTY = r"""
import os, sys
print("[2026-11-25 19:08:04,136] [    INFO] distributed_strategy.py:214 - distributed strategy initialized")
print("fl-ps > coordinator address is null!")
print("is_heter_ps_mode? False")
print(" is_datanorm_table: 0")
print("")
print("pass 0: loss 0.5", flush=True)
print("I1125 19:08:04.123456 12345 brpc_ps_server.cc:67] running server with rank id: 0", file=sys.stderr)
print("communicator config: {'communicator_max_merge_var_num': '1'}")
print("final loss 0.01", flush=True)
if os.environ.get("FAIL"):
    raise ValueError("bad shard")
"""
NOISE = ("distributed_strategy", "fl-ps", "is_heter_ps_mode", "is_datanorm_table", "I1125", "communicator")


def test_submit_wait_shows_the_program_and_says_what_it_hid(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "chatty", {"main.py": CHATTY})
    r = server.cli("submit", str(pkg), "--name", "chatty", "--entry", "python main.py", "--cpu", "100m",
                   "--wait")  # fmt: skip
    assert r.stdout.splitlines()[1:] == ["pass 0: loss 0.5", "final loss 0.01"]  # after "job ... submitted"
    assert "7 lines of framework output hidden" in r.stderr
    assert "paddlecloud logs chatty" in r.stderr
    everything = server.cli("logs", "chatty").stdout  # the log keeps every line
    assert all(word in everything for word in NOISE)

    r = server.cli("submit", str(pkg), "--name", "chatty-v", "--entry", "python main.py", "--cpu", "100m",
                   "--wait", "--verbose")  # fmt: skip
    assert all(word in r.stdout for word in NOISE)
    assert "hidden" not in r.stderr


def test_submit_wait_never_hides_a_traceback(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "chatty", {"main.py": CHATTY})
    r = server.cli("submit", str(pkg), "--name", "chatty-fail", "--entry", "python main.py", "--cpu", "100m",
                   "--env", "FAIL=1", "--wait", check=False)  # fmt: skip
    assert r.returncode == 1
    lines = r.stdout.splitlines()[1:]
    assert lines[:2] == ["pass 0: loss 0.5", "final loss 0.01"]
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: bad shard"
    assert not any(word in r.stdout for word in NOISE)
    assert "Failed" in r.stderr


# -- get jobs --watch / get workers -w -----------------------------------------------------------


def _watch(server: Server, *args: str, stdout: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    # Ctrl-C must reach it even when the tests run with SIGINT ignored (a shell's background job)
    return subprocess.Popen(
        [PADDLECLOUD, *args, "--interval", "0.5"],
        stdout=stdout, stderr=subprocess.PIPE, text=True, env=server.env, cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _read_until(
    proc: subprocess.Popen[str], done: Callable[[str], bool], seen: str = "", timeout: float = 60
) -> str:
    """What it printed (``seen``: what was read of it before), read until ``done`` of it holds; from
    the pipe itself, so ``_stop`` gets the rest of the stream."""
    assert proc.stdout is not None
    raw, deadline = seen.encode(), time.monotonic() + timeout
    while not done(raw.decode(errors="replace")):
        left = deadline - time.monotonic()
        assert left > 0, f"not within {timeout} s: {raw[-500:]!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"it exited: {raw[-500:]!r}"
            raw += chunk
    return raw.decode(errors="replace")


def _first_output(proc: subprocess.Popen[str]) -> str:
    """What it printed first, once it has: it polls now (its start-up alone can take seconds on a
    loaded machine)."""
    return _read_until(proc, bool)


def _documents(out: str) -> list[Any]:
    """The JSON documents of ``-o json`` output, one per (whole) line."""
    return [json.loads(line) for line in out.splitlines(keepends=True) if line.endswith("\n")]


def _phases(out: str, job: str) -> list[str | None]:
    """``job``'s phase in each document of a ``get jobs -w -o json`` (None: not listed)."""
    return [next((j["phase"] for j in d["items"] if j["name"] == job), None) for d in _documents(out)]


def _states(out: str) -> list[dict[str, str]]:
    """The workers' states in each document of a ``get workers -w -o json``."""
    return [{w["name"]: w["state"] for w in d["items"]} for d in _documents(out)]


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C, then what it printed; it must have exited 0."""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err
    return out, err


#: runs until something listens on GO_PORT (the test, once both watchers have seen it running)
RUNS_UNTIL_TOLD = """
import os, socket, time
while True:
    try:
        socket.create_connection(("127.0.0.1", int(os.environ["GO_PORT"])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
print("done")
"""


def test_watch_json_prints_one_document_per_change_and_ctrl_c_exits_0(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "told", {"main.py": RUNS_UNTIL_TOLD})
    go = free_port()
    jobs = _watch(server, "get", "jobs", "-a", "--watch", "-o", "json")
    seen_jobs = _first_output(jobs)  # its first document (without the job)
    server.cli("submit", str(pkg), "--name", "watched", "--entry", "python main.py", "--cpu", "100m",
               "--env", f"GO_PORT={go}")  # fmt: skip
    workers = _watch(server, "get", "workers", "watched", "-w", "-o", "json")
    # both see it running (however long their start-up takes), then it is told to end
    seen_workers = _read_until(workers, lambda out: {"trainer-0": "Running"} in _states(out))
    seen_jobs = _read_until(jobs, lambda out: "Running" in _phases(out, "watched"), seen_jobs)
    with socket.create_server(("127.0.0.1", go)):
        server.wait_phase("watched", {"Succeeded"})
    seen_jobs = _read_until(jobs, lambda out: _phases(out, "watched")[-1:] == ["Succeeded"], seen_jobs)
    seen_workers = _read_until(
        workers, lambda out: _states(out)[-1:] == [{"trainer-0": "Succeeded"}], seen_workers
    )
    out, _ = _stop(jobs)
    docs = _documents(seen_jobs + out)  # one JSON document per line
    assert all(a != b for a, b in itertools.pairwise(docs))  # printed on change only
    phases = _phases(seen_jobs + out, "watched")
    assert phases[0] is None and phases[-1] == "Succeeded"
    assert "Running" in phases  # seen on its way, not only at the end
    out, _ = _stop(workers)
    docs = _documents(seen_workers + out)
    assert all(a != b for a, b in itertools.pairwise(docs))
    states = _states(seen_workers + out)
    assert {"trainer-0": "Running"} in states and states[-1] == {"trainer-0": "Succeeded"}


def test_watch_in_a_terminal_redraws_the_table_and_ctrl_c_exits_0(server: Server) -> None:
    primary, secondary = pty.openpty()
    proc = _watch(server, "get", "jobs", "-a", "--watch", stdout=secondary)
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 20
    while seen.count(b"every 0.5s") < 3 and time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if ready:
            seen += os.read(primary, 65536)
    _stop(proc)
    os.close(primary)
    assert seen.count(b"every 0.5s: paddlecloud get jobs") >= 3  # drawn again, in place
    assert b"\x1b[" in seen and b"NAME" in seen  # cursor movement: Rich Live redrawing the table


def test_watch_piped_prints_the_table_again_only_when_it_changes(server: Server) -> None:
    proc = _watch(server, "get", "jobs", "-a", "--watch")
    first = _first_output(proc)  # the table (or "No jobs."), printed once it polls
    time.sleep(2.5)  # five more polls of an unchanged list
    out, _ = _stop(proc)
    out = first + out
    assert len(out.strip().split("\n\n")) == 1 and "\x1b[" not in out  # each print: a blank line, a table


# -- up --detach / down --------------------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env["PADDLECLOUD_CONFIG"] = str(tmp_path / "config")
    env["HOME"] = str(tmp_path)
    return env


def _pc(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PADDLECLOUD, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_up_detach_serves_in_the_background_and_down_stops_it(tmp_path: Path) -> None:
    env, data, port = _env(tmp_path), tmp_path / "data", free_port()
    up = ["up", "--detach", "--port", str(port), "--data-dir", str(data), *ISOLATION,
          "--node-cpu", "4", "--node-memory", "24683656Ki"]  # fmt: skip  # a machine's odd memory
    started = time.monotonic()
    r = _pc(env, *up)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 60
    assert f"at http://127.0.0.1:{port}" in r.stdout  # what up says in the foreground, then
    assert f"stop it with: paddlecloud down --data-dir {data}" in r.stdout
    pid = json.loads((data / "server.pid").read_text())["pid"]
    server = psutil.Process(pid)
    assert server.is_running() and os.getsid(pid) != os.getsid(0)  # its own session: no terminal
    assert _pc(env, "version").returncode == 0  # it serves, and up wrote the client config

    # it answers requests with bodies without printing a warning (checked in its log below)
    pkg = write_package(tmp_path / "big", {"main.py": "print(1)\n"})
    assert _pc(env, "pfs", "mkdir", "pfs:a/b").returncode == 0
    refused = _pc(env, "submit", str(pkg), "--entry", "python main.py", "--memory", "24Gi")
    assert refused.returncode == 1 and "memory 23.5Gi" in refused.stderr  # quantities for people
    assert "Ki" not in refused.stderr
    quota = _pc(env, "get", "quota").stdout
    assert "23.5Gi" in quota and "24683656Ki" not in quota and "100Gi" in quota

    again = _pc(env, *up)  # one server per data dir
    assert again.returncode == 1 and f"already runs on {data}" in again.stderr

    r = _pc(env, "down", "--data-dir", str(data))
    assert r.returncode == 0 and "stopped" in r.stdout
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not (data / "server.pid").exists()
    log = (data / "server.log").read_text()
    assert "warning" not in log.lower(), log  # up prints no warnings (Pydantic's, before)
    r = _pc(env, "down", "--data-dir", str(data))
    assert r.returncode == 1 and "no PaddleCloud server is running" in r.stderr


def test_a_stale_pid_file_is_handled(tmp_path: Path) -> None:
    env, data = _env(tmp_path), tmp_path / "data"
    data.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {"pid": gone.pid, "started": 1.0, "url": "http://127.0.0.1:1", "log": "x"}
    (data / "server.pid").write_text(json.dumps(stale))
    r = _pc(env, "down", "--data-dir", str(data))
    assert r.returncode == 1 and "stale" in r.stderr and not (data / "server.pid").exists()
    # a live process of another program under a recycled pid is no server of ours either
    (data / "server.pid").write_text(json.dumps({**stale, "pid": os.getpid()}))
    r = _pc(env, "down", "--data-dir", str(data))
    assert r.returncode == 1 and "stale" in r.stderr and psutil.Process().is_running()
    # up replaces a stale file
    (data / "server.pid").write_text(json.dumps(stale))
    port = free_port()
    r = _pc(env, "up", "-d", "--port", str(port), "--data-dir", str(data), *ISOLATION)
    assert r.returncode == 0, r.stderr
    assert json.loads((data / "server.pid").read_text())["url"] == f"http://127.0.0.1:{port}"
    assert _pc(env, "down", "--data-dir", str(data)).returncode == 0


def test_down_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    env, data = _env(tmp_path), tmp_path / "data"
    data.mkdir()
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    started = psutil.Process(stubborn.pid).create_time()
    pid_file = {"pid": stubborn.pid, "started": started, "url": "u", "log": "l"}
    (data / "server.pid").write_text(json.dumps(pid_file))
    t0 = time.monotonic()
    r = _pc(env, "down", "--data-dir", str(data), "--timeout", "1")
    assert r.returncode == 0 and "SIGKILL" in r.stdout
    assert stubborn.wait(10) == -signal.SIGKILL
    assert time.monotonic() - t0 < 15


def test_up_detach_that_cannot_start_says_why(tmp_path: Path) -> None:
    env, data = _env(tmp_path), tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _pc(env, "up", "--detach", "--port", str(port), "--data-dir", str(data), *ISOLATION)
    assert r.returncode == 1
    assert "the server did not start" in r.stderr and "address already in use" in r.stderr.lower()
    assert str(data / "server.log") in r.stderr and not (data / "server.pid").exists()
