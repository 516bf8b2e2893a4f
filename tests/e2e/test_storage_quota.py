"""Issue 24 on the real server: one user's job must not fill the disk.

A job of the default user writes into its sandbox's /tmp (its own folder on the local backend,
``<data>/cluster/jobs/default/<job>/tmp/trainer-0``) and into its output (PFS) past a storage quota
an admin set small with ``admin set-quota``: ``get quota`` shows its folders counted while it
runs, it is failed within 30 s of passing the quota (measured from the moment the job says it
passed it to the job's ``finished_at``), with the reason and a message that says what to do; its
scratch is removed, its logs stay readable, its output stays in PFS (docs/pfs.md "What counts").
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, write_package

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MI = 2**20
QUOTA_MI = 64
#: the issue's bound, from passing the quota to the job Failed
GOAL_S = 30.0

#: writes FIRST (``tmp:MiB`` or ``output:MiB``), then, once ``go`` appears in its output, THEN;
#: prints when it is done with the time (the quota was passed before that line)
FILL = """\
import os, pathlib, time
out = pathlib.Path(os.environ["PADDLECLOUD_OUTPUT_DIR"])
block = os.urandom(2**20)

def fill(spec):
    where, mib = spec.split(":")
    path = (pathlib.Path("/tmp") if where == "tmp" else out) / f"{where}.bin"
    with open(path, "wb") as f:
        for _ in range(int(mib)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())

fill(os.environ["FIRST"])
print("first written", flush=True)
if os.environ.get("THEN"):
    while not (out / "go").exists():
        time.sleep(0.2)
    fill(os.environ["THEN"])
print(f"done writing at {time.time():.3f}", flush=True)
time.sleep(600)
"""


def _usage(server: Server) -> dict[str, Any]:
    found: dict[str, Any] = server.json("pfs", "du")
    return found


def _until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _done_at(server: Server, job: str) -> float:
    def line() -> str | None:
        out = server.cli("logs", job).stdout
        return next((ln for ln in out.splitlines() if ln.startswith("done writing at ")), None)

    found: str = _until(f"{job} to finish writing", line, timeout=120)
    return float(found.rsplit(" ", 1)[1])


def _time_to_fail(server: Server, job: str) -> tuple[float, dict[str, Any]]:
    passed = _done_at(server, job)
    detail = server.wait_phase(job, {"Failed", "Succeeded", "Killed"}, timeout=90)
    finished = datetime.fromisoformat(detail["finished_at"]).timestamp()
    return finished - passed, detail


def test_a_job_writing_past_the_storage_quota_is_failed_within_30_s(small: Server, tmp_path: Path) -> None:
    server = small
    server.cli("admin", "set-quota", "default", "--storage", f"{QUOTA_MI}Mi")
    pkg = write_package(tmp_path / "fill", {"fill.py": FILL})

    # 1. 24 MiB in its /tmp: within the quota, and counted in `get quota` as its folders
    server.cli(
        "submit", str(pkg), "--name", "fill", "--entry", "python fill.py", "--cpu", "100m",
        "--env", "FIRST=tmp:24", "--env", "THEN=output:48",
    )  # fmt: skip
    _until("the first write", lambda: "first written" in server.cli("logs", "fill").stdout, timeout=120)
    counted = _until("its /tmp counted", lambda: (u := _usage(server))["jobs"] >= 24 * MI and u, timeout=30)
    assert counted["used"] >= counted["pfs"] + counted["jobs"] >= 24 * MI
    quota_text = server.cli("get", "quota").stdout
    assert "in jobs' folders" in quota_text and "storage" in quota_text
    assert server.job("fill")["phase"] == "Running"

    # 2. 48 MiB more into its output: 72 of 64 MiB
    go = tmp_path / "go"
    go.write_text("go\n")
    server.cli("pfs", "cp", str(go), "pfs:jobs/fill/output/go")
    took, detail = _time_to_fail(server, "fill")
    print(f"time to fail, output past the quota: {took:.1f} s")
    assert detail["phase"] == "Failed" and detail["reason"] == "StorageQuotaExceeded", detail["message"]
    assert took <= GOAL_S, f"failed {took:.1f} s after passing the quota"
    msg = detail["message"]
    assert f"of {QUOTA_MI}.0 MiB" in msg and "PFS home" in msg and "/tmp" in msg, msg
    assert "paddlecloud pfs rm" in msg and "paddlecloud admin set-quota default --storage" in msg, msg

    # retention: its scratch goes, its logs stay, its output stays in PFS
    jdir = server.data_dir / "cluster" / "jobs" / "default" / "fill"
    _until("its scratch removed", lambda: not any((jdir / d).exists() for d in ("workers", "tmp", ".trash")))
    assert (jdir / "logs").is_dir()
    assert "done writing at" in server.cli("logs", "fill").stdout
    after = _until("its scratch uncounted", lambda: (u := _usage(server))["jobs"] < MI and u, timeout=40)
    assert after["pfs"] >= 48 * MI  # the output is the user's, in PFS: kept

    # 3. the output removed, a job that fills only its /tmp past the quota fails the same way
    server.cli("pfs", "rm", "-r", "pfs:jobs/fill/output")
    server.cli(
        "submit", str(pkg), "--name", "tmpfill", "--entry", "python fill.py", "--cpu", "100m",
        "--env", f"FIRST=tmp:{QUOTA_MI + 8}",
    )  # fmt: skip
    took, detail = _time_to_fail(server, "tmpfill")
    print(f"time to fail, /tmp past the quota: {took:.1f} s")
    assert detail["reason"] == "StorageQuotaExceeded" and took <= GOAL_S, (took, detail["message"])
    assert "this job's" in detail["message"]
    _until("its /tmp uncounted", lambda: _usage(server)["jobs"] < MI, timeout=40)
    events = json.loads(server.cli("describe", "tmpfill", "-o", "json").stdout)["events"]
    assert any(e["reason"] == "StorageQuotaExceeded" and e["type"] == "Warning" for e in events)
