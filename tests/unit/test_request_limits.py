"""Request bodies are bounded (issue 11): refused with 413 ``request_too_large`` before they are read.

Found on 005407f: a 410 MB job spec (100,000 task items) was stored (201) and the database grew to
2.1 GB; a 50 MB body was read whole before it was refused. The app is driven here as an ASGI server
drives it, one ``http.request`` message at a time, counting what it pulls; PFS uploads keep their own
limit (a chunk, 64 MiB) and pass through untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddlecloud._version import API_VERSION
from paddlecloud.api import HEADER_API_VERSION
from paddlecloud.api.errors import InvalidInput, PaddleCloudError
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.server import create_app

MakePackage = Callable[[dict[str, str]], Path]
MIB = 1 << 20
#: what the ASGI server passes on for a body without a length
CHUNKED = {"Transfer-Encoding": "chunked"}


def call(
    platform: Platform, method: str, path: str, headers: dict[str, str], messages: int, size: int = MIB
) -> tuple[int, dict[str, Any], int]:
    """One request to a fresh app whose body is ``messages`` messages of ``size`` bytes: the status,
    the JSON answer and how many messages the app pulled."""
    app = create_app(platform, run_loop=False)
    pulled = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        if pulled > messages:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": b" " * size, "more_body": pulled < messages}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
        "method": method, "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("testserver", 80), "client": ("127.0.0.1", 1),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body or b"{}"), pulled


@pytest.fixture
def auth(platform: Platform) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.ensure_user('mallory')}", "Content-Type": "application/json"}


def test_a_50_mb_body_with_its_length_is_refused_before_any_of_it_is_read(
    platform: Platform, auth: dict[str, str]
) -> None:
    status, answer, pulled = call(
        platform, "POST", "/api/v1/jobs", {**auth, "Content-Length": str(50 * MIB)}, 50
    )
    assert status == 413
    assert answer["error"]["code"] == "request_too_large"
    assert "50.0 MiB" in answer["error"]["message"] and "--max-request-size" in answer["error"]["message"]
    assert pulled == 0


def test_a_chunked_50_mb_body_is_refused_once_past_the_limit(
    platform: Platform, auth: dict[str, str]
) -> None:
    status, answer, pulled = call(platform, "POST", "/api/v1/jobs", {**auth, **CHUNKED}, 50)
    assert status == 413
    assert answer["error"]["code"] == "request_too_large"
    assert pulled <= 2  # 1 MiB messages: the second one is past the 1 MiB limit, the rest never read


def test_every_route_is_bounded_not_only_submit(platform: Platform, auth: dict[str, str]) -> None:
    for path in ("/api/v1/pfs/mkdir", "/api/v1/users", "/api/v1/jobs/j/tasks/lease"):
        status, answer, pulled = call(platform, "POST", path, {**auth, **CHUNKED}, 8)
        assert (status, answer["error"]["code"]) == (413, "request_too_large"), path
        assert pulled <= 2


def test_a_pfs_chunk_keeps_its_own_limit(platform: Platform, auth: dict[str, str]) -> None:
    path = "/api/v1/pfs/uploads/0123456789abcdef/0"
    status, answer, pulled = call(platform, "PUT", path, {**auth, "Content-Length": str(65 * MIB)}, 65)
    assert (status, answer["error"]["code"], pulled) == (413, "request_too_large", 0)
    assert "64.0 MiB" in answer["error"]["message"]


def test_pfs_uploads_larger_than_the_json_limit_still_work(alice: Client, tmp_path: Path) -> None:
    data = bytes(range(256)) * (12 * MIB // 256)  # a 12 MiB file: 8 MiB chunks, then a small PUT
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    alice.pfs.cp([str(src)], "pfs:big.bin")
    small = tmp_path / "small.bin"
    small.write_bytes(data[: 3 * MIB])
    alice.pfs.cp([str(small)], "pfs:small.bin")
    assert alice.pfs.stat("pfs:big.bin").size == len(data)
    assert alice.pfs.stat("pfs:small.bin").size == 3 * MIB


def _tasks_spec(alice: Client, make_package: MakePackage, items: int) -> dict[str, Any]:
    package = alice.upload_package(make_package({"main.py": "print(1)\n"}), "many").path
    return {
        "name": "many",
        "package": package,
        "entry": "python main.py",
        "trainers": {"cpu": "100m"},
        "tasks": {"items": [f"s3://bucket/shard-{i:08d}.tar" for i in range(items)]},
    }


def test_a_spec_of_100000_tasks_is_refused(alice: Client, make_package: MakePackage) -> None:
    spec = _tasks_spec(alice, make_package, 100_000)  # 3.6 MB of JSON (410 MB in the finding)
    with pytest.raises(PaddleCloudError) as err:
        alice.request("POST", "/jobs", json=spec)
    assert (err.value.http_status, str(err.value.code)) == (413, "request_too_large")
    assert alice.jobs(all=True) == []


def test_with_a_larger_body_limit_the_spec_limits_still_hold(
    platform_factory: Callable[..., Platform],
    asgi: Callable[[Platform], httpx.Client],
    make_package: MakePackage,
) -> None:
    big = platform_factory(max_request_bytes=16 * MIB)
    alice = Client(endpoint="http://testserver", token=big.ensure_user("alice"), http=asgi(big))
    with pytest.raises(InvalidInput) as err:
        alice.request("POST", "/jobs", json=_tasks_spec(alice, make_package, 100_000))
    assert (str(err.value.code), err.value.field) == ("invalid_spec", "tasks.items")
    assert "100,000 tasks, at most 10,000" in err.value.message
    spec = _tasks_spec(alice, make_package, 10_000)
    spec["tasks"]["items"] = [f"{i:07d}" + "x" * 60 for i in range(10_000)]  # 670 KB in all
    with pytest.raises(InvalidInput) as err:
        alice.request("POST", "/jobs", json=spec)
    assert "at most 524,288 are allowed" in err.value.message


def test_the_refusal_is_an_api_answer_like_any_other(raw_http: httpx.Client) -> None:
    r = raw_http.post("/api/v1/jobs", content=b" " * (2 * MIB), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert r.headers[HEADER_API_VERSION] == str(API_VERSION)  # stamped by the version middleware
