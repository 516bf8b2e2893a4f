"""Tenancy, route by route: every route of the app has a row here (a new route without one fails the
suite). For each route:

(a) without a token (or with a bad one) the answer is 401 ``unauthorized``; only health and version
    are public;
(b) user bob aiming at alice's job, logs, workers, files and uploads gets 403 or 404, alice's things
    are untouched, and bob learns nothing: the answer for alice's existing job / file / upload / user
    is the same (status and body, the name itself aside) as for one that does not exist;
(c) self-scoped routes (list jobs, quota, usage, whoami) show bob only his own; admins see everyone.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from paddlecloud.api.files import UploadView
from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.client import Client
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.core.checksum import ChunkedHasher, chunk_digest
from paddlecloud.server import create_app

with warnings.catch_warnings():  # Starlette's TestClient warns at import time (see conftest.py)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.timeout(60)

NODE = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)

API = "/api/v1"
ALICE = "/pfs/local/home/alice"
BOB = "/pfs/local/home/bob"
MiB = 1 << 20


# -- the routes of the app -----------------------------------------------------------------------


def api_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(METHOD, path) of every APIRoute, through included routers (FastAPI >= 0.16x keeps those as
    ``_IncludedRouter`` entries in ``app.routes``)."""
    out: set[tuple[str, str]] = set()

    def add(path: str, methods: set[str] | None) -> None:
        for m in methods or ():
            if m != "HEAD":
                out.add((m, path))

    def walk(routes: list[Any]) -> None:
        for r in routes:
            if isinstance(r, APIRoute):
                add(r.path, r.methods)
            elif hasattr(r, "effective_candidates"):
                for c in r.effective_candidates():
                    if hasattr(c, "effective_candidates"):
                        walk([c])
                    elif isinstance(getattr(c, "original_route", None), APIRoute):
                        add(c.path, c.methods)

    walk(app.routes)
    return out


# -- who and what --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What bob aims at: alice's real things (``exists``) or look-alikes that do not exist."""

    job: str
    user: str
    file: str
    dir: str
    upload: str
    sampleset: str = ""

    def names(self) -> list[str]:
        return [self.upload, self.file, self.dir, self.job, self.user, self.sampleset]


@dataclass
class World:
    platform: Platform
    http: httpx.Client
    tokens: dict[str, str]
    exists: Target
    missing: Target
    bob_package: str
    alice_upload: UploadView
    #: alice's state right after the world was built (see alice_state)
    pristine: dict[str, Any] = field(default_factory=dict)

    def call(self, who: str | None, req: Request) -> httpx.Response:
        headers = dict(req.headers)
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens.get(who, who)}"
        return self.http.request(
            req.method,
            req.prefix + req.url,
            params=req.params,
            json=req.json,
            content=req.content,
            headers=headers,
        )


@dataclass
class Request:
    method: str
    url: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: what ``url`` is under (``/metrics`` is at the root)
    prefix: str = API


def small_put_headers(data: bytes) -> dict[str, str]:
    h = ChunkedHasher(max(len(data), 1))
    h.update(data)
    return {"X-PaddleCloud-Checksum": h.checksum()}


def tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


PAYLOAD = b"bob was here"

#: (method, route) -> function(world, target) -> the requests bob makes against ``target``
Probe = Callable[[World, Target], list[Request]]


def job_probes(method: str, suffix: str) -> Probe:
    def probe(w: World, t: Target) -> list[Request]:
        return [
            Request(method, f"/jobs/{t.job}{suffix}"),  # alice's job name, bob's scope
            Request(method, f"/jobs/{t.job}{suffix}", params={"user": t.user}),  # naming alice
        ]

    return probe


def task_probes(method: str, suffix: str, body: dict[str, str] | None = None) -> Probe:
    """Like job_probes, for the task master's routes (trainers' requests carry a lease id)."""

    def probe(w: World, t: Target) -> list[Request]:
        return [
            Request(method, f"/jobs/{t.job}/tasks{suffix}", json=body),
            Request(method, f"/jobs/{t.job}/tasks{suffix}", params={"user": t.user}, json=body),
        ]

    return probe


LEASE = {"lease": "bob-lease-0001"}
REPORT = {
    "replicas": 1,
    "local_bsz": 8.0,
    "step_time_s": 0.1,
    "grad_sqr": 1.0,
    "grad_var": 1.0,
    "batch_size": 8,
}


def submit_probes(w: World, t: Target) -> list[Request]:
    spec = {"name": "stolen", "entry": "python main.py", "trainers": {"cpu": "100m"}}
    return [
        Request("POST", "/jobs", json={**spec, "package": f"{ALICE}/jobs/{t.job}/package.tar.gz"}),
        Request("POST", "/jobs", json={**spec, "package": w.bob_package, "input": t.dir}),
        Request("POST", "/jobs", json={**spec, "package": w.bob_package, "input": t.file}),
        Request("POST", "/jobs", json={**spec, "package": w.bob_package, "output": f"{t.dir}/out"}),
    ]


def sampleset_probes(method: str, suffix: str, body: dict[str, str] | None = None) -> Probe:
    """SampleSet routes name no user: bob aiming at alice's SampleSet's name looks in his own."""

    def probe(w: World, t: Target) -> list[Request]:
        return [
            Request(method, f"/samplesets/{t.sampleset}{suffix}", json=body),
            Request(method, f"/samplesets/{t.sampleset}{suffix}", params={"user": t.user}, json=body),
        ]

    return probe


def sampleset_create_probes(w: World, t: Target) -> list[Request]:
    """Bob making a SampleSet of alice's files (her folder, her file)."""
    return [
        Request("POST", "/samplesets", json={"name": "stolen-set", "source": t.dir}),
        Request("POST", "/samplesets", json={"name": "stolen-set", "source": t.file}),
    ]


def pfs_get(endpoint: str, key: str = "file", **extra: Any) -> Probe:
    def probe(w: World, t: Target) -> list[Request]:
        return [Request("GET", f"/pfs/{endpoint}", params={"path": getattr(t, key), **extra})]

    return probe


CASES: dict[tuple[str, str], dict[str, Any]] = {
    # public
    ("GET", "/api/v1/health"): {"public": True},
    ("GET", "/api/v1/version"): {"public": True},
    # self-scoped: checked by test_self_scoped_routes
    ("GET", "/api/v1/whoami"): {"self": True},
    ("GET", "/api/v1/quota"): {"self": True},
    ("GET", "/api/v1/pfs/usage"): {"self": True},
    ("GET", "/api/v1/pfs/home"): {"self": True},
    # the cluster and the queue: every user sees them, other users' jobs unnamed (test_c_queue...)
    ("GET", "/api/v1/cluster"): {"self": True},
    ("GET", "/api/v1/queue"): {
        "self": True,
        "probe": lambda w, t: [Request("GET", "/queue", params={"user": t.user})],
    },
    ("GET", "/api/v1/jobs"): {
        "self": True,
        "probe": lambda w, t: [Request("GET", "/jobs", params={"user": t.user})],
    },
    # jobs
    ("POST", "/api/v1/jobs"): {"probe": submit_probes},
    ("GET", "/api/v1/jobs/{name}"): {"probe": job_probes("GET", "")},
    ("DELETE", "/api/v1/jobs/{name}"): {"probe": job_probes("DELETE", "")},
    ("POST", "/api/v1/jobs/{name}/kill"): {"probe": job_probes("POST", "/kill")},
    ("GET", "/api/v1/jobs/{name}/workers"): {"probe": job_probes("GET", "/workers")},
    ("GET", "/api/v1/jobs/{name}/logs"): {"probe": job_probes("GET", "/logs")},
    ("GET", "/api/v1/jobs/{name}/history"): {"probe": job_probes("GET", "/history")},
    # any signed-in user: the cluster's aggregate numbers, no user or job names
    ("GET", "/api/v1/cluster/history"): {},
    # user and job names as labels: admins (or the scrape token of up --metrics-token-file)
    ("GET", "/metrics"): {"admin": True, "probe": lambda w, t: [Request("GET", "/metrics", prefix="")]},
    # the task master (job tokens: tests/unit/test_task_master.py)
    ("GET", "/api/v1/jobs/{name}/tasks"): {"probe": task_probes("GET", "")},
    ("POST", "/api/v1/jobs/{name}/tasks/lease"): {"probe": task_probes("POST", "/lease", LEASE)},
    ("POST", "/api/v1/jobs/{name}/tasks/{index}/done"): {"probe": task_probes("POST", "/0/done", LEASE)},
    ("POST", "/api/v1/jobs/{name}/tasks/{index}/fail"): {"probe": task_probes("POST", "/0/fail", LEASE)},
    ("POST", "/api/v1/jobs/{name}/tasks/{index}/renew"): {"probe": task_probes("POST", "/0/renew", LEASE)},
    # adaptive batch size (job tokens: tests/unit/test_adaptive_api.py)
    ("GET", "/api/v1/jobs/{name}/adaptive"): {"probe": job_probes("GET", "/adaptive")},
    ("POST", "/api/v1/jobs/{name}/adaptive/report"): {
        "probe": lambda w, t: [
            Request("POST", f"/jobs/{t.job}/adaptive/report", json=REPORT),
            Request("POST", f"/jobs/{t.job}/adaptive/report", params={"user": t.user}, json=REPORT),
        ]
    },
    # SampleSets: the caller's own only (admins list everyone's: test_c_sampleset_listing_is_scoped)
    ("GET", "/api/v1/samplesets"): {"self": True},
    # a user's own registry logins: no name of anyone else's reaches them (test_registry_logins.py)
    ("GET", "/api/v1/registries"): {"self": True},
    ("PUT", "/api/v1/registries/{registry}/login"): {
        "self": True,
        "probe": lambda w, t: [
            Request("PUT", "/registries/127.0.0.1:5001/login", json={"username": "u", "password": "p"})
        ],
    },
    ("DELETE", "/api/v1/registries/{registry}/login"): {
        "self": True,
        "probe": lambda w, t: [Request("DELETE", "/registries/127.0.0.1:5001/login")],
    },
    ("POST", "/api/v1/samplesets"): {"probe": sampleset_create_probes},
    ("GET", "/api/v1/samplesets/{name}"): {"probe": sampleset_probes("GET", "")},
    ("DELETE", "/api/v1/samplesets/{name}"): {"probe": sampleset_probes("DELETE", "")},
    ("GET", "/api/v1/samplesets/{name}/jobs"): {"probe": sampleset_probes("GET", "/jobs")},
    ("POST", "/api/v1/samplesets/{name}/jobs"): {
        "probe": sampleset_probes("POST", "/jobs", {"kind": "clear", "path": ""})
    },
    # files
    ("GET", "/api/v1/pfs/stat"): {"probe": lambda w, t: pfs_get("stat")(w, t) + pfs_get("stat", "dir")(w, t)},
    ("GET", "/api/v1/pfs/list"): {
        "probe": lambda w, t: [
            *pfs_get("list", "dir")(w, t),
            *pfs_get("list", "dir", recursive="true")(w, t),
            Request("GET", "/pfs/list", params={"path": f"{t.dir}/*"}),
            Request("GET", "/pfs/list", params={"path": t.file}),
        ]
    },
    ("GET", "/api/v1/pfs/checksum"): {"probe": pfs_get("checksum", chunk_size=MiB)},
    ("GET", "/api/v1/pfs/file"): {
        "probe": lambda w, t: pfs_get("file")(w, t) + pfs_get("file", offset=1, length=3)(w, t)
    },
    ("PUT", "/api/v1/pfs/file"): {
        "probe": lambda w, t: [
            Request(
                "PUT",
                "/pfs/file",
                params={"path": t.file, "overwrite": "true"},
                content=PAYLOAD,
                headers=small_put_headers(PAYLOAD),
            ),
            Request(
                "PUT",
                "/pfs/file",
                params={"path": f"{t.dir}/new.txt"},
                content=PAYLOAD,
                headers=small_put_headers(PAYLOAD),
            ),
        ]
    },
    ("POST", "/api/v1/pfs/mkdir"): {
        "probe": lambda w, t: [
            Request("POST", "/pfs/mkdir", json={"path": f"{t.dir}/sub", "parents": True}),
            Request("POST", "/pfs/mkdir", json={"path": t.dir, "parents": True}),
        ]
    },
    ("POST", "/api/v1/pfs/remove"): {
        "probe": lambda w, t: [
            Request("POST", "/pfs/remove", json={"path": t.file}),
            Request("POST", "/pfs/remove", json={"path": t.dir, "recursive": True}),
        ]
    },
    ("POST", "/api/v1/pfs/move"): {
        "probe": lambda w, t: [
            Request("POST", "/pfs/move", json={"src": t.file, "dst": f"{BOB}/loot.txt"}),
            Request("POST", "/pfs/move", json={"src": f"{BOB}/mine.txt", "dst": f"{t.dir}/gift.txt"}),
            Request("POST", "/pfs/move", json={"src": t.file, "dst": f"{t.dir}/renamed.txt"}),
        ]
    },
    ("POST", "/api/v1/pfs/uploads"): {
        "probe": lambda w, t: [
            Request(
                "POST",
                "/pfs/uploads",
                json={"path": t.file, "size": 2 * MiB, "chunk_size": MiB, "overwrite": True},
            ),
            Request(
                "POST", "/pfs/uploads", json={"path": f"{t.dir}/big.bin", "size": 2 * MiB, "chunk_size": MiB}
            ),
        ]
    },
    ("PUT", "/api/v1/pfs/uploads/{upload_id}/{index}"): {
        "probe": lambda w, t: [
            Request(
                "PUT",
                f"/pfs/uploads/{t.upload}/1",
                content=b"\0" * MiB,
                headers={"X-PaddleCloud-Digest": chunk_digest(b"\0" * MiB)},
            ),
        ]
    },
    ("POST", "/api/v1/pfs/uploads/{upload_id}/complete"): {
        "probe": lambda w, t: [
            Request("POST", f"/pfs/uploads/{t.upload}/complete", json={"checksum": "blake3c:1:" + "0" * 64}),
            Request(
                "POST",
                f"/pfs/uploads/{t.upload}/complete",
                params={"overwrite": "true"},
                json={"checksum": "blake3c:1:" + "0" * 64},
            ),
        ]
    },
    ("POST", "/api/v1/pfs/local"): {
        "probe": lambda w, t: [
            Request("POST", "/pfs/local", json={"path": t.file}),
            Request("POST", "/pfs/local", json={"upload_id": t.upload}),
        ]
    },
    ("DELETE", "/api/v1/pfs/uploads/{upload_id}"): {
        "probe": lambda w, t: [Request("DELETE", f"/pfs/uploads/{t.upload}")]
    },
    # users (admins only)
    ("GET", "/api/v1/users"): {"admin": True, "probe": lambda w, t: [Request("GET", "/users")]},
    ("POST", "/api/v1/users"): {
        "admin": True,
        "probe": lambda w, t: [Request("POST", "/users", json={"name": t.user, "admin": True})],
    },
    ("POST", "/api/v1/users/{name}/token"): {
        "admin": True,
        "probe": lambda w, t: [Request("POST", f"/users/{t.user}/token")],
    },
    ("PUT", "/api/v1/users/{name}/admin"): {
        "admin": True,
        "probe": lambda w, t: [Request("PUT", f"/users/{t.user}/admin", json={"admin": True})],
    },
    ("DELETE", "/api/v1/users/{name}"): {
        "admin": True,
        "probe": lambda w, t: [Request("DELETE", f"/users/{t.user}", params={"force": "true"})],
    },
    ("PUT", "/api/v1/users/{name}/quota"): {
        "admin": True,
        "probe": lambda w, t: [
            Request("PUT", f"/users/{t.user}/quota", json={"storage": "1Ti"}),
            Request("PUT", f"/users/{t.user}/quota", json={"storage": None}),
        ],
    },
}


def test_every_route_has_a_case(platform: Platform) -> None:
    routes = api_routes(create_app(platform, run_loop=False))
    assert len(routes) >= 20  # the walk found the routers' routes
    uncovered = sorted(routes - set(CASES))
    assert not uncovered, f"routes without a tenancy case in {__name__}: {uncovered}"
    stale = sorted(set(CASES) - routes)
    assert not stale, f"tenancy cases for routes the app no longer has: {stale}"


def test_route_walk_agrees_with_openapi(platform: Platform) -> None:
    app = create_app(platform, run_loop=False)
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert api_routes(app) == documented


# -- the world: alice's job, files and upload; bob's own package; an admin ----------------------


def build_world(platform: Platform, new_http: Callable[[], httpx.Client], tmp: Path) -> World:
    tokens = {
        "alice": platform.ensure_user("alice"),
        "bob": platform.ensure_user("bob"),
        "root": platform.ensure_user("root", admin=True),
    }

    def sdk(user: str) -> Client:
        return Client(endpoint="http://testserver", token=tokens[user], http=new_http())

    alice, bob = sdk("alice"), sdk("bob")
    pkg = tmp / "pkg"
    pkg.mkdir()
    (pkg / "main.py").write_text("print('hi')\n")
    alice.submit(
        {"name": "secret-job", "entry": "python main.py", "trainers": {"cpu": "100m"},
         "tasks": {"items": ["a", "b"]}, "batch": {"size": 8, "adaptive": {"min": 1, "max": 64}}},
        package_dir=pkg,
    )  # fmt: skip
    fs = alice.pfs
    fs.mkdir("pfs:private/inner", parents=True)
    (tmp / "data.txt").write_bytes(b"alice's secret data")
    fs.upload_file(tmp / "data.txt", "pfs:private/data.txt")
    alice.create_sampleset("secret-set", "pfs:private")  # no loop runs here: it stays Pending
    up = UploadView.from_json(
        alice.request(
            "POST",
            "/pfs/uploads",
            json={"path": f"{ALICE}/private/big.bin", "size": 2 * MiB, "chunk_size": MiB},
        ).content
    )
    alice.request(
        "PUT",
        f"/pfs/uploads/{up.id}/0",
        content=b"a" * MiB,
        headers={"X-PaddleCloud-Digest": chunk_digest(b"a" * MiB)},
    )
    # bob's own things, so that his requests fail only on alice's part
    bfs = bob.pfs
    (tmp / "mine.txt").write_bytes(b"bob's")
    bfs.upload_file(tmp / "mine.txt", "pfs:mine.txt")
    (tmp / "pkg.tar.gz").write_bytes(tar_gz({"main.py": "print(1)\n"}))
    bfs.upload_file(tmp / "pkg.tar.gz", "pfs:pkg.tar.gz")
    world = World(
        platform=platform,
        http=new_http(),
        tokens=tokens,
        exists=Target(
            job="secret-job",
            user="alice",
            file=f"{ALICE}/private/data.txt",
            dir=f"{ALICE}/private",
            upload=up.id,
            sampleset="secret-set",
        ),
        missing=Target(
            job="no-such-job",
            user="nobody",
            file=f"{ALICE}/private/nope.txt",
            dir=f"{ALICE}/nodir",
            upload="0" * 32,
            sampleset="no-such-set",
        ),
        bob_package=f"{BOB}/pkg.tar.gz",
        alice_upload=up,
    )
    world.pristine = alice_state(world)
    assert ("secret-job", "Queued") in world.pristine["jobs"] and world.pristine["upload"] == {
        "0": chunk_digest(b"a" * MiB)
    }
    return world


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world for the tests whose requests are all refused (each checks alice's state is intact)."""
    base = tmp_path_factory.mktemp("tenancy")
    platform = Platform.open(
        PlatformConfig(data_dir=base / "data", backend_settings=LocalSettings(nodes=NODE))
    )
    try:
        with contextlib.ExitStack() as stack:

            def new_http() -> httpx.Client:
                return stack.enter_context(TestClient(create_app(platform, run_loop=False)))

            yield build_world(platform, new_http, base)
    finally:
        platform.close()


@pytest.fixture
def world(platform: Platform, asgi: Callable[[Platform], httpx.Client], tmp_path: Path) -> World:
    """A world of its own (for tests whose requests change it)."""
    return build_world(platform, lambda: asgi(platform), tmp_path)


def alice_state(w: World) -> dict[str, Any]:
    """Everything of alice's that bob must not be able to change."""
    root = w.platform.ctx.config.pfs_dir / "files" / "home" / "alice"
    files = {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }
    r = w.call("alice", Request("GET", "/jobs", params={"all": "true"}))
    jobs = [(j["name"], j["phase"]) for j in r.json()["items"]]
    up = w.call(
        "alice",
        Request(
            "POST",
            "/pfs/uploads",
            json={"path": f"{ALICE}/private/big.bin", "size": 2 * MiB, "chunk_size": MiB},
        ),
    )
    return {
        "files": files,
        "jobs": jobs,
        "upload": up.json()["received"],
        "users": sorted(u["name"] for u in w.call("root", Request("GET", "/users")).json()["items"]),
        "tasks": w.call("alice", Request("GET", "/jobs/secret-job/tasks")).json(),
        "adaptive": w.call("alice", Request("GET", "/jobs/secret-job/adaptive")).json(),
        "samplesets": [
            (v["name"], v["phase"], v["deleting"], [j["kind"] for j in v["jobs"]])
            for v in w.call("alice", Request("GET", "/samplesets")).json()["items"]
        ],
    }


def normalise(body: str, w: World) -> str:
    """The body with every name bob aimed at (alice's or the look-alike) replaced by one placeholder."""
    for name in sorted({*w.exists.names(), *w.missing.names()}, key=len, reverse=True):
        body = body.replace(name, "<NAME>")
    return body


PROBED = sorted(k for k, v in CASES.items() if "probe" in v and not v.get("self"))


@pytest.mark.parametrize("route", sorted(CASES), ids=lambda r: f"{r[0]} {r[1]}")
@pytest.mark.parametrize("token", [None, "pc_not-a-real-token", ""], ids=["none", "bogus", "empty"])
def test_a_unauthenticated(shared: World, route: tuple[str, str], token: str | None) -> None:
    case = CASES[route]
    requests = case["probe"](shared, shared.exists) if "probe" in case else [Request(*route_request(route))]
    for req in requests:
        r = shared.call(token, req)
        if case.get("public"):
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 401, (req, r.status_code, r.text)
            assert r.json()["error"]["code"] == "unauthorized"


def route_request(route: tuple[str, str]) -> tuple[str, str]:
    method, path = route
    return method, path.removeprefix(API)


@pytest.mark.parametrize("route", PROBED, ids=lambda r: f"{r[0]} {r[1]}")
def test_b_bob_gets_nothing_of_alices_and_learns_nothing(shared: World, route: tuple[str, str]) -> None:
    world = shared
    # the shared world must be intact: a leak in an earlier test must not hide one here
    assert alice_state(world) == world.pristine, "alice's state was changed by an earlier test"
    probe = CASES[route]["probe"]
    expected = {403} if CASES[route].get("admin") else {403, 404}
    for hit, miss in zip(probe(world, world.exists), probe(world, world.missing), strict=True):
        r_hit, r_miss = world.call("bob", hit), world.call("bob", miss)
        assert r_hit.status_code in expected, (hit, r_hit.status_code, r_hit.text)
        assert r_hit.status_code == r_miss.status_code, (hit, r_hit.text, r_miss.text)
        assert normalise(r_hit.text, world) == normalise(r_miss.text, world), (hit, miss)
        err = r_hit.json()["error"]
        assert err["code"] in ("forbidden", "job_not_found", "upload_not_found", "sampleset_not_found"), err
        # nothing of alice's leaks in the answer
        assert "secret data" not in r_hit.text and "private/data.txt" not in r_hit.text
    assert alice_state(world) == world.pristine


@pytest.mark.parametrize("route", PROBED, ids=lambda r: f"{r[0]} {r[1]}")
def test_b_admin_may_act_for_alice(world: World, route: tuple[str, str]) -> None:
    """The same requests from an admin are not refused for tenancy (so the refusals above are about
    who asks, not about a broken request). Destructive ones are checked on their status only."""
    for req in CASES[route]["probe"](world, world.exists):
        r = world.call("root", req)
        assert r.status_code not in (401, 403), (req, r.status_code, r.text)
        if r.status_code == 404:  # job routes without ?user= look in the admin's own jobs
            assert r.json()["error"]["code"] in (
                "job_not_found", "upload_not_found", "path_not_found", "sampleset_not_found"
            )  # fmt: skip


def test_c_job_listing_is_scoped(shared: World) -> None:
    world = shared
    bob_jobs = world.call("bob", Request("GET", "/jobs", params={"all": "true"}))
    assert bob_jobs.status_code == 200
    assert [j["name"] for j in bob_jobs.json()["items"]] == []
    for params in (
        {"all_users": "true"},
        {"all_users": "true", "all": "true"},
        {"user": "alice"},
        {"user": "nobody"},
    ):
        r = world.call("bob", Request("GET", "/jobs", params=params))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", params
    # bob naming himself is fine
    assert world.call("bob", Request("GET", "/jobs", params={"user": "bob"})).status_code == 200
    # admins see alice's job
    every = world.call("root", Request("GET", "/jobs", params={"all_users": "true"})).json()["items"]
    assert [(j["user"], j["name"]) for j in every] == [("alice", "secret-job")]
    hers = world.call("root", Request("GET", "/jobs", params={"user": "alice"})).json()["items"]
    assert [j["name"] for j in hers] == ["secret-job"]
    one = world.call("root", Request("GET", "/jobs/secret-job", params={"user": "alice"}))
    assert one.status_code == 200 and one.json()["user"] == "alice"
    assert world.call("alice", Request("GET", "/jobs")).json()["items"][0]["name"] == "secret-job"


def test_c_self_scoped_routes_show_only_the_caller(shared: World) -> None:
    world = shared
    assert world.call("bob", Request("GET", "/whoami")).json() == {"name": "bob", "is_admin": False}
    usage = world.call("bob", Request("GET", "/pfs/usage")).json()
    assert usage["user"] == "bob" and usage["used"] == 5 + len(tar_gz({"main.py": "print(1)\n"}))
    assert usage["reserved"] == 0  # alice's upload in progress is hers
    alice_usage = world.call("alice", Request("GET", "/pfs/usage")).json()
    assert alice_usage["user"] == "alice" and alice_usage["reserved"] == 2 * MiB
    quota = world.call("bob", Request("GET", "/quota")).json()
    assert quota["user"] == "bob"
    assert "alice" not in str(quota) and "secret-job" not in str(quota)
    # usage takes no user parameter: asking for alice's is ignored, not honoured
    r = world.call("bob", Request("GET", "/pfs/usage", params={"user": "alice"}))
    assert r.status_code == 200 and r.json()["user"] == "bob"
    home = world.call("bob", Request("GET", "/pfs/home", params={"user": "alice"})).json()
    assert home == {
        "user": "bob",
        "datacenter": "local",
        "path": "/pfs/local/home/bob",
    }  # always the caller's


def test_c_queue_and_cluster_name_no_other_users_job(shared: World) -> None:
    """Bob sees alice's waiting job's place and size in the queue, never its name, owner or message;
    only admins may filter the queue by another user."""
    world = shared
    queue = world.call("bob", Request("GET", "/queue"))
    assert queue.status_code == 200
    (entry,) = queue.json()["items"]
    assert entry["position"] == 1 and not entry["mine"]
    assert (entry["name"], entry["user"], entry["message"]) == ("", "", "")
    assert "secret-job" not in queue.text and "alice" not in queue.text
    cluster = world.call("bob", Request("GET", "/cluster"))
    assert cluster.status_code == 200 and cluster.json()["jobs_queued"] == 1
    assert "secret-job" not in cluster.text and "alice" not in cluster.text
    r = world.call("bob", Request("GET", "/queue", params={"user": "alice"}))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    for who, params in (("alice", {}), ("root", {}), ("root", {"user": "alice"})):
        (mine,) = world.call(who, Request("GET", "/queue", params=params)).json()["items"]
        assert (mine["name"], mine["user"], mine["mine"]) == ("secret-job", "alice", who == "alice")


def test_upload_ids_are_per_user(world: World) -> None:
    """Bob beginning an upload of the same size and name in his own home gets his own, empty upload,
    never alice's staging area (the id is derived from the user as well as the path)."""
    world.call("bob", Request("POST", "/pfs/mkdir", json={"path": f"{BOB}/private"}))
    r = world.call(
        "bob",
        Request(
            "POST",
            "/pfs/uploads",
            json={"path": f"{BOB}/private/big.bin", "size": 2 * MiB, "chunk_size": MiB},
        ),
    )
    assert r.status_code == 201, r.text
    assert r.json()["id"] != world.alice_upload.id
    assert r.json()["received"] == {}


def test_c_sampleset_listing_is_scoped(shared: World) -> None:
    world = shared
    mine = world.call("alice", Request("GET", "/samplesets")).json()["items"]
    assert [v["name"] for v in mine] == ["secret-set"]
    assert world.call("bob", Request("GET", "/samplesets")).json()["items"] == []
    r = world.call("bob", Request("GET", "/samplesets", params={"all": "true"}))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
    every = world.call("root", Request("GET", "/samplesets", params={"all": "true"})).json()["items"]
    assert [(v["owner"], v["name"]) for v in every] == [("alice", "secret-set")]
