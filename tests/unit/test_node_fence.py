"""A run that ends itself on a node cut off from the cluster (``node.fence``, the monitor's
``--fence-api``): the rule (nothing heard for ``after`` seconds), the probes (an answer of any kind
from the API's host counts), the run's processes found from its cgroups, the whole monitor ending
its command when it hears nothing, and keeping it while the API answers; Slurm's controller
settings read from ``scontrol show config``."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from paddlecloud.backends.slurm.commands import parse_config
from paddlecloud.backends.slurm.nodekeep import RunKeep
from paddlecloud.node import monitor
from paddlecloud.node.fence import FenceClock, api_heard, run_pids


@contextlib.contextmanager
def _deaf() -> Iterator[tuple[str, int]]:
    """An address that never answers a connection (a listener whose queue is full: Linux drops the
    SYNs, as a cut cable would), on loopback. A refusal is an answer, and this machine refuses even
    unroutable addresses."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = server.getsockname()
        for _ in range(8):  # fill the queue: then connections hang
            c = stack.enter_context(socket.socket())
            c.setblocking(False)
            c.connect_ex(address)
        deadline = time.monotonic() + 5
        while api_heard(address, timeout=0.3):
            assert time.monotonic() < deadline, "the listener still answers"
            stack.enter_context(socket.socket()).connect_ex(address)
        yield address


def test_cut_off_once_nothing_was_heard_for_after_seconds() -> None:
    clock = FenceClock(after=10.0, now=0.0)
    assert not clock.look(4.0, heard=False)
    assert not clock.look(9.0, heard=True)  # heard: the count starts again
    assert not clock.look(18.0, heard=False)
    assert clock.look(19.0, heard=False)


def test_a_host_that_answers_is_heard_even_when_it_refuses() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # closed once the block ends: a refusal, which is an answer
        s.listen()
        assert api_heard(("127.0.0.1", free))
    assert api_heard(("127.0.0.1", free))
    with _deaf() as deaf:
        assert not api_heard(deaf, timeout=0.5)


def test_the_runs_processes_are_its_childs_tree_and_its_own_cgroups(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, ppid in ((10, 1), (11, 10), (12, 11), (13, 1), (14, 13)):  # 10's tree; 13 is another's
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (a b) S {ppid} 0 0\n")  # a name with a space
    own = tmp_path / "run"
    own.mkdir()
    (own / "cgroup.procs").write_text("20\n21\n")  # left the tree, still in the run's cgroup
    assert run_pids([str(own), str(tmp_path / "gone")], 10, str(proc)) == {10, 11, 12, 20, 21}


def _fenced_monitor(tmp_path: Path, api: str, after: int, *cmd: str) -> subprocess.Popen[str]:
    (tmp_path / "status").mkdir()
    return subprocess.Popen(
        [sys.executable, "-I", "-m", "paddlecloud.node.monitor", "--log", str(tmp_path / "w.log"),
         "--status", str(tmp_path / "status" / "exit.json"),
         "--fence-api", api, "--fence-scontrol", shutil.which("scontrol") or "/usr/bin/scontrol",
         "--fence-after", str(after), "--", *cmd],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(tmp_path / "no-slurm.conf")},
    )  # fmt: skip


def test_a_run_that_hears_nothing_ends_itself_and_says_why(tmp_path: Path) -> None:
    with _deaf() as (host, port):
        t0 = time.monotonic()
        p = _fenced_monitor(
            tmp_path, f"{host}:{port}", 1, "/bin/sh", "-c", "echo started; sleep 60; echo never"
        )
        assert p.wait(timeout=30) == -signal.SIGKILL
        took = time.monotonic() - t0
    log = (tmp_path / "w.log").read_text()
    assert "started" in log and "never" not in log, log
    assert f"heard neither the platform ({host}:{port}) nor the Slurm controller for 1 s" in log, log
    status = json.loads((tmp_path / "status" / "exit.json").read_text())  # what the backend reads
    assert (status["exit_code"], status["reason"]) == (137, "CutOff") and "heard neither" in status["message"]
    assert took < 15, took


def test_a_run_whose_api_answers_is_kept(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        api = f"127.0.0.1:{s.getsockname()[1]}"
        p = _fenced_monitor(tmp_path, api, 1, "/bin/sh", "-c", "sleep 4; echo finished")
        assert p.wait(timeout=30) == 0
    assert (tmp_path / "w.log").read_text() == "finished\n"
    assert not (tmp_path / "status" / "exit.json").exists()  # the launcher's to write: none here


def test_bad_fence_options_are_refused() -> None:
    for argv in (["--fence-api", "nohost", "--log", "x", "--", "y"],
                 ["--fence-scontrol", "scontrol", "--log", "x", "--", "y"],
                 ["--fence-after", "0", "--log", "x", "--", "y"],
                 ["--fence-after", "soon", "--log", "x", "--", "y"]):  # fmt: skip
        try:
            monitor.parse(argv)
        except ValueError:
            continue
        raise AssertionError(f"accepted {argv}")


def test_the_keep_asks_the_monitor_to_fence_only_with_an_api_scontrol_and_a_time() -> None:
    keep = RunKeep(log="/l", fence_api="10.0.0.1:8080", fence_after_s=5, fence_scontrol="/usr/bin/scontrol")
    argv = keep.prepare("c1", "run", "/s")
    assert argv[argv.index("--fence-api") + 1] == "10.0.0.1:8080" and "--fence-after" in argv
    assert argv[argv.index("--fence-scontrol") + 1] == "/usr/bin/scontrol"
    assert RunKeep.from_dict(keep.to_dict()) == keep
    for partial in (RunKeep(log="/l", fence_api="10.0.0.1:8080", fence_scontrol="/usr/bin/scontrol"),
                    RunKeep(log="/l", fence_api="10.0.0.1:8080", fence_after_s=5)):  # fmt: skip
        assert "--fence-api" not in partial.prepare("c1", "run", "/s")


def test_slurms_settings_come_from_scontrol_show_config() -> None:
    text = (
        "Configuration data as of 2026-12-02T12:00:00\nSlurmctldAddr           = (null)\n"
        "SlurmctldHost[0]        = head(10.79.0.1)\nSlurmctldPort           = 16817\n"
        "SlurmdPort              = 6818\nSlurmdTimeout           = 10 sec\n"
    )
    info = parse_config(text)
    assert (info.addresses, info.port, info.slurmd_port, info.slurmd_timeout_s) == (
        ("10.79.0.1",),
        16817,
        6818,
        10,
    )
    assert parse_config("SlurmctldHost[0] = ctl\nSlurmctldPort = 6817-6820\n").addresses == ("ctl",)
    assert parse_config("").slurmd_timeout_s == 300  # Slurm's default
