"""``client.plain.PlainSession`` (the ``pfs`` commands' session on http.client) against a real HTTP
server on loopback: the same contract as the httpx session (query and body encoding, the API
version check, error answers raised by their code, transport failures as ``ServerUnreachable``),
keep-alive reuse, one retry on a connection the server closed while it was idle, and streaming."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paddlecloud.api import HEADER_API_VERSION
from paddlecloud.api.errors import (
    ErrorCode,
    PaddleCloudError,
    ServerError,
    ServerUnreachable,
    VersionMismatch,
)
from paddlecloud.client.plain import PlainSession

__all__: list[str] = []

BIG = bytes(range(256)) * 12_000  # ~3 MiB: streamed in more than one piece


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        self.server.connections.add(self.client_address)
        if self.path.startswith("/api/v1/toolarge"):  # refused before the body is read, as a proxy does
            err = {"error": {"code": "request_too_large", "message": "the body is over 1 MiB"}}
            self._answer(413, json.dumps(err).encode(), {"Connection": "close"})
            self.close_connection = True
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/api/v1/error"):
            err = {"error": {"code": "path_not_found", "message": "no such file: /p"}}
            self._answer(404, json.dumps(err).encode())
        elif self.path.startswith("/api/v1/moved"):
            self._answer(301, b"", {"Location": "https://elsewhere.invalid/api/v1/moved"})
        elif self.path.startswith("/api/v1/old"):
            self._answer(200, b"{}", {HEADER_API_VERSION: "0"})
        elif self.path.startswith("/api/v1/big"):
            self._answer(200, BIG)
        elif self.path.startswith("/api/v1/short"):  # says more than it sends, then closes
            self.send_response(200)
            self.send_header("Content-Length", str(len(BIG)))
            self.end_headers()
            self.wfile.write(BIG[:1000])
            self.close_connection = True
        else:
            seen = {
                "method": self.command,
                "path": self.path,
                "body": body.decode(),
                "auth": self.headers.get("Authorization"),
                "type": self.headers.get("Content-Type"),
            }
            self._answer(200, json.dumps(seen).encode(), {"X-Echo": "1"})

    do_GET = do_PUT = do_POST = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections: set[tuple[str, int]] = set()


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)


def _session(srv: _Server) -> PlainSession:
    return PlainSession(f"http://127.0.0.1:{srv.server_address[1]}", "tok")


def test_queries_bodies_and_headers_are_sent_as_the_httpx_session_sends_them(server: _Server) -> None:
    s = _session(server)
    r = s.request("GET", "/pfs/list", params={"path": "/pfs/a b", "recursive": True, "x": None})
    seen = r.json()
    assert seen["path"] == "/api/v1/pfs/list?path=%2Fpfs%2Fa+b&recursive=true&x="
    assert seen["auth"] == "Bearer tok" and r.headers.get("x-echo") == "1"  # headers: any case
    seen = s.request("POST", "/pfs/mkdir", json={"path": "/p", "parents": False}).json()
    assert json.loads(seen["body"]) == {"path": "/p", "parents": False} and seen["type"] == "application/json"
    pieces = iter([b"ab", b"cd"])  # a one-shot iterable, as client.pfs sends chunks
    assert s.request("PUT", "/pfs/file", content=pieces).json()["body"] == "abcd"
    assert len(server.connections) == 1  # one kept-alive connection for all three
    s.close()


def test_an_error_answer_is_the_servers_error_by_its_code(server: _Server) -> None:
    with pytest.raises(PaddleCloudError) as err:
        _session(server).request("GET", "/error")
    assert err.value.code == ErrorCode.PATH_NOT_FOUND and "no such file" in str(err.value)


def test_a_server_too_old_is_refused_on_the_first_answer(server: _Server) -> None:
    with pytest.raises(VersionMismatch):
        _session(server).request("GET", "/old")


def test_streamed_bytes_arrive_whole_and_the_connection_is_reused(server: _Server) -> None:
    s = _session(server)
    assert b"".join(s.stream_bytes("/big")) == BIG
    assert b"".join(s.stream_bytes("/big")) == BIG
    assert len(server.connections) == 1
    with pytest.raises(PaddleCloudError) as err:
        list(s.stream_bytes("/error"))
    assert err.value.code == ErrorCode.PATH_NOT_FOUND


def test_a_connection_the_server_closed_while_idle_is_not_used(server: _Server) -> None:
    s = _session(server)
    s.request("GET", "/one")
    for conn in s._idle:  # what the server's keep-alive timeout does: the socket is shut under it
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)
    assert s.request("POST", "/two", json={"a": 1}).json()["body"] == '{"a": 1}'
    assert len(server.connections) == 2


def test_a_request_that_fails_on_a_kept_connection_is_sent_again_whole_unless_a_post(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the idle check cannot see: the server closes just as the request goes out."""
    s = _session(server)
    s.request("GET", "/one")
    monkeypatch.setattr("paddlecloud.client.plain._readable", lambda sock: False)  # looks alive
    for conn in s._idle:
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)
    assert s.request("PUT", "/two", content=iter([b"body"])).json()["body"] == "body"  # resent whole
    assert len(server.connections) == 2
    for conn in s._idle:
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)
    with pytest.raises(ServerUnreachable):
        s.request("POST", "/three", json={})


def test_nothing_listening_is_server_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ServerUnreachable, match="cannot reach the PaddleCloud server"):
            PlainSession(f"http://127.0.0.1:{port}", None).request("GET", "/health")


def test_only_plain_http() -> None:
    with pytest.raises(ValueError, match="http://"):
        PlainSession("https://example.invalid", None)


def test_an_answer_sent_before_the_body_is_the_error_raised(server: _Server) -> None:
    """A proxy's 413 before it reads the body: the send breaks, the answer is what the caller gets
    (not "cannot reach the server"), and the body is not sent again."""
    with pytest.raises(PaddleCloudError) as err:
        _session(server).request("PUT", "/toolarge", content=iter([b"x" * (32 << 20)]))
    assert err.value.code == ErrorCode.REQUEST_TOO_LARGE
    assert len(server.connections) == 1


def test_a_body_cut_short_is_server_unreachable_not_a_short_file(server: _Server) -> None:
    with pytest.raises(ServerUnreachable):
        b"".join(_session(server).stream_bytes("/short"))


def test_bodies_go_out_in_slices_of_at_most_a_mib() -> None:
    from paddlecloud.client.plain import SEND_SLICE, _slices

    parts = list(_slices([memoryview(b"a" * (SEND_SLICE * 2 + 5)), memoryview(b"b" * 3)]))
    assert [p.nbytes for p in parts] == [SEND_SLICE, SEND_SLICE, 5, 3]


def test_pfs_takes_the_plain_session_only_where_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """http:// without a proxy: the plain session; a proxy in the environment (httpx honours it,
    http.client would not) or https://: httpx's session."""
    from paddlecloud.client.pfs import Pfs
    from paddlecloud.client.session import Session

    for name in [k for k in __import__("os").environ if k.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    assert isinstance(Pfs.connect("http://127.0.0.1:9", "t").session, PlainSession)
    assert isinstance(Pfs.connect("https://127.0.0.1:9", "t").session, Session)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert isinstance(Pfs.connect("http://127.0.0.1:9", "t").session, Session)


def test_a_redirect_is_an_error_not_a_success(server: _Server) -> None:
    """Neither session follows a redirect, so nothing was done: a 3xx is a ServerError naming where
    (an http -> https redirect made a small-file upload print "copied" and store nothing)."""
    with pytest.raises(ServerError, match="answered 301, sending this request to https://elsewhere"):
        _session(server).request("PUT", "/moved", content=b"x")
