"""Ctrl-C gives a command the same exit status whenever it comes (``cli/interrupt.py``): a watch ends
with 0 and any other command with 130, also when the key is pressed while the program is still
importing its modules or parsing its options (~0.3 s here, seconds on a loaded machine).

Each case runs the ``paddlecloud`` program in a fresh interpreter with a hook that sends the process
SIGINT at one exact point of its start-up (no timing involved), against an endpoint where nothing
listens: a command that went on to ask the server would exit 3.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

#: the program, with ``{setup}`` run first, from ``{entry}``: ``run`` (the console script's entry) or
#: ``main`` (the entry of an install made before ``run`` existed)
PROBE = """
import importlib, os, signal, sys, threading, time
def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
{setup}
sys.argv = ["paddlecloud", *{args!r}]
{entry}
"""
ENTRIES = {
    "run": "from paddlecloud.cli import run; run()",
    "main": "from paddlecloud.cli.main import main; main()",
}

#: Ctrl-C while the command's module is imported (most of the start-up)
IN_ITS_IMPORT = """
_import = importlib.import_module
def _hooked(name, *a, **kw):
    if name == "paddlecloud.cli.jobs":
        ctrl_c()
    return _import(name, *a, **kw)
importlib.import_module = _hooked
"""

#: Ctrl-C while click is imported, before main() runs (what run() holds it for)
BEFORE_MAIN = """
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            ctrl_c()
        return None
sys.meta_path.insert(0, _CtrlC())
"""

#: Ctrl-C once the command's code began, before a watch polls (its client being made)
IN_ITS_CODE = """
import paddlecloud.client.client as sdk
_init = sdk.Client.__init__
def _hooked(self, *a, **kw):
    ctrl_c()
    _init(self, *a, **kw)
sdk.Client.__init__ = _hooked
"""

#: a start-up that hangs (an import that never returns): Ctrl-C, and again 0.3 s later
HANGS = """
_import = importlib.import_module
def _hooked(name, *a, **kw):
    if name == "paddlecloud.cli.jobs":
        threading.Timer(0.3, ctrl_c).start()
        ctrl_c()
        time.sleep(60)
    return _import(name, *a, **kw)
importlib.import_module = _hooked
"""


def run(
    tmp_path: Path, setup: str, *args: str, entry: str = "run", ignore_sigint: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env.update(
        PADDLECLOUD_CONFIG=str(tmp_path / "config"),
        PADDLECLOUD_ENDPOINT="http://127.0.0.1:9",
        PADDLECLOUD_TOKEN="t",
    )
    code = PROBE.format(setup=setup, args=list(args), entry=ENTRIES[entry])
    disposition = signal.SIG_IGN if ignore_sigint else signal.SIG_DFL  # a shell's background job: ignored
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30,
        preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "entry"),
    [(IN_ITS_IMPORT, "main"), (IN_ITS_IMPORT, "run"), (BEFORE_MAIN, "run"), (IN_ITS_CODE, "main")],
    ids=["in-its-import", "in-its-import-run", "before-main", "in-its-code"],
)
def test_ctrl_c_while_a_watch_starts_ends_it_with_exit_0(tmp_path: Path, setup: str, entry: str) -> None:
    r = run(tmp_path, setup, "get", "jobs", "--watch", entry=entry)
    assert (r.returncode, r.stdout) == (0, ""), r.stderr  # ended before its first poll, cleanly
    assert "Traceback" not in r.stderr and "error" not in r.stderr


@pytest.mark.parametrize(
    "setup", [IN_ITS_IMPORT, BEFORE_MAIN, IN_ITS_CODE], ids=["in-its-import", "before-main", "in-its-code"]
)
def test_ctrl_c_while_another_command_starts_interrupts_it_with_130(tmp_path: Path, setup: str) -> None:
    r = run(tmp_path, setup, "get", "jobs")
    assert (r.returncode, r.stdout) == (130, ""), r.stderr  # never went on to ask the server (3)
    assert "Traceback" not in r.stderr and "error" not in r.stderr


def test_ctrl_c_pressed_again_ends_a_start_up_that_hangs(tmp_path: Path) -> None:
    r = run(tmp_path, HANGS, "get", "jobs", "--watch")  # within the subprocess timeout, not 60 s
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr  # not yet parsed: a watch?


def test_a_program_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    r = run(tmp_path, IN_ITS_IMPORT, "get", "jobs", ignore_sigint=True)
    assert r.returncode == 3, r.stderr  # went on: the server cannot be reached
