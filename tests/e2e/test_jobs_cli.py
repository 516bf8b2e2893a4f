"""A user's path through the CLI on the real server: submit, follow, list, describe, kill."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e

ECHO_ENV = """
import os, sys
keys = ["PADDLECLOUD_WORKER", "PADDLECLOUD_TRAINERS", "PADDLECLOUD_TRAINER_ID", "WORLD_SIZE", "RANK",
        "MASTER_ADDR", "MASTER_PORT", "PADDLECLOUD_OUTPUT_DIR", "GREETING"]
for k in keys:
    print(f"{k}={os.environ.get(k)}")
print("python", sys.executable)
"""


def test_submit_wait_logs_list_describe(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "echo", {"main.py": ECHO_ENV, ".paddlecloudignore": "big.bin\n"})
    (pkg / "big.bin").write_bytes(os.urandom(1024))
    r = server.cli(
        "submit", str(pkg), "--name", "echo", "--entry", "python main.py", "--framework", "torch",
        "--trainers", "2", "--cpu", "100m", "--env", "GREETING=hi", "--wait",
    )  # fmt: skip
    out = r.stdout
    assert "[trainer-0] PADDLECLOUD_WORKER=trainer-0" in out
    assert "[trainer-1] RANK=1" in out
    assert "[trainer-0] WORLD_SIZE=2" in out
    assert "[trainer-1] GREETING=hi" in out
    assert "Succeeded" in r.stderr
    # the job's own venv python runs the entry
    assert "/cluster/envs/" in out

    jobs = server.json("get", "jobs", "-a")["items"]
    (echo,) = [j for j in jobs if j["name"] == "echo"]
    assert set(echo) >= {
        "name", "user", "phase", "framework", "pservers", "trainers",
        "submitted_at", "started_at", "finished_at", "reason",
    }  # fmt: skip
    assert echo["phase"] == "Succeeded"
    assert echo["trainers"] == {"desired": 2, "running": 0, "succeeded": 2, "failed": 0}
    assert not any(j["name"] == "echo" for j in server.json("get", "jobs")["items"])  # finished: hidden

    workers = server.json("get", "workers", "echo")["items"]
    assert [w["name"] for w in workers] == ["trainer-0", "trainer-1"]
    assert all(w["exit_code"] == 0 for w in workers)

    detail = server.job("echo")
    reasons = [e["reason"] for e in detail["events"]]
    assert reasons[:2] == ["Submitted", "Admitted"] and "Completed" in reasons

    tail = server.cli("logs", "echo", "-w", "trainer-1", "-n", "1").stdout
    assert tail.startswith("python ") and tail.count("\n") == 1
    table = server.cli("get", "jobs", "-a").stdout
    assert "echo" in table and "Succeeded" in table
    assert "Name:" in server.cli("describe", "echo").stdout
    assert "cpu" in server.cli("get", "quota").stdout

    server.cli("kill", "echo", "--rm")
    assert not any(j["name"] == "echo" for j in server.json("get", "jobs", "-a")["items"])


def test_logs_follow_streams_until_the_end(server: Server, tmp_path: Path) -> None:
    code = "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
    pkg = write_package(tmp_path / "ticker", {"tick.py": code})
    server.cli("submit", str(pkg), "--name", "ticker", "--entry", "python tick.py", "--cpu", "100m")
    t0 = time.monotonic()
    out = server.cli("logs", "ticker", "-f", timeout=60).stdout
    assert [ln for ln in out.splitlines() if ln.startswith("tick")] == [f"tick {i}" for i in range(6)]
    assert time.monotonic() - t0 < 30
    server.wait_phase("ticker", {"Succeeded"})


def _group(pid: int) -> list[psutil.Process]:
    """Every live process in the process group led by ``pid``."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def test_kill_leaves_no_process(server: Server, tmp_path: Path) -> None:
    # each worker forks a child of its own, so the group is more than the one pid we know
    pkg = write_package(tmp_path / "sleeper", {"run.sh": "sleep 120 &\nsleep 120\n"})
    server.cli("submit", str(pkg), "--name", "sleeper", "--entry", "sh run.sh", "--trainers", "3",
               "--cpu", "100m")  # fmt: skip
    server.wait_phase("sleeper", {"Running"}, timeout=30)
    pids = [w["pid"] for w in server.json("get", "workers", "sleeper")["items"]]
    deadline = time.monotonic() + 10
    while sum(len(_group(p)) for p in pids) < 3 * 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # launcher + sh + 2 sleeps per worker: wait until they all exist
    assert sum(len(_group(p)) for p in pids) >= 3 * 3
    r = server.cli("kill", "sleeper", "--grace", "2")
    assert "Killed" in r.stdout
    assert all(_group(p) == [] for p in pids)
    job = server.job("sleeper")
    assert job["phase"] == "Killed"
    assert {w["state"] for w in job["workers"]} == {"Stopped"}


def test_failing_trainer_fails_the_job_and_keeps_its_log(server: Server, tmp_path: Path) -> None:
    code = "import os, sys, time\nif os.environ['PADDLECLOUD_TRAINER_ID'] == '1':\n" \
           "    print('about to fail', flush=True); sys.exit(3)\ntime.sleep(60)\n"  # fmt: skip
    pkg = write_package(tmp_path / "flaky", {"main.py": code})
    r = server.cli("submit", str(pkg), "--name", "flaky", "--entry", "python main.py", "--trainers", "2",
                   "--cpu", "100m", "--wait", check=False)  # fmt: skip
    assert r.returncode == 1
    job = server.job("flaky")
    assert job["phase"] == "Failed"
    assert "trainer-1" in job["message"] and "exit code 3" in job["message"]
    assert "about to fail" in server.cli("logs", "flaky", "-w", "trainer-1").stdout
    states = {w["name"]: w["state"] for w in job["workers"]}
    assert states == {"trainer-0": "Stopped", "trainer-1": "Failed"}


def test_waiting_job_shows_its_reason(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "huge", {"main.py": "print(1)\n"})
    args = ("submit", str(pkg), "--name", "huge", "--entry", "python main.py", "--cpu", "64")
    refused = server.cli(*args, check=False)  # no node could ever hold it: refused, with the capacity
    assert refused.returncode == 1 and "largest node has cpu 16" in refused.stderr
    server.cli(*args, "--queue-anyway")
    job = server.wait_phase("huge", {"Queued"})
    deadline = time.monotonic() + 10
    while job["reason"] == "Queued" and time.monotonic() < deadline:
        time.sleep(0.2)
        job = server.job("huge")
    assert job["reason"] == "ExceedsNodeCapacity"
    assert "cpu 64" in job["message"] and "largest node" in job["message"]
    assert "ExceedsNodeCapacity" in server.cli("get", "jobs").stdout
    server.cli("kill", "huge", "--rm")


def test_requirements_that_do_not_install_fail_the_job_with_pips_words(
    server: Server, tmp_path: Path
) -> None:
    pkg = write_package(
        tmp_path / "badreq",
        {"main.py": "print(1)\n", "requirements.txt": "paddlecloud-no-such-package-exists==0.0.1\n"},
    )
    server.cli("submit", str(pkg), "--name", "badreq", "--entry", "python main.py", "--cpu", "100m")
    job = server.wait_phase("badreq", {"Failed", "Succeeded"}, timeout=180)
    assert job["phase"] == "Failed"
    assert "installing requirements.txt failed" in job["message"]
    assert "paddlecloud-no-such-package-exists" in server.cli("logs", "badreq", "-w", "prepare").stdout
    server.cli("kill", "badreq", "--rm")


def test_job_reads_input_and_writes_output_in_pfs(server: Server, tmp_path: Path) -> None:
    data = write_package(tmp_path / "data", {"a.txt": "x" * 10, "b.txt": "y" * 5})
    server.cli("pfs", "mkdir", "-p", "pfs:datasets")
    server.cli("pfs", "cp", "-r", "-q", str(data), "pfs:datasets/")
    code = (
        "import os\n"
        "src, dst = os.environ['PADDLECLOUD_INPUT_DIR'], os.environ['PADDLECLOUD_OUTPUT_DIR']\n"
        "n = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))\n"
        "open(os.path.join(dst, 'size-' + os.environ['PADDLECLOUD_TRAINER_ID']), 'w').write(str(n))\n"
        "print(os.environ['PADDLECLOUD_INPUT'], os.environ['PADDLECLOUD_OUTPUT'])\n"
    )
    pkg = write_package(tmp_path / "reader", {"main.py": code})
    io = ["--input", "pfs:datasets/data", "--output", "pfs:results/reader"]
    r = server.cli("submit", str(pkg), "--name", "reader", "--entry", "python main.py", "--trainers", "2",
                   "--cpu", "100m", *io, "--wait")  # fmt: skip
    assert "/pfs/local/home/default/datasets/data /pfs/local/home/default/results/reader" in r.stdout
    server.cli("pfs", "cp", "-r", "-q", "pfs:results/reader", str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["size-0", "size-1"]
    assert (tmp_path / "out" / "size-1").read_text() == "15"
    listing = server.cli("pfs", "ls", "pfs:jobs/reader").stdout
    assert "package.tar.gz" in listing  # the package went through PFS too
    server.cli("kill", "reader", "--rm")
    assert "package.tar.gz" not in server.cli("pfs", "ls", "pfs:jobs/reader").stdout
    assert "size-0" in server.cli("pfs", "ls", "pfs:results/reader").stdout  # outputs stay


def test_submit_with_a_missing_input_fails_before_running(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "p", {"main.py": "print(1)\n"})
    r = server.cli("submit", str(pkg), "--name", "noinput", "--entry", "python main.py", "--input",
                   "pfs:does/not/exist", check=False)  # fmt: skip
    assert r.returncode == 1
    assert "input /pfs/local/home/default/does/not/exist does not exist" in r.stderr


def test_a_job_over_its_users_quota_waits_with_the_reason(server: Server, tmp_path: Path) -> None:
    pkg = write_package(tmp_path / "q", {"main.py": "import time\ntime.sleep(30)\n"})
    server.cli("admin", "set-quota", "default", "--cpu", "1")
    try:
        quota = server.cli("get", "quota").stdout
        assert "cpu" in quota and " 1 " in quota
        server.cli("submit", str(pkg), "--name", "q-first", "--entry", "python main.py", "--cpu", "600m")
        server.wait_phase("q-first", {"Running"}, timeout=30)
        server.cli("submit", str(pkg), "--name", "q-second", "--entry", "python main.py", "--cpu", "600m")
        job = server.job("q-second")
        for _ in range(50):
            if job["reason"] == "QuotaExceeded":
                break
            time.sleep(0.2)
            job = server.job("q-second")
        assert job["phase"] == "Queued" and job["reason"] == "QuotaExceeded"
        assert "cpu 600m/1 used" in job["message"]
        assert "QuotaExceeded" in server.cli("get", "jobs").stdout
        server.cli("kill", "q-first", "--rm", "--grace", "1")  # frees the quota: the second one starts
        server.wait_phase("q-second", {"Running"}, timeout=30)
    finally:
        server.cli("admin", "set-quota", "default", "--cpu", "none")
        for name in ("q-first", "q-second"):
            server.cli("kill", name, "--rm", "--grace", "1", check=False)
