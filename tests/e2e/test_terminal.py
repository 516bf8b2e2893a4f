"""What a person sees in the terminal: ``submit --wait`` shows the program, not the frameworks'
chatter (which ``logs`` and the log files keep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Server, write_package

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
