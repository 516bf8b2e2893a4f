"""A session to a plain-``http://`` API on the standard library's ``http.client``: what the ``pfs``
commands use (``Pfs.connect()``), so that they start without httpx.

    paddlecloud pfs ... ── Pfs.connect() ──http://──▶ PlainSession ──http.client──▶ /api/v1/pfs/...
                                         ──https://─▶ session.Session (httpx: its trust store, TLS files)
    Client() (the SDK, every other command) ─────────▶ session.Session

Why: a ``pfs cp`` of 256 MiB from another host takes ~0.5 s, of which the CLI's start-up is ~0.2 s;
importing httpx and httpcore and making their client is ~40 ms of it, where ``http.client`` is
loaded anyway (the PFS data port's client, ``client.pfs_data``). The contract is the one
``session.Session`` meets (``client.transport.Transport``), with the same checks
(``transport.Checks``): the API version header, error answers raised as the server's
``PaddleCloudError``, a transport failure as ``ServerUnreachable``. Keep-alive connections, each
taken by one request at a time (the copies' threads share the session). An idle one the server has
closed is dropped before use; one that fails before any answer came is made again, once, unless
the request was a POST (which the server may have taken); the request's body is kept for that.
Plain http only: a TLS session keeps httpx's verifying defaults and the TLS files.
"""

from __future__ import annotations

import contextlib
import http.client
import json as jsonlib
import select
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from paddlecloud.api import API_PREFIX
from paddlecloud.client.transport import Checks

__all__ = ["PlainAnswer", "PlainSession"]

#: idle connections kept for the next requests (a copy runs up to ``2 x parallel`` at once; the
#: server closes one idle for a few seconds)
MAX_IDLE = 64
#: bytes of a streamed body read at a time
STREAM_PIECE = 1 << 20
#: bytes of a request's body sent at a time: the timeout applies to each send, so a slow link gets
#: ``timeout`` per MiB, not per chunk (as the data port's client, ``client.pfs_data.SLICE``)
SEND_SLICE = 1 << 20
#: what a kept-alive connection the server closed meanwhile fails with (before any answer)
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class PlainAnswer:
    """A whole answer: status, headers (case-insensitive ``get``), body."""

    def __init__(self, status_code: int, headers: http.client.HTTPMessage, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return jsonlib.loads(self.content)


def _query(params: dict[str, Any] | None) -> str:
    """``params`` as httpx encodes them: booleans ``true`` / ``false``, None as empty."""
    if not params:
        return ""
    pairs = {
        k: ("true" if v else "false") if isinstance(v, bool) else ("" if v is None else v)
        for k, v in params.items()
    }
    return "?" + urlencode(pairs)


class PlainSession(Checks):
    """Requests below ``/api/v1`` to the ``http://`` ``endpoint``; ``timeout``: per connect, send
    or read."""

    def __init__(self, endpoint: str, token: str | None, *, timeout: float = 30.0) -> None:
        super().__init__(endpoint, token)
        url = urlsplit(self.endpoint)
        if url.scheme != "http":
            raise ValueError(f"PlainSession is for http:// endpoints, not {self.endpoint}")
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 80
        self._base = url.path.rstrip("/")
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def ssl_context(self) -> None:
        """No TLS: another connection to this server (the data port) is plain http too."""
        return None

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
    ) -> PlainAnswer:
        """One API call (``path`` below ``/api/v1``); errors raised as PaddleCloudError. ``content``:
        bytes, or an iterable of them (kept for a retry)."""
        sent = {**self.headers, **(headers or {})}
        body: list[memoryview] | None = None
        if json is not None:
            body = [memoryview(jsonlib.dumps(json).encode())]
            sent["Content-Type"] = "application/json"
        elif content is not None:
            pieces = [content] if isinstance(content, bytes | bytearray | memoryview) else list(content)
            body = [memoryview(p).cast("B") for p in pieces]
        if body is not None:
            for name in [k for k in sent if k.lower() == "content-length"]:
                del sent[name]
            sent["Content-Length"] = str(sum(b.nbytes for b in body))
        conn, resp = self._exchange(method, self._base + API_PREFIX + path + _query(params), sent, body)
        try:
            answer = PlainAnswer(resp.status, resp.headers, resp.read())
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self.unreachable(exc) from None
        self._give(conn, keep=not resp.will_close)
        self.check(answer)
        return answer

    def stream_bytes(self, path: str, *, params: dict[str, Any] | None = None) -> Iterator[bytes]:
        """A GET whose body is yielded as it arrives."""
        conn, resp = self._exchange(
            "GET", self._base + API_PREFIX + path + _query(params), dict(self.headers), None
        )
        done = False
        try:
            if resp.status >= 400:
                self.check(PlainAnswer(resp.status, resp.headers, resp.read()))
            self.check(PlainAnswer(resp.status, resp.headers, b""))  # the version, on a first answer
            while piece := resp.read(STREAM_PIECE):
                yield piece
            if resp.length:  # http.client ends a body cut short quietly; httpx raises
                raise http.client.IncompleteRead(b"", resp.length)
            done = True
        except (OSError, http.client.HTTPException) as exc:
            raise self.unreachable(exc) from None
        finally:
            if done:
                self._give(conn, keep=not resp.will_close)
            else:  # an error, or the caller stopped reading: the rest of the body is not read
                conn.close()

    def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: list[memoryview] | None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """The request sent on an idle connection (or a new one), its answer's head read. A server
        (or a proxy) that answers before the whole body is sent (413) and closes makes the send
        fail: its answer, already here, is the one returned."""
        for attempt in (0, 1):
            conn, fresh = self._take()
            try:
                try:
                    sent = _slices(body) if body is not None else None
                    conn.request(method, url, body=sent, headers=headers)
                except _STALE:
                    with contextlib.suppress(OSError, http.client.HTTPException):
                        return conn, conn.getresponse()
                    raise
                return conn, conn.getresponse()
            except _STALE as exc:
                conn.close()
                if fresh or attempt or method == "POST":  # a POST the server may have taken: not again
                    raise self.unreachable(exc) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise self.unreachable(exc) from None
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (False), else a new one (True). One whose socket reads as readable
        while idle has been closed by the server (its keep-alive timeout): dropped, as httpcore
        does, so that a request is rarely sent into a closing connection."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout), True
            if conn.sock is not None and not _readable(conn.sock):
                return conn, False
            conn.close()

    def _give(self, conn: http.client.HTTPConnection, *, keep: bool) -> None:
        with self._lock:
            if keep and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        with contextlib.suppress(OSError):
            conn.close()


def _slices(body: list[memoryview]) -> Iterable[memoryview]:
    for piece in body:
        for i in range(0, piece.nbytes, SEND_SLICE):
            yield piece[i : i + SEND_SLICE]


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection's socket has something to read (the server's close, or bytes it
    should not have sent): then it is not reused. ``poll``, not ``select``: descriptors past 1023."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
