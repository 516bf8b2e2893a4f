"""Benchmark: the web console's server time, page weight and the CPU that open consoles cost.

1. **Render time**: the Jobs page with ``--jobs`` (1,000) jobs in the history, as the server measures
   it (its ``Server-Timing: app;dur=`` header: authentication, the job list, the template), median and
   p95 over ``--runs`` requests; also with every finished job listed (``?limit=1000``), the job page and
   an unchanged live poll (its 204). Goal: Jobs median <= 100 ms.
2. **Page weight**: each page loaded cold in headless Chromium (cache off), bytes on the wire for the
   page and everything it loads, and every host it asked. Goal: <= 300 KB each, no other host.
3. **CPU of open consoles**: the server process's CPU time (psutil: user + system) over ``--seconds``
   (60) with nothing open, then with 10 browser windows on a running job's page (live part and log
   polling), then with 10 on the Jobs page. Goal: <= 5 % of one core above the idle server.

The server is the real ``paddlecloud up`` (local backend) on loopback with a fresh database filled like
bench/list_jobs.py; the running job prints a line a second.

    .venv/bin/python bench/console.py [--jobs 1000] [--runs 50] [--seconds 60] [--windows 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.list_jobs import fill  # noqa: E402
from tests.e2e.browser import chromium_driver, ensure_chromium  # noqa: E402
from tests.e2e.conftest import Server, write_package  # noqa: E402

from paddlecloud.client import Client  # noqa: E402

TICKER = """
import time
for i in range(100000):
    print(f"step {i} loss {1 / (i + 1):.5f}", flush=True)
    time.sleep(1)
"""


def server_ms(http: httpx.Client, path: str, runs: int) -> tuple[float, float, int]:
    """Median and p95 of the server's own time (ms) for ``path``, and the status it answered."""
    took, status = [], 0
    for _ in range(runs):
        r = http.get(path)
        status = r.status_code
        took.append(float(r.headers["server-timing"].split("dur=")[1]))
    took.sort()
    return statistics.median(took), took[int(0.95 * (len(took) - 1))], status


def render_times(http: httpx.Client, runs: int) -> None:
    print(f"== server time per request (Server-Timing), {runs} runs each")
    live = http.get("/ui/_jobs").text
    since = live.split("since=", 1)[1].split('"', 1)[0]
    for label, path in (
        ("Jobs page (50 finished shown)", "/ui/"),
        ("Jobs page, every job listed", "/ui/?limit=1000"),
        ("Jobs live part, changed", "/ui/_jobs"),
        ("Jobs live part, unchanged (204)", f"/ui/_jobs?since={since}"),
        ("Job page (running job)", "/ui/jobs/ticker"),
        ("Queue page", "/ui/queue"),
        ("Cluster page", "/ui/cluster"),
        ("log tail, 500 lines", "/ui/jobs/ticker/log?worker=trainer-0&tail=500"),
    ):
        http.get(path)  # warm: templates compiled, caches filled
        median, p95, status = server_ms(http, path, runs)
        print(f"  {label:<34} median {median:6.1f} ms   p95 {p95:6.1f} ms   (HTTP {status})")


def page_weights(driver: Any, url: str) -> None:
    print("== page weight, cold cache (bytes on the wire: the page and all it loads)")
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    pages = (("Login", "/ui/login"), ("Jobs (1,000 in history)", "/ui/"), ("Job", "/ui/jobs/ticker"),
             ("Queue", "/ui/queue"), ("Cluster", "/ui/cluster"), ("Quota", "/ui/quota"),
             ("Files", "/ui/pfs/"))  # fmt: skip
    for label, path in pages:
        driver.get_log("performance")
        driver.get(url + path)
        time.sleep(1.5)  # scripts ran, charts and the log fetched once
        sizes: dict[str, float] = {}
        hosts: set[str] = set()
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                hosts.add(httpx.URL(msg["params"]["request"]["url"]).host or "data:")
            elif msg["method"] == "Network.loadingFinished":
                sizes[msg["params"]["requestId"]] = msg["params"]["encodedDataLength"]
        total = sum(sizes.values())
        where = ", ".join(sorted(hosts))
        print(f"  {label:<26} {total / 1024:6.1f} KB in {len(sizes):2d} requests; hosts: {where}")
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})


def cpu_share(proc: psutil.Process, seconds: float) -> float:
    """The process's CPU over ``seconds``, in % of one core."""
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return 100 * ((after.user - before.user) + (after.system - before.system)) / seconds


def open_consoles(driver: Any, url: str, path: str, windows: int) -> list[str]:
    handles = []
    for i in range(windows):
        if i:
            driver.switch_to.new_window("window")
        driver.get(url + path)
        driver.execute_script("performance.setResourceTimingBufferSize(100000)")
        handles.append(driver.current_window_handle)
    return handles


def requests_made(driver: Any, handles: list[str]) -> dict[int, int]:
    """How many requests the windows made so far, by HTTP status."""
    count: dict[int, int] = {}
    for h in handles:
        driver.switch_to.window(h)
        for status in driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.responseStatus)"
        ):
            count[int(status)] = count.get(int(status), 0) + 1
    return count


def close_all_but_first(driver: Any, handles: list[str]) -> None:
    for h in handles[1:]:
        driver.switch_to.window(h)
        driver.close()
    driver.switch_to.window(handles[0])
    driver.get("about:blank")


def cpu_of_consoles(driver: Any, url: str, proc: psutil.Process, windows: int, seconds: float) -> None:
    print(f"== server CPU, % of one core over {seconds:.0f} s (psutil, the server process only)")
    driver.get("about:blank")
    idle = cpu_share(proc, seconds)
    print(f"  idle server (a job running, no console open)   {idle:5.2f} %")
    for label, path in (("the running job's page", "/ui/jobs/ticker"), ("the Jobs page", "/ui/")):
        handles = open_consoles(driver, url, path, windows)
        time.sleep(3)  # loaded, polling
        start = requests_made(driver, handles)
        driver.switch_to.window(handles[0])
        share = cpu_share(proc, seconds)
        end = requests_made(driver, handles)
        made = {k: v - start.get(k, 0) for k, v in sorted(end.items()) if v > start.get(k, 0)}
        total = sum(made.values())
        statuses = ", ".join(f"{n} x {code}" for code, n in made.items())
        print(f"  {windows} consoles on {label:<24} {share:5.2f} %  (+{share - idle:.2f} over idle; "
              f"{total} requests, {total / seconds:.1f}/s: {statuses})")  # fmt: skip
        close_all_but_first(driver, handles)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--windows", type=int, default=10)
    a = ap.parse_args()
    binary, chromedriver = ensure_chromium()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        fill(srv.data_dir, a.jobs)
        srv.start()
        driver = None
        try:
            config = yaml.safe_load((srv.home / "config").read_text())
            token = config["datacenters"][config["current"]]["token"]
            client = Client(srv.url, token)
            pkg = write_package(base / "ticker", {"main.py": TICKER})
            client.submit({"name": "ticker", "entry": "python main.py", "trainers": {"cpu": "500m"}},
                          package_dir=pkg)  # fmt: skip
            deadline = time.monotonic() + 120
            while client.job("ticker").phase != "Running" and time.monotonic() < deadline:
                time.sleep(0.5)
            print(f"server: {srv.url}, {a.jobs} finished jobs in the history + 1 running")
            http = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"})
            render_times(http, a.runs)
            driver = chromium_driver(binary, chromedriver)
            driver.get(srv.url + "/ui/login")
            driver.find_element("name", "token").send_keys(token)
            driver.find_element("css selector", "form button").click()
            time.sleep(1)
            page_weights(driver, srv.url)
            assert srv.proc is not None
            cpu_of_consoles(driver, srv.url, psutil.Process(srv.proc.pid), a.windows, a.seconds)
        finally:
            if driver is not None:
                driver.quit()
            srv.stop()


if __name__ == "__main__":
    main()
