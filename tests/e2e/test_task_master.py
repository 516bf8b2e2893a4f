"""The data task master end to end: a real ``paddlecloud up``, a job whose trainers lease their tasks
over HTTP with ``paddlecloud.runtime.tasks()`` (job token, server URL from the env contract).

- a trainer killed mid-task (SIGKILL to its process group) loses nothing: its task goes to another
  trainer as soon as the platform sees the run end (well before the lease would expire), the
  restart policy brings the trainer back, and every task is acknowledged done exactly once. The
  victim's first run holds its first task until it is killed (``HANG``), so the test does not
  depend on killing it within a task's second: on a loaded machine the test once killed it after
  it had finished that task and waited 30 s for a task that was done (issue 11);
- the server killed with SIGKILL while tasks are leased: after its restart the job goes on and the
  acknowledged state is intact (no task lost, none repeated).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e

WORK = """
import os, time
from paddlecloud.runtime import tasks

pause = float(os.environ.get("TASK_SECONDS", "0.5"))
me = f"{os.environ['PADDLECLOUD_WORKER']}#{os.environ['PADDLECLOUD_RESTART']}"
for task in tasks():
    print(f"start {task.path} pass {task.pass_no}", flush=True)
    time.sleep(3600 if os.environ.get("HANG") == me else pause)  # HANG: this run holds its task until killed
    if task.done():
        print(f"acked {task.path} pass {task.pass_no}", flush=True)
"""

ITEMS = [f"shard-{i:02d}" for i in range(12)]


def submit(server: Server, tmp_path: Path, name: str, *extra: str) -> None:
    pkg = write_package(tmp_path / name, {"work.py": WORK})
    args = ["submit", str(pkg), "--name", name, "--entry", "python work.py", "--cpu", "100m"]
    for item in ITEMS:
        args += ["--task", item]
    server.cli(*args, *extra)


def acks(server: Server, name: str, *previous: str) -> Counter[tuple[str, int]]:
    """(task, pass) -> how many times a trainer logged its acknowledgement, over every run."""
    text = server.cli("logs", name).stdout
    for worker in previous:
        text += server.cli("logs", name, "-w", worker, "--previous").stdout
    found = re.findall(r"acked (\S+) pass (\d+)$", text, re.M)
    return Counter((task, int(p)) for task, p in found)


def tasks(server: Server, name: str) -> dict[str, Any]:
    data: dict[str, Any] = server.json("get", "tasks", name)
    return data


def wait_for_line(path: Path, pattern: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            m = re.search(pattern, path.read_text(), re.M)
            if m:
                return m.group(1)
        time.sleep(0.02)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout} s")


def test_a_killed_trainer_loses_no_task_and_none_is_acknowledged_twice(
    server: Server, tmp_path: Path
) -> None:
    submit(
        server, tmp_path, "tm-kill", "--trainers", "3", "--task-timeout", "60", "--restart-policy",
        "OnFailure", "--restart-backoff", "0.5", "--env", "TASK_SECONDS=1.0", "--env", "HANG=trainer-1#0",
    )  # fmt: skip
    server.wait_phase("tm-kill", {"Running"}, timeout=60)
    victim = next(w for w in server.json("get", "workers", "tm-kill")["items"] if w["name"] == "trainer-1")
    # it holds this task until killed
    held = wait_for_line(server.log_file("tm-kill", victim), r"^start (\S+) pass 0$")
    os.killpg(victim["pid"], signal.SIGKILL)
    killed = time.monotonic()
    while True:  # the task goes to someone else long before its 60 s lease would expire
        task = next(t for t in tasks(server, "tm-kill")["items"] if t["path"] == held)
        if task["leases"] == 2 or time.monotonic() - killed > 30:
            break
        time.sleep(0.05)
    handed_on = time.monotonic() - killed
    print(f"killed trainer-1 holding {held}; handed on after {handed_on:.2f} s to {task['holder']}")
    assert task["leases"] == 2 and handed_on < 10, task

    job = server.wait_phase("tm-kill", {"Succeeded", "Failed"}, timeout=120)
    assert job["phase"] == "Succeeded", job["message"]
    assert any(e["reason"] == "WorkerRestarted" for e in job["events"])
    final = tasks(server, "tm-kill")
    assert final["summary"]["done"] == len(ITEMS) and final["summary"]["finished"]
    assert [(t["path"], t["state"], t["done_passes"]) for t in final["items"]] == [
        (item, "done", 1) for item in ITEMS
    ]
    killed_task = next(t for t in final["items"] if t["path"] == held)
    assert (killed_task["failures"], killed_task["leases"]) == (1, 2)
    assert "trainer-1#0 ended" in killed_task["error"]
    assert acks(server, "tm-kill", "trainer-1") == Counter({(item, 0): 1 for item in ITEMS})
    assert (
        "acked" not in server.cli("logs", "tm-kill", "-w", "trainer-1", "--previous").stdout.split(held)[-1]
    )


def test_a_server_killed_while_tasks_are_leased_loses_and_repeats_nothing(
    server: Server, tmp_path: Path
) -> None:
    submit(server, tmp_path, "tm-crash", "--trainers", "2", "--passes", "2", "--env", "TASK_SECONDS=0.4")
    server.wait_phase("tm-crash", {"Running"}, timeout=60)
    log = server.log_file("tm-crash", server.json("get", "workers", "tm-crash")["items"][0])
    wait_for_line(log, r"^acked (\S+) pass 0$")
    # a trainer between an ack and its next lease holds none: the kill waits for a held lease
    # (bounded; once, under two CPU hogs, both trainers were between tasks at the first look)
    deadline = time.monotonic() + 30
    while (before := tasks(server, "tm-crash"))["summary"]["leased"] < 1:
        assert time.monotonic() < deadline, f"no task leased in 30 s: {before['summary']}"
        time.sleep(0.05)
    server.stop(signal.SIGKILL)
    time.sleep(2.0)  # the trainers' requests fail and are retried meanwhile
    server.start()

    job = server.wait_phase("tm-crash", {"Succeeded", "Failed"}, timeout=120)
    assert job["phase"] == "Succeeded", job["message"]
    after = tasks(server, "tm-crash")
    # acknowledged in some pass (a task is todo again once the next pass has begun: done_passes counts)
    done_before = {t["path"] for t in before["items"] if t["done_passes"] >= 1}
    assert done_before  # acknowledged before the crash ...
    assert [(t["state"], t["done_passes"]) for t in after["items"]] == [("done", 2)] * len(ITEMS)  # ... kept
    assert acks(server, "tm-crash") == Counter({(item, p): 1 for item in ITEMS for p in range(2)})
    print(json.dumps(after["summary"]))


def test_get_tasks_follows_the_pages_or_shows_the_first_with_a_hint(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "paged", {"main.py": "print('no leases')\n"})
    args = ["submit", str(pkg), "--name", "tm-paged", "--entry", "python main.py", "--cpu", "100m"]
    for i in range(2500):  # more than two pages of 1000
        args += ["--task", f"s{i}"]
    server.cli(*args)
    every = tasks(server, "tm-paged")
    assert [t["index"] for t in every["items"]] == list(range(2500))
    assert every["summary"]["total"] == 2500 and every["next_after"] is None
    table = server.cli("get", "tasks", "tm-paged")
    assert len(table.stdout.splitlines()) == 2 + 2500  # the summary line, the header, every task
    first = server.cli("get", "tasks", "tm-paged", "--limit", "10")
    assert [ln.split()[0] for ln in first.stdout.splitlines()[2:]] == [str(i) for i in range(10)]
    assert "paddlecloud get tasks tm-paged --after 9" in first.stderr
    rest = server.json("get", "tasks", "tm-paged", "--after", "2490")
    assert [t["index"] for t in rest["items"]] == list(range(2491, 2500)) and rest["next_after"] is None
