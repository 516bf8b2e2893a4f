"""SIGKILL the server in the middle of many concurrent submits; what was acknowledged must survive.

Used by ``tests/e2e/test_crash_under_load.py`` (200 submits in CI) and ``bench/crash_submits.py``
(500). The run:

  1. two long jobs fill the cluster's capacity (so the submitted jobs queue and nothing else runs);
     their worker pids are noted;
  2. ``submits`` POST /jobs requests go out from ``threads`` threads at once (one package, already
     in PFS); each 201 is an acknowledgement, noted with the job's name;
  3. when ``kill_after`` acknowledgements are in, the server is SIGKILLed (requests in flight fail);
  4. the server is started again on the same data dir.

Checked: every acknowledged job is there after the restart (Queued, with its Submitted event), no
job exists that was never sent, the database passes SQLite's integrity check, and the two long
jobs were re-adopted: Running, with the same worker processes.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from paddlecloud.client import load_config

from .conftest import Server, write_package

__all__ = ["CrashResult", "crash_during_submits"]

SLEEPER = "import time\ntime.sleep(3600)\n"


@dataclass
class CrashResult:
    sent: int
    acknowledged: set[str]
    found: set[str]  # the submitted jobs present after the restart
    unexpected: set[str]  # present but never sent
    missing_events: set[str]  # acknowledged jobs without their Submitted event
    integrity: str
    readopted: bool
    kill_at_s: float  # seconds after the first request


def _submit(http: httpx.Client, spec: dict[str, object]) -> bool:
    try:
        return http.post("/api/v1/jobs", json=spec).status_code == 201
    except httpx.HTTPError:
        return False  # the server died with the request in flight: not acknowledged


def crash_during_submits(
    server: Server, base: Path, *, submits: int, kill_after: int, threads: int = 32
) -> CrashResult:
    pkg = write_package(base / "sleeper", {"sleep.py": SLEEPER})
    for name in ("long-a", "long-b"):
        server.cli("submit", str(pkg), "--name", name, "--entry", "python sleep.py", "--cpu", "8")
    for name in ("long-a", "long-b"):
        server.wait_phase(name, {"Running"}, timeout=60)
    pids = {n: [w["pid"] for w in server.json("get", "workers", n)["items"]] for n in ("long-a", "long-b")}
    package = server.job("long-a")["spec"]["package"]
    token = _token(server)
    http_args = {"base_url": f"http://127.0.0.1:{server.port}", "timeout": 30.0}
    headers = {"Authorization": f"Bearer {token}"}

    acked: set[str] = set()
    lock = threading.Lock()
    enough = threading.Event()

    def one(i: int) -> None:
        name = f"load-{i:04d}"
        spec = {"name": name, "package": package, "entry": "python sleep.py", "trainers": {"cpu": "1"}}
        with httpx.Client(headers=headers, **http_args) as http:  # type: ignore[arg-type]
            if _submit(http, spec):
                with lock:
                    acked.add(name)
                    if len(acked) >= kill_after:
                        enough.set()

    t0 = time.monotonic()
    assert server.proc is not None
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(one, i) for i in range(submits)]
        enough.wait(timeout=120)
        kill_at = time.monotonic() - t0
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
        server.proc = None
        for f in futures:
            f.result(timeout=60)
    with lock:
        acknowledged = set(acked)

    server.start()
    with httpx.Client(headers=headers, **http_args) as http:  # type: ignore[arg-type]
        jobs = {j["name"]: j for j in http.get("/api/v1/jobs", params={"all": "true"}).json()["items"]}
        found = {n for n in jobs if n.startswith("load-")}
        details = {n: http.get(f"/api/v1/jobs/{n}").json() for n in (acknowledged & found) | set(pids)}
    sent = {f"load-{i:04d}" for i in range(submits)}
    missing_events = {
        n for n in acknowledged & found if "Submitted" not in {e["reason"] for e in details[n]["events"]}
    }
    readopted = all(
        details[n]["phase"] == "Running" and [w["pid"] for w in details[n]["workers"]] == pids[n]
        for n in pids
    )
    with sqlite3.connect(server.data_dir / "paddlecloud.db") as db:
        integrity = str(db.execute("PRAGMA integrity_check").fetchone()[0])
    with httpx.Client(headers=headers, **http_args) as http:  # type: ignore[arg-type]
        for n in sorted(found):  # queued ones first: nothing starts when the long jobs go
            http.post(f"/api/v1/jobs/{n}/kill", params={"grace": 0})
        for n in pids:
            http.post(f"/api/v1/jobs/{n}/kill", params={"grace": 1})
        left = [j["name"] for j in http.get("/api/v1/jobs").json()["items"]]
    assert not left, f"jobs still active after the test's kills: {left[:5]}"
    return CrashResult(
        sent=submits,
        acknowledged=acknowledged,
        found=found,
        unexpected=found - sent,
        missing_events=missing_events,
        integrity=integrity,
        readopted=readopted,
        kill_at_s=kill_at,
    )


def _token(server: Server) -> str:
    dc = load_config(Path(server.env["PADDLECLOUD_CONFIG"])).current
    assert dc is not None
    return dc.token
