"""What a person sees in the terminal: ``submit --wait`` shows the program, not the frameworks'
chatter (which ``logs`` and the log files keep); ``get jobs --watch`` / ``get workers -w``."""

from __future__ import annotations

import itertools
import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import PADDLECLOUD, ROOT, Server, write_package

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
    return subprocess.Popen(
        [PADDLECLOUD, *args, "--interval", "0.5"],
        stdout=stdout, stderr=subprocess.PIPE, text=True, env=server.env, cwd=ROOT,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C, then what it printed; it must have exited 0."""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err
    return out, err


def test_watch_json_prints_one_document_per_change_and_ctrl_c_exits_0(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "slow", {"main.py": "import time; time.sleep(3); print('done')\n"})
    jobs = _watch(server, "get", "jobs", "-a", "--watch", "-o", "json")
    time.sleep(1.5)  # it has printed its first document (without the job)
    server.cli("submit", str(pkg), "--name", "watched", "--entry", "python main.py", "--cpu", "100m")
    workers = _watch(server, "get", "workers", "watched", "-w", "-o", "json")
    server.wait_phase("watched", {"Succeeded"})
    time.sleep(1.5)  # the watchers see the end
    out, _ = _stop(jobs)
    docs = [json.loads(line) for line in out.splitlines()]  # one JSON document per line
    assert all(a != b for a, b in itertools.pairwise(docs))  # printed on change only
    phases = [next((j["phase"] for j in d["items"] if j["name"] == "watched"), None) for d in docs]
    assert phases[0] is None and phases[-1] == "Succeeded"
    assert "Running" in phases  # seen on its way, not only at the end
    out, _ = _stop(workers)
    docs = [json.loads(line) for line in out.splitlines()]
    assert all(a != b for a, b in itertools.pairwise(docs))
    states = [{w["name"]: w["state"] for w in d["items"]} for d in docs]
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
    time.sleep(2.5)  # five polls of an unchanged list
    out, _ = _stop(proc)
    assert out.count("NAME") <= 1 and "\x1b[" not in out
