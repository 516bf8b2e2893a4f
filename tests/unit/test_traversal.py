"""Hostile paths against every path-taking endpoint of the file service.

A corpus of traversal attempts (``..``, percent-encoded and double-encoded dots, absolute and
relative local paths, short forms, control characters, over-long names, empty components) is sent by
alice to stat, list, checksum, file GET/PUT, mkdir, remove, move (as source and as destination) and
upload begin. Every one must be refused with a stable 4xx code, or (for names that only look
hostile: ``%2e%2e`` as a literal, backslashes, look-alike dots) act on exactly that literal name
inside alice's own home. Sentinels outside her home (other homes, public, the data dir, a directory
outside the platform) must stay untouched, and no byte from outside may ever come back.
Symbolic links planted in the store directory must be refused wherever a path goes through them.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.core.checksum import ChunkedHasher
from paddlecloud.server import create_app

with warnings.catch_warnings():  # Starlette's TestClient warns at import time (see conftest.py)
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.timeout(60)

API = "/api/v1"
A = "/pfs/local/home/alice"
MiB = 1 << 20
NODE = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)

#: contents that must never appear in an answer
SECRETS = [b"SENTINEL-OUTSIDE", b"SENTINEL-DATA", b"SENTINEL-PFS", b"BOB-SECRET", b"root:x:0:0"]


def checksum_of(data: bytes) -> str:
    h = ChunkedHasher(max(len(data), 1))
    h.update(data)
    return h.checksum()


@dataclass
class Env:
    base: Path
    data: Path
    store: Path  # <data>/pfs/files
    outside: Path
    http: httpx.Client
    tokens: dict[str, str]

    def call(self, method: str, url: str, who: str = "alice", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **kw.pop("headers", {})}
        r = self.http.request(method, API + url, headers=headers, **kw)
        for secret in SECRETS:
            assert secret not in r.content, f"{method} {url} returned {secret!r}"
        return r

    @property
    def alice_home(self) -> Path:
        return self.store / "home" / "alice"


def snapshot(env: Env) -> dict[str, Any]:
    """Everything under the test's base dir except what alice may change (her home, staged uploads,
    the database), plus the names in /etc and /tmp."""
    skip = (env.alice_home, env.data / "pfs" / "uploads")
    out: dict[str, Any] = {}
    for p in sorted(env.base.rglob("*")):
        if any(p == s or s in p.parents for s in skip) or p.name.startswith("paddlecloud.db"):
            continue
        if p.is_symlink():
            out[str(p)] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p)] = p.read_bytes()
        else:
            out[str(p)] = None
    out["/etc"] = sorted(os.listdir("/etc"))
    out["/tmp"] = sorted(n for n in os.listdir("/tmp") if "pwn" in n.lower())
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("traversal")
    data = base / "data"
    platform = Platform.open(PlatformConfig(data_dir=data, backend_settings=LocalSettings(nodes=NODE)))
    tokens = {u: platform.ensure_user(u) for u in ("alice", "bob")}
    tokens["root"] = platform.ensure_user("root", admin=True)
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"SENTINEL-OUTSIDE")
    (data / "sentinel").mkdir()
    (data / "sentinel" / "secret").write_bytes(b"SENTINEL-DATA")
    (data / "pfs" / "sentinel").mkdir()
    (data / "pfs" / "sentinel" / "secret").write_bytes(b"SENTINEL-PFS")
    try:
        with TestClient(create_app(platform, run_loop=False), raise_server_exceptions=False) as http:
            e = Env(
                base=base, data=data, store=data / "pfs" / "files", outside=outside, http=http, tokens=tokens
            )
            # bob's and the public area's files, through the API
            for who, path, body in [
                ("bob", "/pfs/local/home/bob/secret", b"BOB-SECRET"),
                ("root", "/pfs/local/public/secret", b"BOB-SECRET public copy"),
            ]:
                r = e.call(
                    "PUT",
                    "/pfs/file",
                    who=who,
                    params={"path": path},
                    content=body,
                    headers={"X-PaddleCloud-Checksum": checksum_of(body)},
                )
                assert r.status_code == 201, r.text
            # alice's own files the move attempts use
            r = e.call(
                "PUT",
                "/pfs/file",
                params={"path": f"{A}/victim.txt"},
                content=b"victim",
                headers={"X-PaddleCloud-Checksum": checksum_of(b"victim")},
            )
            assert r.status_code == 201, r.text
            assert e.alice_home.is_dir()
            yield e
    finally:
        platform.close()


# -- the corpus ----------------------------------------------------------------------------------

#: label -> (path, expected error code); sent as JSON strings or properly encoded query values
REFUSED: dict[str, tuple[str, str]] = {
    "dotdot-leaf": (f"{A}/..", "invalid_path"),
    "dotdot-trailing-slash": (f"{A}/../", "invalid_path"),
    "dotdot-to-bob": (f"{A}/../bob/secret", "invalid_path"),
    "dotdot-to-bob-new": (f"{A}/../bob/pwned", "invalid_path"),
    "dotdot-deep": (f"{A}/x/../../bob/pwned", "invalid_path"),
    "dotdot-etc": (f"{A}/../../../../../../../../etc/passwd", "invalid_path"),
    "dotdot-tmp": (f"{A}/../../../../../../../../tmp/pwned", "invalid_path"),
    "dotdot-public": (f"{A}/../../public/secret", "invalid_path"),
    "dotdot-data-sentinel": (f"{A}/../../../../sentinel/secret", "invalid_path"),
    "dotdot-pfs-sentinel": (f"{A}/../../../sentinel/secret", "invalid_path"),
    "dotdot-in-user": ("/pfs/local/home/../home/bob/secret", "invalid_path"),
    "dotdot-in-dc": ("/pfs/local/../local/home/bob/secret", "invalid_path"),
    "dotdot-at-top": ("/pfs/../etc/passwd", "invalid_path"),
    "dot": (f"{A}/./pwned", "invalid_path"),
    "dot-leaf": (f"{A}/.", "invalid_path"),
    "glob-after-dotdot": (f"{A}/../bob/*", "invalid_path"),
    "absolute-etc": ("/etc/passwd", "invalid_path"),
    "absolute-tmp": ("/tmp/pwned", "invalid_path"),
    "relative": ("../../etc/passwd", "invalid_path"),
    "bare-name": ("pwned", "invalid_path"),
    "short-form": ("pfs:pwned", "invalid_path"),  # the server takes full paths only
    "short-dotdot": ("pfs:../bob/secret", "invalid_path"),
    "file-url": ("file:///etc/passwd", "invalid_path"),
    "empty": ("", "invalid_path"),
    "nul": (f"{A}/pw\x00ned", "invalid_path"),
    "nul-then-dotdot": (f"{A}/x\x00/../../bob/secret", "invalid_path"),
    "newline": (f"{A}/pw\nned", "invalid_path"),
    "newline-dotdot": (f"{A}/..\n/bob/secret", "invalid_path"),
    "carriage-return": (f"{A}/pw\rned", "invalid_path"),
    "tab": (f"{A}/pw\tned", "invalid_path"),
    "escape": (f"{A}/pw\x1bned", "invalid_path"),
    "delete": (f"{A}/pw\x7fned", "invalid_path"),
    "component-300-bytes": (f"{A}/" + "a" * 300, "invalid_path"),
    "component-256-bytes-utf8": (f"{A}/" + "\u00e9" * 128, "invalid_path"),
    "path-5000-bytes": (f"{A}/" + "/".join(["d" * 100] * 49), "invalid_path"),
    "empty-component": (f"{A}//pwned", "invalid_path"),
    "empty-dc": ("/pfs//home/alice/pwned", "invalid_path"),
    "other-datacenter": ("/pfs/elsewhere/home/alice/pwned", "invalid_path"),
    "home-without-user": ("/pfs/local/home", "invalid_path"),
    "user-not-a-name": ("/pfs/local/home/ALICE/pwned", "invalid_path"),
    "user-with-dot": ("/pfs/local/home/alice.bob/pwned", "invalid_path"),
    "unknown-area": ("/pfs/local/private/pwned", "invalid_path"),
    "double-slash-prefix": ("//pfs/local/home/alice/pwned", "invalid_path"),
    "bobs-home": ("/pfs/local/home/bob/secret", "forbidden"),
    "bobs-home-new": ("/pfs/local/home/bob/pwned", "forbidden"),
    "nobodys-home": ("/pfs/local/home/nobody/pwned", "forbidden"),
}

#: raw query strings (percent-encoding as the attacker writes it; the server decodes once)
REFUSED_RAW_QUERY: dict[str, tuple[str, str]] = {
    "pct-dotdot": (f"path={A}/%2e%2e/bob/secret", "invalid_path"),
    "pct-DOTDOT": (f"path={A}/%2E%2E/bob/secret", "invalid_path"),
    "pct-mixed": (f"path={A}/.%2e/bob/secret", "invalid_path"),
    "pct-slash": (f"path={A}/..%2fbob%2fsecret", "invalid_path"),
    "pct-all": ("path=%2fpfs%2flocal%2fhome%2falice%2f%2e%2e%2fbob%2fsecret", "invalid_path"),
    "pct-nul": (f"path={A}/pw%00ned", "invalid_path"),
    "pct-newline": (f"path={A}/pw%0aned", "invalid_path"),
    "pct-etc": ("path=%2fetc%2fpasswd", "invalid_path"),
    "duplicate-param": (f"path={A}/victim.txt&path={A}/../bob/secret", "invalid_path"),
}

#: names that only look hostile: they are literal names, and stay inside alice's home
LITERAL_NAMES = {
    "pct-dotdot-literal": "%2e%2e",
    "pct-dotdot-upper": "%2E%2E",
    "double-pct": "%252e%252e",
    "backslashes": "..\\..\\bob",
    "backslash-etc": "..\\..\\..\\etc\\passwd",
    "fullwidth-dots": "\uff0e\uff0e",
    "one-dot-leaders": "\u2024\u2024",
    "two-dot-leader": "\u2025",
    "three-dots": "...",
    "dots-x": "..x",
    "hidden": ".hidden",
    "tilde": "~",
    "dollar-home": "$HOME",
    "colon": "pfs:x",
    "space-dots": ". .",
    "rtl-override": "\u202eevil",
    "named-bob": "bob",
    "component-255-bytes": "b" * 255,
    "nbsp-dots": "\u00a0..",
}


#: paths that would reach real system files if a check regressed: only ever read, never written
#: (the suite may run as root)
READ_ONLY = ("etc",)
READS = ("stat", "list", "list -r", "checksum", "file GET")


def requests_for(path: str) -> dict[str, dict[str, Any]]:
    """Every path-taking request, aimed at ``path`` (the other side of a move is a fine path).
    Only the reads when the path names something under /etc."""
    body = b"PWNED"
    reqs = {
        "stat": {"method": "GET", "url": "/pfs/stat", "params": {"path": path}},
        "list": {"method": "GET", "url": "/pfs/list", "params": {"path": path}},
        "list -r": {"method": "GET", "url": "/pfs/list", "params": {"path": path, "recursive": "true"}},
        "checksum": {"method": "GET", "url": "/pfs/checksum", "params": {"path": path, "chunk_size": MiB}},
        "file GET": {"method": "GET", "url": "/pfs/file", "params": {"path": path}},
        "file PUT": {
            "method": "PUT",
            "url": "/pfs/file",
            "params": {"path": path, "overwrite": "true"},
            "content": body,
            "headers": {"X-PaddleCloud-Checksum": checksum_of(body)},
        },
        "mkdir": {"method": "POST", "url": "/pfs/mkdir", "json": {"path": path, "parents": True}},
        "remove": {"method": "POST", "url": "/pfs/remove", "json": {"path": path, "recursive": True}},
        "move src": {"method": "POST", "url": "/pfs/move", "json": {"src": path, "dst": f"{A}/moved"}},
        "move dst": {"method": "POST", "url": "/pfs/move", "json": {"src": f"{A}/victim.txt", "dst": path}},
        "upload begin": {
            "method": "POST",
            "url": "/pfs/uploads",
            "json": {"path": path, "size": 2 * MiB, "chunk_size": MiB, "overwrite": True},
        },
    }
    if any(word in path for word in READ_ONLY):
        return {k: v for k, v in reqs.items() if k in READS}
    return reqs


def assert_refused(env: Env, r: httpx.Response, code: str, what: str) -> None:
    assert 400 <= r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
    assert r.json()["error"]["code"] == code, f"{what}: {r.text[:300]}"


def alice_names(env: Env) -> list[str]:
    return sorted(p.relative_to(env.alice_home).as_posix() for p in env.alice_home.rglob("*"))


@pytest.mark.parametrize(("label", "case"), list(REFUSED.items()), ids=list(REFUSED))
def test_hostile_path_is_refused_everywhere(env: Env, label: str, case: tuple[str, str]) -> None:
    path, code = case
    before, names = snapshot(env), alice_names(env)
    for what, req in requests_for(path).items():
        r = env.call(**req)
        assert_refused(env, r, code, what)
    assert snapshot(env) == before
    assert alice_names(env) == names  # nothing created in her home either
    assert (env.alice_home / "victim.txt").read_bytes() == b"victim"


@pytest.mark.parametrize(("label", "case"), list(REFUSED_RAW_QUERY.items()), ids=list(REFUSED_RAW_QUERY))
def test_percent_encoded_traversal_is_decoded_then_refused(
    env: Env, label: str, case: tuple[str, str]
) -> None:
    query, code = case
    before, names = snapshot(env), alice_names(env)
    body = b"PWNED"
    for method, endpoint, extra in [
        ("GET", "stat", {}),
        ("GET", "list", {}),
        ("GET", "file", {}),
        ("GET", "checksum", {}),
        ("PUT", "file", {"content": body, "headers": {"X-PaddleCloud-Checksum": checksum_of(body)}}),
    ]:
        r = env.call(method, f"/pfs/{endpoint}?{query}", **extra)
        assert_refused(env, r, code, f"{method} {endpoint}")
    assert snapshot(env) == before
    assert alice_names(env) == names


@pytest.mark.parametrize(("label", "name"), list(LITERAL_NAMES.items()), ids=list(LITERAL_NAMES))
def test_lookalike_names_are_literal_names_in_the_callers_home(env: Env, label: str, name: str) -> None:
    before = snapshot(env)
    path = f"{A}/{name}"
    on_disk = env.alice_home / name
    assert not os.path.lexists(on_disk)

    r = env.call("POST", "/pfs/mkdir", json={"path": path})
    assert r.status_code == 201, r.text
    assert r.json()["path"] == path
    assert on_disk.is_dir() and not on_disk.is_symlink()
    assert on_disk.parent == env.alice_home  # exactly one level below her home

    data = f"content of {label}".encode()
    r = env.call(
        "PUT",
        "/pfs/file",
        params={"path": f"{path}/f"},
        content=data,
        headers={"X-PaddleCloud-Checksum": checksum_of(data)},
    )
    assert r.status_code == 201, r.text
    assert (on_disk / "f").read_bytes() == data
    assert env.call("GET", "/pfs/stat", params={"path": f"{path}/f"}).json()["size"] == len(data)
    assert [i["path"] for i in env.call("GET", "/pfs/list", params={"path": path}).json()["items"]] == [
        f"{path}/f"
    ]
    assert env.call("GET", "/pfs/file", params={"path": f"{path}/f"}).content == data
    assert env.call("GET", "/pfs/checksum", params={"path": f"{path}/f"}).status_code == 200
    r = env.call("POST", "/pfs/uploads", json={"path": f"{path}/big", "size": 2 * MiB, "chunk_size": MiB})
    assert r.status_code == 201, r.text
    assert r.json()["path"] == f"{path}/big"
    assert env.call("DELETE", f"/pfs/uploads/{r.json()['id']}").status_code == 204
    r = env.call("POST", "/pfs/move", json={"src": f"{path}/f", "dst": f"{path}/g"})
    assert r.status_code == 200 and r.json()["path"] == f"{path}/g"
    assert (on_disk / "g").read_bytes() == data
    assert env.call("POST", "/pfs/remove", json={"path": path, "recursive": True}).status_code == 204
    assert not os.path.lexists(on_disk)
    assert snapshot(env) == before


@pytest.mark.parametrize(
    ("query", "literal"),
    [
        (f"path={A}/%252e%252e", "%2e%2e"),  # double-encoded: decoded once, a literal name
        (f"path={A}/%252E%252E", "%2E%2E"),
        (f"path={A}/%25252e%25252e", "%252e%252e"),
        (f"path={A}/..%5c..%5cbob", "..\\..\\bob"),  # encoded backslashes
        (f"path={A}/%ef%bc%8e%ef%bc%8e", "\uff0e\uff0e"),  # UTF-8 of the full-width dots
    ],
)
def test_encoded_lookalikes_are_decoded_once_to_literal_names(env: Env, query: str, literal: str) -> None:
    before = snapshot(env)
    body = b"literal"
    r = env.call(
        "PUT", f"/pfs/file?{query}", content=body, headers={"X-PaddleCloud-Checksum": checksum_of(body)}
    )
    assert r.status_code == 201, r.text
    assert r.json()["path"] == f"{A}/{literal}"
    assert (env.alice_home / literal).read_bytes() == body
    r = env.call("GET", f"/pfs/stat?{query}")
    assert r.status_code == 200 and r.json()["path"] == f"{A}/{literal}"
    assert env.call("GET", f"/pfs/file?{query}").content == body
    assert env.call("POST", "/pfs/remove", json={"path": f"{A}/{literal}"}).status_code == 204
    assert snapshot(env) == before


@pytest.mark.parametrize(
    "upload_id",
    [
        "%2e%2e",
        "%2e%2e%2f%2e%2e%2fpfs",
        "..%2f..%2fetc",
        "%00",
        "a%2fb",
        "..",
        "0" * 300,
        "%d9%a1%d9%a2",
        "x%20y",
        "%2e",
    ],
)
def test_hostile_upload_ids(env: Env, upload_id: str) -> None:
    before = snapshot(env)
    staged = sorted(os.listdir(env.data / "pfs" / "uploads"))
    for method, url, kw in [
        ("DELETE", f"/pfs/uploads/{upload_id}", {}),
        (
            "PUT",
            f"/pfs/uploads/{upload_id}/0",
            {"content": b"x", "headers": {"X-PaddleCloud-Digest": "0" * 64}},
        ),
        ("POST", f"/pfs/uploads/{upload_id}/complete", {"json": {"checksum": "blake3c:1:" + "0" * 64}}),
    ]:
        r = env.call(method, url, **kw)
        assert r.status_code in (404, 405, 422), (method, url, r.status_code, r.text)
        assert r.json()["error"]["code"] in ("upload_not_found", "invalid_request"), (method, url, r.text)
    assert snapshot(env) == before
    assert sorted(os.listdir(env.data / "pfs" / "uploads")) == staged


# -- symbolic links planted in the store ---------------------------------------------------------


@pytest.fixture(scope="module")
def planted(env: Env) -> Env:
    home = env.alice_home
    (home / "sub").mkdir()
    links = {
        "link-dir": env.outside,
        "link-file": env.outside / "secret",
        "link-etc": Path("/etc"),
        "link-etc-passwd": Path("/etc/passwd"),
        "link-bob": Path("../bob"),  # relative, to a sibling home
        "link-data": env.data / "sentinel",
        "dangling": env.outside / "not-yet",
        "sub/link-up": Path("../../bob/secret"),
    }
    for name, target in links.items():
        os.symlink(target, home / name)
    return env


THROUGH_LINKS = [
    "link-dir",
    "link-dir/secret",
    "link-dir/pwned",
    "link-file",
    "link-etc",
    "link-etc/passwd",
    "link-etc/pwned",
    "link-etc-passwd",
    "link-bob",
    "link-bob/secret",
    "link-bob/pwned",
    "link-data/secret",
    "dangling",
    "dangling/pwned",
    "sub/link-up",
]


@pytest.mark.parametrize("rel", THROUGH_LINKS)
def test_paths_through_planted_links_are_refused(planted: Env, rel: str) -> None:
    env = planted
    before = snapshot(env)
    for what, req in requests_for(f"{A}/{rel}").items():
        r = env.call(**req)
        assert_refused(env, r, "forbidden", what)
        assert "symbolic link" in r.json()["error"]["message"], what
    assert snapshot(env) == before
    assert not (env.outside / "not-yet").exists()  # nothing was created through the dangling link
    assert os.path.islink(env.alice_home / rel.split("/")[0]) or os.path.islink(env.alice_home / rel)


def test_listing_hides_planted_links(planted: Env) -> None:
    r = planted.call("GET", "/pfs/list", params={"path": A, "recursive": "true"})
    assert r.status_code == 200
    names = [i["path"].removeprefix(A + "/") for i in r.json()["items"]]
    assert not [n for n in names if "link" in n or "dangling" in n], names
    assert "sub" in names
    usage = planted.call("GET", "/pfs/usage").json()
    assert usage["used"] < 1000  # /etc and the outside files are not counted


def test_glob_does_not_follow_links(planted: Env) -> None:
    r = planted.call("GET", "/pfs/list", params={"path": f"{A}/link*"})
    assert r.status_code == 200 and r.json()["items"] == []
    r = planted.call("GET", "/pfs/list", params={"path": f"{A}/link-dir/*"})
    assert_refused(planted, r, "forbidden", "glob below a link")


@pytest.fixture
def fresh(platform: Platform, tmp_path: Path) -> Iterator[tuple[Platform, httpx.Client, Path]]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"SENTINEL-OUTSIDE")
    with TestClient(create_app(platform, run_loop=False), raise_server_exceptions=False) as http:
        yield platform, http, outside


def test_home_root_replaced_by_a_link_is_refused(fresh: tuple[Platform, httpx.Client, Path]) -> None:
    platform, http, outside = fresh
    token = platform.ensure_user("mallory")
    store = Path(platform.ctx.config.pfs_dir) / "files"
    os.symlink(outside, store / "home" / "mallory")
    h = {"Authorization": f"Bearer {token}"}
    for what, req in requests_for("/pfs/local/home/mallory/secret").items():
        req = dict(req)
        r = http.request(
            req.pop("method"), API + req.pop("url"), headers={**h, **req.pop("headers", {})}, **req
        )
        assert b"SENTINEL" not in r.content
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (
            what,
            r.status_code,
            r.text,
        )
    assert sorted(os.listdir(outside)) == ["secret"]


def test_public_root_replaced_by_a_link_is_refused(fresh: tuple[Platform, httpx.Client, Path]) -> None:
    platform, http, outside = fresh
    token = platform.ensure_user("root", admin=True)
    store = Path(platform.ctx.config.pfs_dir) / "files"
    (store / "public").rmdir()
    os.symlink(outside, store / "public")
    h = {"Authorization": f"Bearer {token}"}
    for what, req in requests_for("/pfs/local/public/secret").items():
        req = dict(req)
        r = http.request(
            req.pop("method"), API + req.pop("url"), headers={**h, **req.pop("headers", {})}, **req
        )
        assert b"SENTINEL" not in r.content
        # a move between public and a home is refused before storage is touched (mv stays in one space)
        allowed = {"forbidden", "invalid_path"} if what.startswith("move") else {"forbidden"}
        assert 400 <= r.status_code < 500 and r.json()["error"]["code"] in allowed, (
            what,
            r.status_code,
            r.text,
        )
    assert sorted(os.listdir(outside)) == ["secret"]
    with contextlib.suppress(FileNotFoundError):
        assert (outside / "secret").read_bytes() == b"SENTINEL-OUTSIDE"
