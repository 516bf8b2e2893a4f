"""Processes that leave a worker's process group die with the worker's run.

torchrun starts its workers in sessions of their own, so a signal to the trainer's process group
(the platform's SIGKILL, a chaos test's) reaches the agent but not the training process, which
would go on as an orphan. The local backend tags every process of a run (``PADDLECLOUD_RUN_TAG``)
and SIGKILLs the tagged ones when the run has ended (before a restart) or is stopped.

In-process platform, the reconcile loop ticked by hand; ``escape.py`` starts a child in a new
session (as torchrun does), writes a mark naming the child to the output dir, and waits. The test finds
the child by that mark among the host's processes (a sandboxed job sees only its own pid namespace,
so it cannot tell its host pid). Both isolations: unconfined, the run tag alone finds the child; in a
sandbox the end of the pid namespace ends it as well.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from paddlecloud.api.models import JobDetail
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.core.phases import JobPhase

pytestmark = pytest.mark.timeout(60)

MakePackage = Callable[[dict[str, str]], Path]
Asgi = Callable[[Platform], httpx.Client]

ESCAPE = {
    "escape.py": """\
import os, subprocess, sys, time
from pathlib import Path

out = Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
run = os.environ["PADDLECLOUD_RESTART"]
mark = f"escaped-child-{run}-{os.environ['PADDLECLOUD_RUN_TAG']}"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", mark], start_new_session=True)
(out / f"child.{run}").write_text(mark)
time.sleep(120)
"""
}


def _until(platform: Platform, client: Client, name: str, check: Callable[[JobDetail], bool]) -> JobDetail:
    deadline = time.monotonic() + 30
    while True:
        platform.reconciler.tick()
        job = client.job(name)
        if check(job):
            return job
        assert time.monotonic() < deadline, f"{name}: {job.phase} {job.message} {job.events}"
        time.sleep(0.05)


def _child(platform: Platform, job: JobDetail, run: int) -> int:
    """The host pid of run ``run``'s escaped child (found by the mark on its command line)."""
    path = Path(job.output_dir) / f"child.{run}"
    deadline = time.monotonic() + 20
    while True:
        mark = path.read_text() if path.exists() else ""
        pids = [p.pid for p in psutil.process_iter(["cmdline"]) if mark and mark in (p.info["cmdline"] or [])]
        if pids:
            return pids[0]
        assert time.monotonic() < deadline, f"no escaped child of run {run} ({path}: {mark!r})"
        platform.reconciler.tick()
        time.sleep(0.05)


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _submit(platform: Platform, asgi: Asgi, make_package: MakePackage, name: str) -> Client:
    alice = Client(endpoint="http://testserver", token=platform.ensure_user("alice"), http=asgi(platform))
    alice.submit(
        {"name": name, "entry": "python escape.py", "trainers": {"cpu": "500m", "restart": "OnFailure"},
         "restart_backoff_s": 0.05},
        package_dir=make_package(ESCAPE),
    )  # fmt: skip
    return alice


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
def test_a_killed_workers_escaped_child_dies_before_the_worker_is_restarted(
    platform_factory: Callable[..., Platform], asgi: Asgi, make_package: MakePackage, isolation: str
) -> None:
    platform = platform_factory(isolation=isolation)
    alice = _submit(platform, asgi, make_package, "escapee")
    job = _until(platform, alice, "escapee", lambda j: j.phase == JobPhase.RUNNING)
    child = _child(platform, job, 0)
    pid = job.workers[0].pid
    assert pid is not None and os.getpgid(child) != pid  # outside the worker's process group
    os.killpg(pid, signal.SIGKILL)  # reaches the launcher, the shell and escape.py, not the child

    job = _until(platform, alice, "escapee", lambda j: j.workers[0].restarts == 1)
    assert _gone(child), "the escaped child of the killed run is still alive"
    second = _child(platform, job, 1)
    assert psutil.pid_exists(second)  # the new run's child is left alone
    alice.kill("escapee", 0.5)
    _until(platform, alice, "escapee", lambda j: j.phase == JobPhase.KILLED)
    assert _gone(second), "kill left the escaped child of the running worker alive"
