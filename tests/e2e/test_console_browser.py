"""The web console in a real browser: Debian's headless Chromium driven by Selenium against the real
``paddlecloud up`` (local backend, sandboxed workers) running real jobs.

One server and one browser serve the whole module (the tests run in order and share them): log in
through the form, watch a job go Queued -> Running -> Succeeded on one page without a reload while
its log streams, a waiting job's reason on Jobs and Queue, kill from the page, a restarted worker's
previous log, another user's pages (404, none of the first user's jobs), and hostile strings in
env values, log lines and file names that must stay text. Every page's screenshot is written to
``$PADDLECLOUD_SCREENSHOTS`` (or the test's temp dir); the browser's log must show no CSP violation
and the browser may never ask any host but the server.

Chromium and its driver come from Debian (``scripts/ensure-system-packages.sh chromium``, which
``make test`` runs); without them, as root with apt-get the module installs them, else it skips.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from paddlecloud.client import Client

from .browser import chromium_driver, ensure_chromium
from .conftest import Server, write_package

pytestmark = pytest.mark.e2e

T = TypeVar("T")

#: strings that would run script, add elements or links, or trigger htmx if they reached the page
#: as HTML (each marks what it would add with ``data-pwned`` or ``window.__pwned``)
HOSTILE = [
    "<script>window.__pwned=1;alert(1)</script>",
    '<img src=x onerror="window.__pwned=1;alert(2)" data-pwned=1>',
    '"><svg onload="alert(3)" data-pwned=1>',
    "'><iframe src=javascript:alert(4) data-pwned=1></iframe>",
    "javascript:alert(5)",
    "{{7*7}}{% raw %}<b data-pwned=1>b</b>",
    "</pre></code></td><script>alert(6)</script>",
    '<a href="javascript:alert(7)" data-pwned=1>click</a>',
    "&lt;script&gt;alert(8)&lt;/script&gt;",
    '<div hx-post="/ui/logout" hx-trigger="load" data-pwned=1>x</div>',
    "<style>body{display:none}</style><meta http-equiv=refresh content=0;url=javascript:alert(9)>",
]
HOSTILE_FILE = "<img src=x onerror=alert(10) data-pwned=1>\"q'.txt"


@dataclass
class Console:
    server: Server
    browser: Any
    tokens: dict[str, str]
    shots: Path
    pkg_root: Path
    #: every URL the browser requested (from its performance log)
    requested: set[str] = field(default_factory=set)
    #: the browser's console messages
    messages: list[str] = field(default_factory=list)
    clients: dict[str, Client] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, user: str) -> Client:
        """The SDK as ``user`` (in this process: no CLI start-up per call)."""
        if user not in self.clients:
            self.clients[user] = Client(endpoint=self.url, token=self.tokens[user])
        return self.clients[user]

    def submit(self, user: str, name: str, code: str, **spec: Any) -> None:
        pkg = write_package(self.pkg_root / name, {"main.py": code})
        body = {"name": name, "entry": "python main.py", **spec}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK's notes about defaults
            self.client(user).submit(body, package_dir=pkg)

    def job(self, user: str, name: str) -> dict[str, Any]:
        return self.client(user).job(name).model_dump(mode="json")

    def wait_phase(self, user: str, name: str, phases: set[str], timeout: float = 60) -> dict[str, Any]:
        return until(
            lambda: (j := self.job(user, name))["phase"] in phases and j, timeout, f"{name} in {phases}"
        )

    # -- the browser ------------------------------------------------------------------------------

    def get(self, path: str) -> None:
        self.browser.get(self.url + path)
        self.drain_logs()

    def login(self, user: str) -> None:
        self.get("/ui/login")
        self.browser.find_element("name", "token").send_keys(self.tokens[user])
        self.browser.find_element("css selector", "form button").click()
        until(lambda: self.text(".me .user").startswith(user), 10, f"logged in as {user}")

    def logout(self) -> None:
        self.browser.find_element("css selector", ".me form button").click()
        until(lambda: "/ui/login" in self.browser.current_url, 10, "logged out")

    def text(self, css: str) -> str:
        """The text of the first element ``css`` selects ("" if none), read in one step: the live
        parts are replaced while the test reads them."""
        got = self.browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css
        )
        return str(got).strip()

    def click(self, xpath: str) -> None:
        """Click the element ``xpath`` finds, again if a live refresh replaced it meanwhile."""
        from selenium.common.exceptions import StaleElementReferenceException

        for _ in range(5):
            try:
                self.browser.find_element("xpath", xpath).click()
                return
            except StaleElementReferenceException:
                time.sleep(0.1)
        raise AssertionError(f"{xpath} kept being replaced")

    def page_text(self) -> str:
        return str(self.browser.execute_script("return document.body.innerText"))

    def shot(self, name: str, full: bool = False) -> Path:
        path = self.shots / f"{name}.png"
        if full:
            height = self.browser.execute_script("return document.documentElement.scrollHeight")
            self.browser.set_window_size(1400, min(int(height) + 20, 4000))
        self.browser.save_screenshot(str(path))
        if full:
            self.browser.set_window_size(1400, 1000)
        return path

    def drain_logs(self) -> None:
        for entry in self.browser.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                self.requested.add(msg["params"]["request"]["url"])
        self.messages += [e["message"] for e in self.browser.get_log("browser")]


def until(check: Callable[[], T | bool | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def _config_token(server: Server) -> str:
    """The default admin's token, from the client config ``up`` wrote."""
    config = yaml.safe_load((server.home / "config").read_text())
    return str(config["datacenters"][config["current"]]["token"])


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    binary, driver = ensure_chromium()
    base = tmp_path_factory.mktemp("console")
    server = Server(data_dir=base / "data", home=base / "home",
                    up_args=["--nodes", "1", "--node-cpu", "4", "--node-memory", "8Gi"])  # fmt: skip
    server.home.mkdir()
    server.start()
    admin = Client(endpoint=server.url, token=_config_token(server))
    tokens = {u: admin.create_user(u).token for u in ("alice", "bob")}
    shots = Path(os.environ.get("PADDLECLOUD_SCREENSHOTS") or base / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    browser = chromium_driver(binary, driver)
    c = Console(server, browser, tokens, shots, base / "packages")
    try:
        yield c
    finally:
        browser.quit()
        for job in admin.jobs(all_users=True):
            admin.kill(job.name, 0, user=job.user)
        for client in (admin, *c.clients.values()):
            client.close()
        server.stop()


TICKER = """
import time
for i in range(14):
    print(f"step {i} loss {1 / (i + 1):.3f}", flush=True)
    time.sleep(0.4)
"""


def test_login_wait_kill_and_watch_a_job_to_the_end(console: Console) -> None:
    c = console
    c.get("/ui/")
    assert "/ui/login" in c.browser.current_url  # not logged in: the login page, then back
    c.login("alice")
    c.submit("alice", "blocker", "import time\ntime.sleep(120)\n", trainers={"cpu": "4"}, priority="high")
    c.wait_phase("alice", "blocker", {"Running"})
    c.submit("alice", "watched", TICKER, trainers={"cpu": "1"})
    waiting = c.wait_phase("alice", "watched", {"Queued"})
    until(lambda: c.job("alice", "watched")["reason"] not in ("", "Queued"), 20, "a wait reason")
    reason = c.job("alice", "watched")["reason"]

    # the reason, first on the Jobs page and on the Queue page, without reloading
    c.get("/ui/")
    until(lambda: reason in c.text("tr.waiting"), 10, "the reason on the Jobs page")
    assert "watched" in c.text("tr.waiting") and waiting["phase"] == "Queued"
    c.shot("jobs")
    c.get("/ui/queue")
    until(lambda: reason in c.text("#queue tbody"), 10, "the reason on the Queue page")
    c.shot("queue")

    # the watched job's page stays open in this tab; the blocker is killed from its page in another
    c.get("/ui/jobs/watched")
    c.browser.execute_script("window.__sameDocument = true")
    assert c.text(".job-head .phase") == "Queued"
    watched_tab = c.browser.current_window_handle
    c.browser.switch_to.new_window("tab")
    c.get("/ui/jobs/blocker")
    c.click("//div[@class='job-head']/button")
    c.browser.switch_to.alert.accept()  # "Kill job blocker? ..."
    until(lambda: c.text(".job-head .phase") == "Killed", 20, "Killed on the blocker's page")
    assert c.job("alice", "blocker")["phase"] == "Killed"
    c.browser.close()
    c.browser.switch_to.window(watched_tab)

    phases = ["Queued"]
    log_sizes: list[int] = []
    deadline = time.monotonic() + 60
    while phases[-1] != "Succeeded" and time.monotonic() < deadline:
        phase = c.text(".job-head .phase")
        if phase and phase != phases[-1]:
            phases.append(phase)
        if phase == "Running":
            log_sizes.append(c.text("#log-text").count("step "))
        time.sleep(0.15)
    assert c.browser.execute_script("return window.__sameDocument") is True  # never reloaded
    assert phases[0] == "Queued" and phases[-1] == "Succeeded" and "Running" in phases, phases
    assert phases.index("Running") < phases.index("Succeeded")
    # the log grew while the job ran (lines arrived without a reload), and ends complete
    grown = sorted(set(log_sizes))
    assert len(grown) >= 2 and grown[0] < grown[-1], log_sizes
    until(lambda: "step 13 loss" in c.text("#log-text"), 10, "the last log line")
    until(lambda: c.text("#log-state") == "ended", 10, "the log marked ended")
    c.shot("job", full=True)


FLAKY = """
import os, sys
if os.environ["PADDLECLOUD_RESTART"] == "0":
    print("first run: failing on purpose", flush=True)
    sys.exit(3)
print("second run: all fine", flush=True)
"""


def test_a_restarted_workers_previous_log(console: Console) -> None:
    c = console
    c.submit("alice", "flaky", FLAKY, trainers={"restart": "OnFailure"}, restart_backoff_s=0.0)
    c.wait_phase("alice", "flaky", {"Succeeded"})
    c.get("/ui/jobs/flaky")
    until(lambda: "second run: all fine" in c.text("#log-text"), 10, "the current run's log")
    trainer = "//tr[td[1][normalize-space()='trainer-0']]"
    restarts = c.browser.execute_script(
        "return document.evaluate(arguments[0], document).iterateNext().cells[5].innerText", trainer
    )
    assert restarts == "1"
    c.click(trainer + "//a[@data-previous='1']")
    until(lambda: "first run: failing on purpose" in c.text("#log-text"), 10, "the previous run's log")
    assert "second run" not in c.text("#log-text")
    assert "previous run" in c.text("#log-title")


def test_another_user_sees_none_of_it(console: Console) -> None:
    c = console
    # one of alice's jobs waits for good (it asks more than the node has), so bob's queue is not empty
    c.submit("alice", "never-fits", "print(1)\n", trainers={"cpu": "64"}, queue_anyway=True)
    c.wait_phase("alice", "never-fits", {"Queued"})
    c.get("/ui/quota")
    c.shot("quota")
    c.get("/ui/cluster")
    c.shot("cluster")
    c.logout()
    c.login("bob")
    alice_jobs = ("watched", "blocker", "flaky", "never-fits")
    for path in ("/ui/", "/ui/?phase=finished", "/ui/queue", "/ui/cluster", "/ui/quota"):
        c.get(path)
        text = c.page_text()
        assert not any(name in text for name in alice_jobs), (path, text)
    c.get("/ui/queue")
    assert "another user's job" in c.text("#queue tbody")  # its place in the queue, not its name
    c.get("/ui/jobs/watched")
    assert c.text("h1") == "Not found" and "watched" in c.text(".error")  # as a job that never was
    c.get("/ui/jobs/watched?user=alice")  # naming her: admins only, as in the API
    assert c.text("h1") == "Not allowed" and "step" not in c.page_text()
    c.get("/ui/pfs/home/alice")
    assert c.text("h1") == "Not allowed"
    # scripts: the same pages with the API's bearer token, the same tenancy
    for user, status in (("bob", 404), ("alice", 200)):
        r = httpx.get(f"{c.url}/ui/jobs/watched", headers={"Authorization": f"Bearer {c.tokens[user]}"})
        assert r.status_code == status, (user, r.status_code)
    c.logout()
    c.login("alice")


PRINTER = """
import os
for key in sorted(os.environ):
    if key.startswith("HOSTILE_"):
        print(os.environ[key])
"""


def _assert_inert(c: Console) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        c.browser.switch_to.alert.text  # noqa: B018 - raises unless a dialog is open
    injected = c.browser.execute_script(
        'return [document.querySelectorAll(\'[data-pwned], iframe, svg[onload], img[src="x"], '
        '[hx-trigger="load"], meta[http-equiv]\').length, window.__pwned === undefined, '
        "document.querySelectorAll('a[href^=\"javascript:\"]').length, document.body.offsetHeight > 0]"
    )
    assert injected == [0, True, 0, True], injected


def test_hostile_strings_stay_text(console: Console) -> None:
    c = console
    # job names are DNS labels: a hostile one never gets in
    r = httpx.post(f"{c.url}/api/v1/jobs", json={"name": HOSTILE[0], "package": "/pfs/x", "entry": "x"},
                   headers={"Authorization": f"Bearer {c.tokens['alice']}"})  # fmt: skip
    assert r.status_code == 422 and r.json()["error"]["field"] == "name"
    env = {f"HOSTILE_{i:02d}": s for i, s in enumerate(HOSTILE)}
    c.submit("alice", "hostile", PRINTER, env=env)
    c.wait_phase("alice", "hostile", {"Succeeded"})
    hostile_file = c.pkg_root / HOSTILE_FILE
    hostile_file.write_text(HOSTILE[1])
    c.client("alice").pfs.upload_file(
        hostile_file, c.job("alice", "hostile")["spec"]["output"] + "/" + HOSTILE_FILE
    )

    c.get("/ui/jobs/hostile")
    until(lambda: HOSTILE[0] in c.text("#log-text"), 10, "the hostile log lines")
    time.sleep(2.5)  # a live refresh has run
    text = c.page_text()
    for s in HOSTILE:  # shown, as text: in the env table and in the log
        assert text.count(s) >= 2, s
    assert HOSTILE_FILE in text  # the output listing
    _assert_inert(c)
    c.shot("job-hostile", full=True)

    c.get("/ui/pfs/home/alice/jobs/hostile/output")
    until(lambda: HOSTILE_FILE in c.text("#pfs"), 10, "the hostile file name")
    _assert_inert(c)
    # downloading it gives its bytes as an attachment, never a page of this site
    href = c.browser.execute_script(
        "return [...document.querySelectorAll('#pfs a')].find(a => a.textContent === arguments[0]).href",
        HOSTILE_FILE,
    )
    r = httpx.get(href, headers={"Authorization": f"Bearer {c.tokens['alice']}"})
    assert r.status_code == 200 and r.text == HOSTILE[1]
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"].startswith("attachment;")
    c.shot("pfs")
    for path in ("/ui/", "/ui/queue"):
        c.get(path)
        _assert_inert(c)


def test_pfs_upload_and_delete_from_the_page(console: Console) -> None:
    c = console
    c.get("/ui/pfs/home/alice")
    upload = c.pkg_root / "notes.txt"
    upload.write_text("hello from the browser\n")
    c.browser.find_element("css selector", 'form.upload input[type="file"]').send_keys(str(upload))
    c.browser.find_element("css selector", "form.upload button").click()
    until(lambda: "uploaded notes.txt" in c.text("#pfs"), 10, "the upload's note")
    back = c.pkg_root / "notes-back.txt"
    c.client("alice").pfs.download_file("pfs:notes.txt", back)
    assert back.read_text() == "hello from the browser\n"
    c.click("//tr[td[1][normalize-space()='notes.txt']]//button")
    c.browser.switch_to.alert.accept()
    until(lambda: "deleted notes.txt" in c.text("#pfs"), 10, "the delete's note")
    assert "notes.txt" not in [f.path.rsplit("/", 1)[-1] for f in c.client("alice").pfs.ls()]


def test_the_browser_asked_only_this_server_and_broke_no_policy(console: Console) -> None:
    c = console
    c.drain_logs()
    others = {u for u in c.requested if not u.startswith((c.url, "data:"))}
    assert not others, others
    assert any(u.startswith(f"{c.url}/ui/static/vendor/htmx") for u in c.requested)
    violations = [m for m in c.messages if "Content Security Policy" in m or "Refused to" in m]
    assert not violations, violations
