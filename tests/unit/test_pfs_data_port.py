"""The PFS data port (server/pfs_data.py, client/pfs_data.py): chunk uploads and range downloads on
a threaded port of their own, with the API's guarantees (verified, resumable, atomic, tenancy, the
same errors) and bounds (connections, idle time, body size), and the client's fallback to the API
when the port cannot take a request."""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pfs_helpers import CHUNK, HOME, SIZE, begin, blob, chunks_of, fs_of, whole, write

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.client import Client
from paddlecloud.client.pfs import Pfs
from paddlecloud.client.pfs_data import DataPlane, DataUnavailable
from paddlecloud.client.session import Session
from paddlecloud.controller import Platform
from paddlecloud.core.checksum import chunk_digest
from paddlecloud.server import pfs_data
from paddlecloud.server.pfs_data import DataPort

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def port(platform: Platform) -> Iterator[DataPort]:
    p = DataPort(platform, "127.0.0.1", 0)
    p.start()
    yield p
    p.stop()


def plane_of(client: Client, port: int) -> DataPlane:
    """A data plane to ``port`` on loopback that sends ``client``'s token (the client itself talks
    to the app in process)."""
    session = Session("http://127.0.0.1:9", None)
    session.headers = dict(client.pfs.session.headers)
    return DataPlane(session, port)


def with_plane(client: Client, plane: DataPlane) -> Pfs:
    fs = fs_of(client)
    fs.home()  # asked once: the plane below is the one this Pfs uses
    fs._plane = plane
    return fs


def api_calls(fs: Pfs) -> list[tuple[str, str]]:
    """Record (method, path) of every API request ``fs`` makes from now on (downloads included)."""
    seen: list[tuple[str, str]] = []
    request, stream = fs.session.request, fs.session.stream_bytes

    def spy(method: str, path: str, **kw: Any) -> Any:
        seen.append((method, path.split("?")[0]))
        return request(method, path, **kw)

    def spy_stream(path: str, **kw: Any) -> Any:
        seen.append(("GET", path.split("?")[0]))
        return stream(path, **kw)

    fs.session.request = spy  # type: ignore[method-assign]
    fs.session.stream_bytes = spy_stream  # type: ignore[method-assign]
    return seen


def error_code(call: Callable[[], object]) -> str:
    with pytest.raises(PaddleCloudError) as info:
        call()
    return str(info.value.code)


def raw(port: int, request: bytes) -> tuple[int, bytes]:
    """One raw request; the status and the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return answer(s)


def answer(s: socket.socket, method: str = "GET") -> tuple[int, bytes]:
    resp = http.client.HTTPResponse(s, method=method)
    resp.begin()
    return resp.status, resp.read()


# -- the data moves, verified ----------------------------------------------------------------------


def test_a_file_goes_up_and_down_through_the_port_and_not_the_api(
    alice: Client, port: DataPort, platform: Platform, tmp_path: Path
) -> None:
    data = blob(SIZE)
    fs = with_plane(alice, plane_of(alice, port.port))
    calls = api_calls(fs)
    fs.upload_file(write(tmp_path / "a.bin", data), f"{HOME}/a.bin")
    fs.download_file(f"{HOME}/a.bin", tmp_path / "back.bin")

    assert (tmp_path / "back.bin").read_bytes() == data
    assert not [c for c in calls if c[0] == "PUT"]  # no chunk through the API
    assert ("GET", "/pfs/file") not in calls
    moved = platform.ctx.metrics.pfs_data_port
    assert moved.labels("received")._value.get() == SIZE
    assert moved.labels("sent")._value.get() == SIZE


def test_a_range_is_the_files_bytes_and_clamped_to_its_end(
    alice: Client, port: DataPort, tmp_path: Path
) -> None:
    data = blob(SIZE)
    fs_of(alice).upload_file(write(tmp_path / "a.bin", data), f"{HOME}/a.bin")
    plane = plane_of(alice, port.port)
    fd = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT)
    try:
        digest = plane.fetch(f"{HOME}/a.bin", fd, CHUNK, CHUNK, lambda _n: None)
        assert os.pread(fd, CHUNK, CHUNK) == data[CHUNK : 2 * CHUNK]
        assert digest == chunk_digest(data[CHUNK : 2 * CHUNK])
        # past the end: the server sends what there is, and the client says the range came short
        assert error_code(lambda: plane.fetch(f"{HOME}/a.bin", fd, SIZE - 10, 100, lambda _n: None)) == (
            "checksum_mismatch"
        )
    finally:
        os.close(fd)


def test_a_damaged_chunk_is_refused_and_the_upload_resumes_with_the_rest(
    alice: Client, port: DataPort, tmp_path: Path
) -> None:
    data = blob(SIZE)
    parts = chunks_of(data)
    up = begin(alice, f"{HOME}/r.bin", SIZE)
    plane = plane_of(alice, port.port)
    bad = bytes([parts[1][0] ^ 1]) + parts[1][1:]
    assert error_code(lambda: plane.put_chunk(up.id, 1, bad, chunk_digest(parts[1]))) == "checksum_mismatch"
    plane.put_chunk(up.id, 0, parts[0], chunk_digest(parts[0]))  # the port goes on serving
    again = begin(alice, f"{HOME}/r.bin", SIZE)
    assert sorted(again.received) == [0]  # chunk 1 counts as missing

    for i in range(1, len(parts)):
        plane.put_chunk(up.id, i, parts[i], chunk_digest(parts[i]))
    alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    fs_of(alice).download_file(f"{HOME}/r.bin", tmp_path / "r.bin")
    assert (tmp_path / "r.bin").read_bytes() == data


# -- tenancy and errors: the API's ---------------------------------------------------------------------


def test_another_user_reaches_neither_the_file_nor_the_upload(
    alice: Client, bob: Client, port: DataPort, tmp_path: Path
) -> None:
    data = blob(SIZE)
    fs_of(alice).upload_file(write(tmp_path / "a.bin", data), f"{HOME}/a.bin")
    up = begin(alice, f"{HOME}/b.bin", SIZE)
    theirs = plane_of(bob, port.port)
    fd = os.open(tmp_path / "steal", os.O_RDWR | os.O_CREAT)
    try:
        api = error_code(
            lambda: fs_of(bob)._fetch_chunk(f"{HOME}/a.bin", fd, (0, CHUNK), lambda _n: None, None)
        )
        assert error_code(lambda: theirs.fetch(f"{HOME}/a.bin", fd, 0, CHUNK, lambda _n: None)) == api
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    part = chunks_of(data)[0]
    assert error_code(lambda: theirs.put_chunk(up.id, 0, part, chunk_digest(part))) == "upload_not_found"
    assert begin(alice, f"{HOME}/b.bin", SIZE).received == {}


def test_no_token_unknown_routes_and_bad_bodies_get_the_apis_error_codes(
    alice: Client, port: DataPort
) -> None:
    p = port.port
    status, body = raw(p, b"GET /api/v1/pfs/file?path=/pfs/local/home/alice/x HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, b'"unauthorized"' in body) == (401, True)
    token = alice.pfs.session.headers["Authorization"]
    auth = f"Authorization: {token}\r\n".encode()
    status, body = raw(
        p, b"POST /api/v1/pfs/mkdir HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + auth + b"\r\n"
    )
    assert (status, b'"invalid_request"' in body) == (404, True)
    up = begin(alice, f"{HOME}/c.bin", SIZE)
    huge = f"PUT /api/v1/pfs/uploads/{up.id}/0 HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 40}\r\n".encode()
    status, body = raw(p, huge + auth + b"X-PaddleCloud-Digest: " + b"0" * 64 + b"\r\n\r\n")
    assert (status, b'"request_too_large"' in body) == (413, True)  # as the API's body limit says
    chunked = f"PUT /api/v1/pfs/uploads/{up.id}/0 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    status, body = raw(p, chunked.encode() + auth + b"\r\n0\r\n\r\n")
    assert (status, b'"invalid_request"' in body) == (422, True)
    get = b"GET /api/v1/pfs/file?path=" + HOME.encode() + b"/c.bin&"
    for bad in (b"path=b", b"offset=-1", b"length=%C2%B2", b"offset=" + b"9" * 30):
        status, body = raw(p, get + bad + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
        assert (status, b'"invalid_request"' in body) == (422, True), bad
    fields = b"&".join(b"a=%d" % i for i in range(20))
    status, body = raw(p, b"GET /api/v1/pfs/file?" + fields + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
    assert (status, b'"invalid_request"' in body) == (422, True)
    old = b"GET /api/v1/pfs/file?path=x HTTP/1.1\r\nX-PaddleCloud-API-Version: 0\r\n"
    status, body = raw(p, old + auth + b"\r\n")
    assert (status, b'"client_too_old"' in body) == (426, True)  # as the API's version check says
    with socket.create_connection(("127.0.0.1", p), timeout=10) as s:
        s.sendall(b"HEAD /api/v1/pfs/file HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer(s, "HEAD")[0] == 501
        s.settimeout(1)
        assert s.recv(1) == b""  # no body after the answer's head (and the connection closed)


# -- bounds and the fallback ----------------------------------------------------------------------


def test_a_full_port_answers_busy_and_the_client_sends_through_the_api(
    alice: Client, platform: Platform, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(pfs_data, "MAX_CONNECTIONS", 2)
    small = DataPort(platform, "127.0.0.1", 0)
    small.start()
    hogs = [socket.create_connection(("127.0.0.1", small.port)) for _ in range(2)]
    try:
        time.sleep(0.2)  # both accepted (each holds its slot while it sends nothing)
        plane = plane_of(alice, small.port)
        part = blob(CHUNK)
        up = begin(alice, f"{HOME}/d.bin", CHUNK * 2)
        fd = os.open(tmp_path / "busy", os.O_RDWR | os.O_CREAT)
        try:
            with pytest.raises(DataUnavailable, match="full"):
                plane.fetch(f"{HOME}/d.bin", fd, 0, 10, lambda _n: None)
        finally:
            os.close(fd)
        with pytest.raises(DataUnavailable):  # "full", or the refusal cut the body short
            plane.put_chunk(up.id, 0, part, chunk_digest(part))
        assert plane.reachable  # full is not unreachable: the next chunk tries the port again

        data = blob(SIZE, seed=3)
        fs = with_plane(alice, plane)
        calls = api_calls(fs)
        fs.upload_file(write(tmp_path / "d.bin", data), f"{HOME}/e.bin")
        assert len([c for c in calls if c[0] == "PUT"]) == len(chunks_of(data))  # all through the API
    finally:
        for h in hogs:
            h.close()
        small.stop()
    fs_of(alice).download_file(f"{HOME}/e.bin", tmp_path / "e.back")
    assert (tmp_path / "e.back").read_bytes() == data


def test_an_idle_connection_is_closed_and_its_slot_freed(
    alice: Client, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pfs_data, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(pfs_data._Handler, "keepalive", 0.3)
    small = DataPort(platform, "127.0.0.1", 0)
    small.start()
    try:
        idle = socket.create_connection(("127.0.0.1", small.port))
        idle.settimeout(5)
        assert idle.recv(1) == b""  # the server closed it after its idle time
        idle.close()
        plane = plane_of(alice, small.port)
        part = blob(CHUNK)
        up = begin(alice, f"{HOME}/f.bin", CHUNK)
        for _ in range(50):  # the slot is released when the connection's thread ends
            try:
                plane.put_chunk(up.id, 0, part, chunk_digest(part))
                break
            except DataUnavailable:
                time.sleep(0.05)
        assert sorted(begin(alice, f"{HOME}/f.bin", CHUNK).received) == [0]
    finally:
        small.stop()


def test_a_port_that_cannot_be_reached_is_given_up_and_the_copy_goes_through_the_api(
    alice: Client, tmp_path: Path
) -> None:
    with socket.socket() as bound:  # bound, never listening: refused, and no other test takes it
        bound.bind(("127.0.0.1", 0))
        plane = plane_of(alice, bound.getsockname()[1])
        data = blob(SIZE, seed=5)
        fs = with_plane(alice, plane)
        fs.upload_file(write(tmp_path / "g.bin", data), f"{HOME}/g.bin")
        assert not plane.reachable
        assert fs.data_plane() is None
        fs.download_file(f"{HOME}/g.bin", tmp_path / "g.back")
    assert (tmp_path / "g.back").read_bytes() == data


def test_the_home_answer_names_the_port_and_the_switch_turns_it_off(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from paddlecloud.server.app import create_app

    token = platform.ensure_user("alice")
    with TestClient(create_app(platform, run_loop=False)) as http:  # a server without a data port
        assert Client(endpoint="http://testserver", token=token, http=http).pfs.data_plane() is None
    app = create_app(platform, run_loop=False)
    app.state.data_port = 4321
    with TestClient(app) as http:
        plane = Client(endpoint="http://testserver", token=token, http=http).pfs.data_plane()
        assert plane is not None and (plane.host, plane.port) == ("testserver", 4321)
        monkeypatch.setenv("PADDLECLOUD_PFS_DATA", "0")
        assert Client(endpoint="http://testserver", token=token, http=http).pfs.data_plane() is None


def test_a_refused_upload_keeps_a_callers_connection_and_a_strangers_is_closed(
    alice: Client, port: DataPort
) -> None:
    """A refused chunk's body is read and dropped for a caller with a good token (its next request
    is answered on the same connection); without one, nothing of it is read: the answer, then the
    connection closed."""
    token = alice.pfs.session.headers["Authorization"]
    body = b"x" * CHUNK
    nowhere = b"PUT /api/v1/pfs/uploads/0123456789abcdef0123456789abcdef/0 HTTP/1.1\r\nHost: x\r\n"
    head = nowhere + b"Content-Length: %d\r\nX-PaddleCloud-Digest: %s\r\n" % (CHUNK, b"0" * 64)
    with socket.create_connection(("127.0.0.1", port.port), timeout=10) as s:
        s.sendall(head + f"Authorization: {token}\r\n\r\n".encode() + body)
        status, got = answer(s)
        assert (status, b'"upload_not_found"' in got) == (404, True)
        s.sendall(b"GET /api/v1/pfs/file?path=/pfs/local/home/alice/none HTTP/1.1\r\nHost: x\r\n"
                  + f"Authorization: {token}\r\n\r\n".encode())  # fmt: skip
        status, got = answer(s)  # the same connection answers the next request
        assert (status, b'"path_not_found"' in got) == (404, True), got
    with socket.create_connection(("127.0.0.1", port.port), timeout=10) as s:
        s.sendall(head + b"Authorization: Bearer nobody\r\n\r\n")
        status, _ = answer(s)
        assert status == 401
        assert s.recv(1) == b""  # closed: a stranger's body is not read


def test_a_kept_alive_connection_the_server_closed_is_made_again(
    alice: Client, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pfs_data._Handler, "keepalive", 0.2)
    short = DataPort(platform, "127.0.0.1", 0)
    short.start()
    try:
        plane = plane_of(alice, short.port)
        parts = chunks_of(blob(2 * CHUNK, seed=9))
        up = begin(alice, f"{HOME}/k.bin", 2 * CHUNK)
        plane.put_chunk(up.id, 0, parts[0], chunk_digest(parts[0]))
        assert len(plane._idle) == 1  # kept for the next request
        time.sleep(0.6)  # the server closes it meanwhile (its keep-alive time)
        plane.put_chunk(up.id, 1, parts[1], chunk_digest(parts[1]))  # on a new connection
        assert plane.reachable and sorted(begin(alice, f"{HOME}/k.bin", 2 * CHUNK).received) == [0, 1]
    finally:
        short.stop()
