"""The web console in process (memory backend, the real ASGI app): what the browser tests
(tests/e2e/test_console_browser.py) cannot check cheaply or exhaustively.

Security headers on every kind of response; no inline script, style or event handler in any page;
the session cookie's attributes and the login's ``next``; CSRF and Origin checks on every state
change (and Bearer scripts exempt from CSRF); live parts answering 204 while nothing changed;
tenancy (another user's job is a 404 page); user strings escaped; bounded inputs; PFS upload,
download and delete through the console, and its upload limit past the server's body limit.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from memory_platform import MemoryWorld

from paddlecloud.client import Client
from paddlecloud.console.auth import csrf_token
from paddlecloud.console.pages_pfs import UPLOAD_MAX
from paddlecloud.console.security import CSP
from paddlecloud.core.phases import WorkerReason
from paddlecloud.server.app import create_app

with warnings.catch_warnings():  # Starlette's TestClient warns at import time (see conftest.py)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

BASE = "http://127.0.0.1:8080"
SANDBOX = "sandbox; default-src 'none'"
EVIL = '<script>alert(1)</script><img src=x onerror="alert(2)">'
PAGES = ("/ui/", "/ui/jobs/train", "/ui/queue", "/ui/cluster", "/ui/quota", "/ui/pfs/home/alice",
         "/ui/?phase=waiting", "/ui/jobs/nope", "/ui/login")  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    alice = w.client("alice")
    w.submit(alice, "train", pkg, env={"EVIL": EVIL, "LINK": "javascript:alert(3)"})
    w.submit(alice, "huge", pkg, trainers={"count": 1, "cpu": "64"}, queue_anyway=True)
    w.platform.ensure_user("root", admin=True)
    w.tick(2)
    # each user's one token from now on (``ensure_user`` issues a new one each time)
    w.tokens = {u: w.platform.ensure_user(u, admin=u == "root") for u in ("alice", "bob", "root")}  # type: ignore[attr-defined]
    yield w
    w.close()


def browser(w: MemoryWorld, base: str = BASE) -> TestClient:
    return TestClient(create_app(w.platform, run_loop=False), base_url=base, follow_redirects=False)


def token(w: MemoryWorld, user: str) -> str:
    return str(w.tokens[user])  # type: ignore[attr-defined]


def bearer(w: MemoryWorld, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(w, user)}"}


def logged_in(w: MemoryWorld, user: str, base: str = BASE) -> tuple[TestClient, str]:
    """A browser logged in through the form as ``user``; returns it and the session's CSRF token."""
    c = browser(w, base)
    r = c.post("/ui/login", data={"token": token(w, user), "next": "/ui/queue"}, headers={"Origin": base})
    assert r.status_code == 303 and r.headers["location"] == "/ui/queue"
    return c, csrf_token(token(w, user))


# -- headers and markup -----------------------------------------------------------------------------


class _Markup(HTMLParser):
    """Collects what a strict CSP would block or what would run script: inline scripts, style
    attributes and elements, event handler attributes, javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {k for k, _ in attrs}
        if tag == "script":
            src = dict(attrs).get("src")
            if not src:
                self.problems.append("inline <script>")
            else:
                self.scripts.append(src)
        if tag == "style":
            self.problems.append("<style> element")
        if "style" in names:
            self.problems.append(f"style attribute on <{tag}>")
        self.problems += [f"{k} on <{tag}>" for k in names if k.startswith(("on", "hx-on"))]
        self.problems += [
            f"{k}={v} on <{tag}>" for k, v in attrs if v and v.strip().lower().startswith("javascript:")
        ]


def test_every_page_has_the_headers_and_no_inline_script_or_style(world: MemoryWorld) -> None:
    c, _ = logged_in(world, "alice")
    for path in (*PAGES, "/ui/static/console.css", "/ui/jobs/train/log?worker=prepare", "/ui/nowhere"):
        r = c.get(path)
        assert r.status_code in (200, 404), (path, r.status_code)
        sandboxed = "/log?" in path
        assert r.headers["content-security-policy"] == (SANDBOX if sandboxed else CSP), path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "same-origin"
        assert "app;dur=" in r.headers["server-timing"]
        if "/static/" not in path:
            assert r.headers["cache-control"] == "no-store", path
        if r.headers["content-type"].startswith("text/html"):
            markup = _Markup()
            markup.feed(r.text)
            assert markup.problems == [], (path, markup.problems)
            assert all(s.startswith("/ui/static/") for s in markup.scripts), markup.scripts
            assert 'name="htmx-config"' in r.text and '"allowEval": false' in r.text
    for word in ("unsafe-inline", "unsafe-eval", "*"):
        assert word not in CSP
    assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP


def test_user_strings_are_escaped(world: MemoryWorld) -> None:
    c, _ = logged_in(world, "alice")
    page = c.get("/ui/jobs/train").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in page
    assert "<script>alert" not in page and "onerror=" not in page.replace("onerror=&#34;", "")
    assert 'href="javascript:' not in page and "javascript:alert(3)" in page  # shown, not linked
    log = c.get("/ui/jobs/train/log", params={"worker": "prepare"})
    assert log.headers["content-type"].startswith("text/plain")
    assert log.headers["content-security-policy"] == "sandbox; default-src 'none'"


# -- logging in --------------------------------------------------------------------------------------


def test_login_sets_a_strict_cookie_and_goes_only_to_console_pages(world: MemoryWorld) -> None:
    c = browser(world)
    assert c.get("/ui/jobs/train").headers["location"] == "/ui/login?next=%2Fui%2Fjobs%2Ftrain"
    alice = token(world, "alice")
    r = c.post("/ui/login", data={"token": alice, "next": "/ui/quota"}, headers={"Origin": BASE})
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("paddlecloud=") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Path=/ui" in cookie and "Secure" not in cookie and "Max-Age=43200" in cookie
    for target in ("//evil.example/x", "https://evil.example/", "/api/v1/jobs", "/ui\\..\\x", "/ui/\r\nX: y"):
        r = c.post("/ui/login", data={"token": alice, "next": target}, headers={"Origin": BASE})
        assert r.headers["location"] == "/ui/", target
    bad = c.post("/ui/login", data={"token": "pc_wrong", "next": "/ui/"}, headers={"Origin": BASE})
    assert bad.status_code == 401 and "not valid" in bad.text and "set-cookie" not in bad.headers
    # logging someone in from another site's page is refused (login CSRF)
    r = c.post("/ui/login", data={"token": alice}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "set-cookie" not in r.headers


def test_over_tls_the_cookie_is_secure(world: MemoryWorld) -> None:
    c = browser(world, "https://127.0.0.1:8443")
    r = c.post(
        "/ui/login", data={"token": token(world, "alice")}, headers={"Origin": "https://127.0.0.1:8443"}
    )
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("__Secure-paddlecloud=") and "Secure" in cookie
    assert c.get("/ui/jobs/train").status_code == 200


def test_without_a_session_browsers_are_sent_to_log_in_and_scripts_get_401(world: MemoryWorld) -> None:
    c = browser(world)
    r = c.get("/ui/_jobs", headers={"HX-Request": "true", "HX-Current-URL": f"{BASE}/ui/queue"})
    assert r.status_code == 401 and r.headers["hx-redirect"] == "/ui/login?next=%2Fui%2Fqueue"
    assert c.get("/ui/", headers={"Authorization": "Bearer pc_wrong"}).status_code == 401
    assert c.get("/ui/", headers=bearer(world, "alice")).status_code == 200


# -- CSRF --------------------------------------------------------------------------------------------


def test_state_changes_need_the_csrf_token_and_this_origin(world: MemoryWorld) -> None:
    c, csrf = logged_in(world, "alice")
    refused = [
        {},  # no token
        {"X-CSRF-Token": "0" * 64},  # a wrong one
        {"X-CSRF-Token": csrf_token(token(world, "bob"))},  # another session's
        {"X-CSRF-Token": csrf, "Origin": "https://evil.example"},  # the right one, from another site
        {"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"},
    ]
    for headers in refused:
        r = c.post("/ui/jobs/train/kill", headers={"HX-Request": "true", **headers})
        assert r.status_code == 403, headers
        assert r.headers["hx-retarget"] == "#flash"
    assert c.get("/api/v1/jobs/train", headers=bearer(world, "alice")).json()["phase"] != "Killed"
    r = c.post("/ui/jobs/train/kill", headers={"HX-Request": "true", "X-CSRF-Token": csrf, "Origin": BASE})
    assert r.status_code == 200 and 'id="job-live"' in r.text and "Killed" in r.text
    # a plain form carries it as a field; the answer goes back to the page
    r = c.post("/ui/jobs/huge/kill", data={"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs/huge"
    # logging out is a state change too
    assert c.post("/ui/logout").status_code == 403
    r = c.post("/ui/logout", data={"csrf_token": csrf})
    assert r.status_code == 303 and 'paddlecloud=""' in r.headers["set-cookie"]


def test_bearer_scripts_need_no_csrf_token(world: MemoryWorld) -> None:
    r = browser(world).post("/ui/jobs/train/kill", headers=bearer(world, "alice"))
    assert r.status_code == 303


# -- live parts ----------------------------------------------------------------------------------------


def test_a_live_part_is_204_until_something_changes(world: MemoryWorld, tmp_path: Path) -> None:
    c, _ = logged_in(world, "alice")
    first = c.get("/ui/_jobs")
    version = re.search(r'hx-get="/ui/_jobs\?since=([^"&]+)"', first.text)
    assert version is not None
    assert c.get("/ui/_jobs", params={"since": version.group(1)}).status_code == 204
    sdk = Client(endpoint="http://testserver", token=token(world, "alice"), http=browser(world))
    world.submit(sdk, "later", tmp_path / "pkg")
    changed = c.get("/ui/_jobs", params={"since": version.group(1)})
    assert changed.status_code == 200 and "later" in changed.text
    job = c.get("/ui/jobs/train/_live").text
    v = re.search(r"/_live\?since=([^\"&]+)", job)
    assert v is not None and c.get("/ui/jobs/train/_live", params={"since": v.group(1)}).status_code == 204
    assert 'id="job-events" hx-swap-oob="true"' in job  # the events ride along, out of band


# -- tenancy -----------------------------------------------------------------------------------------


def test_another_users_job_is_a_404_and_lists_show_only_ones_own(world: MemoryWorld) -> None:
    bob, _ = logged_in(world, "bob")
    r = bob.get("/ui/jobs/train")
    assert r.status_code == 404 and "Not found" in r.text and "EVIL" not in r.text
    assert r.text.replace("train", "") == bob.get("/ui/jobs/no-such").text.replace("no-such", "")
    assert bob.get("/ui/jobs/train/log", params={"worker": "prepare"}).status_code == 404
    assert bob.get("/ui/jobs/train", params={"user": "alice"}).status_code == 403
    for path in ("/ui/", "/ui/?phase=finished", "/ui/queue", "/ui/cluster", "/ui/_jobs", "/ui/_queue"):
        text = bob.get(path).text
        assert "train" not in text and "huge" not in text and "alice" not in text, path
    assert "another user" in bob.get("/ui/queue").text
    root, _ = logged_in(world, "root")
    everyone = root.get("/ui/").text
    assert "train" in everyone and "huge" in everyone and "<th>User</th>" in everyone
    assert "huge" not in root.get("/ui/", params={"phase": "active"}).text
    assert root.get("/ui/jobs/train", params={"user": "alice"}).status_code == 200


# -- bounds --------------------------------------------------------------------------------------------


def test_inputs_are_bounded(world: MemoryWorld) -> None:
    c, _ = logged_in(world, "alice")
    for path, params in (
        ("/ui/jobs/train/log", {"worker": "prepare", "tail": "0"}),
        ("/ui/jobs/train/log", {"worker": "prepare", "tail": "100000"}),
        ("/ui/jobs/train/log", {"worker": "x" * 65}),
        ("/ui/", {"limit": "100000"}),
        ("/ui/", {"user": "u" * 65}),
        ("/ui/_jobs", {"since": "v" * 65}),
    ):
        r = c.get(path, params=params)
        assert r.status_code == 422, (path, params, r.status_code)
    assert c.get("/ui/jobs/" + "n" * 300).status_code == 422


# -- PFS ------------------------------------------------------------------------------------------------


def test_pfs_upload_download_delete(world: MemoryWorld) -> None:
    c, csrf = logged_in(world, "alice")
    name = "<b onclick='x'>a.txt"
    big = b"x" * (2 << 20)  # over the server's 1 MiB body limit, under the console's upload limit
    r = c.post("/ui/pfs/home/alice", data={"csrf_token": csrf, "op": "upload"}, files={"file": (name, big)},
               headers={"HX-Request": "true"})  # fmt: skip
    assert r.status_code == 200 and "uploaded" in r.text
    assert "&lt;b onclick=&#39;x&#39;&gt;a.txt" in r.text and "<b onclick" not in r.text
    url = "/ui/pfs/home/alice/%3Cb%20onclick%3D%27x%27%3Ea.txt"
    assert f'href="{url}"' in r.text
    got = c.get(url)
    assert got.content == big and got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"].startswith("attachment; filename*=UTF-8''")
    assert got.headers["content-security-policy"] == "sandbox; default-src 'none'"
    # without the token nothing is written or removed
    assert c.post(url, data={"op": "delete"}).status_code == 403
    assert c.get(url).status_code == 200
    r = c.post(url, data={"op": "delete", "csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/ui/pfs/home/alice"
    assert c.get(url).status_code == 404
    # over the console's limit: refused before the body is read
    r = c.post("/ui/pfs/home/alice", data={"csrf_token": csrf, "op": "upload"},
               files={"file": ("big.bin", b"x" * (UPLOAD_MAX + (128 << 10)))})  # fmt: skip
    assert r.status_code == 413 and "pfs cp" in r.text
    # another user's home: read-only to nobody but her and admins
    bob, bob_csrf = logged_in(world, "bob")
    assert bob.get("/ui/pfs/home/alice").status_code == 403
    r = bob.post("/ui/pfs/home/alice", data={"csrf_token": bob_csrf, "op": "mkdir", "name": "x"})
    assert r.status_code == 403


def test_api_cluster_and_queue(world: MemoryWorld) -> None:
    http = browser(world)
    cluster = http.get("/api/v1/cluster", headers=bearer(world, "alice")).json()
    assert cluster["policy"] == "elastic" and cluster["backend"] == "memory"
    (node,) = cluster["nodes"]
    assert node["capacity"]["cpu_m"] == 4000 and node["allocated"]["cpu_m"] == 1000  # "train" holds 1
    assert cluster["jobs_running"] == 1 and cluster["jobs_queued"] == 1
    queue = http.get("/api/v1/queue", headers=bearer(world, "alice")).json()
    assert [(e["position"], e["name"], e["reason"]) for e in queue["items"]] == [
        (1, "huge", "ExceedsNodeCapacity")
    ]


def test_chart_data(world: MemoryWorld) -> None:
    """The charts' data: a job's trainers over time (its owner's only) and the cluster's last hour."""
    world.clock.advance(15)
    world.tick(2)
    c, _ = logged_in(world, "alice")
    trainers = c.get("/ui/jobs/train/trainers.json").json()
    assert trainers["step"] and len(trainers["x"]) >= 2
    assert [s["label"] for s in trainers["series"]] == ["trainers", "running"]
    assert trainers["series"][0]["values"][0] == 1
    bob, _ = logged_in(world, "bob")
    assert bob.get("/ui/jobs/train/trainers.json").status_code == 404
    util = bob.get("/ui/cluster/history.json", params={"chart": "util"}).json()
    assert util["unit"] == "%" and util["max"] == 100 and len(util["x"]) >= 2
    assert util["series"][0]["label"] == "CPU" and util["series"][0]["values"][-1] == 25.0  # 1 of 4 CPUs
    queue = bob.get("/ui/cluster/history.json", params={"chart": "queue"}).json()
    assert [s["values"][-1] for s in queue["series"]] == [1, 1]  # "huge" waits, "train" runs
    assert bob.get("/ui/cluster/history.json", params={"chart": "secrets"}).status_code == 422


def test_an_oom_killed_worker_shows_its_reason_and_limit_on_the_job_page(world: MemoryWorld) -> None:
    world.engine.run("alice/train", "trainer-0")
    world.tick()
    message = "killed for using more memory than its limit 512Mi (submit --memory)"
    world.engine.exit("alice/train", "trainer-0", 137, WorkerReason.OOM_KILLED, message)
    world.tick(2)
    c, _ = logged_in(world, "alice")
    page = c.get("/ui/jobs/train").text
    assert "OOMKilled" in page and "more memory than its limit 512Mi" in page
    sdk = Client(endpoint="http://testserver", token=token(world, "alice"), http=browser(world))
    job = sdk.job("train")
    assert (
        job.phase == "Failed"
        and job.reason == "OOMKilled"
        and job.workers[0].reason == WorkerReason.OOM_KILLED
    )
