"""The SDK side of the PFS data port (``server.pfs_data``): chunk uploads and range downloads on a
port of their own, off the API's event loop, for a client on another host.

    Pfs.home() ── GET /pfs/home ──▶ X-PaddleCloud-Data-Port: P ──▶ DataPlane(session, P)
    upload   PUT  http(s)://<the API's host>:P/api/v1/pfs/uploads/{id}/{i}   one ``sendall`` per chunk
    download GET  http(s)://<the API's host>:P/api/v1/pfs/file?path&offset&length
             ──▶ ``readinto`` one buffer per thread (``BUFFER``) ──▶ BLAKE3 + pwrite

Keep-alive connections, each taken by one request at a time (``http.client``, the standard
library's: httpx reads a body 64 KiB at a time through its parser in Python, which the data port is
here to avoid). What the
server answers with an error is raised as the API's error (same body, same codes). When the port
cannot be had (not reachable from here: a firewall, a proxy in front of the API; or full: 503
``server_busy``), :class:`DataUnavailable` says so and the caller sends that chunk through the API
instead; a port that cannot be reached at all is not tried again by this client.
``PADDLECLOUD_PFS_DATA=0`` turns it off (every chunk through the API).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode, urlsplit

from paddlecloud.api import API_PREFIX
from paddlecloud.api.errors import ErrorCode, InvalidInput, error_from_body
from paddlecloud.client.transport import Transport
from paddlecloud.core.fileio import write_at

__all__ = ["BUFFER", "ENV_SWITCH", "DataPlane", "DataUnavailable"]

#: ``0`` turns the data port off for this client (every chunk through the API)
ENV_SWITCH = "PADDLECLOUD_PFS_DATA"
#: bytes a download reads into at a time, per thread
BUFFER = 4 << 20
#: the longest wait for one read or write on the data port
TIMEOUT_S = 60.0
#: idle connections kept for the next requests (a copy uses ``parallel`` at once; the server
#: closes one idle for a few seconds)
MAX_IDLE = 8
#: bytes of an upload's body sent at a time (each send within ``TIMEOUT_S``)
SLICE = 1 << 20
#: the longest wait to connect: a port that answers nothing is given up quickly (then the API)
CONNECT_TIMEOUT_S = 3.0


class DataUnavailable(Exception):
    """The data port cannot take this request (unreachable, or full): send it through the API."""


class _LocalError(Exception):
    """An error of this machine (its disk) met inside a request: not the port's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


#: what a kept-alive connection the server closed meanwhile fails with (before any answer)
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class DataPlane:
    def __init__(self, session: Transport, port: int) -> None:
        url = urlsplit(session.endpoint)
        self.host = url.hostname or "127.0.0.1"
        self.port = port
        self.https = url.scheme == "https"
        self.session = session
        self.reachable = True
        self._lock = threading.Lock()
        self._idle: list[_Link] = []

    @classmethod
    def of(cls, session: Transport, header: str | None) -> DataPlane | None:
        """The data port the answer header ``header`` names, unless there is none or it is off."""
        if not header or not header.isdigit() or os.environ.get(ENV_SWITCH, "1") == "0":
            return None
        port = int(header)
        return cls(session, port) if 0 < port < 65536 else None

    def close(self) -> None:
        """Close the idle connections (one in use is closed when its request ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for link in idle:
            link.close()

    # -- requests -------------------------------------------------------------------------------

    def put_chunk(self, upload_id: str, index: int, data: bytes | memoryview, digest: str) -> None:
        """Chunk ``index`` of the upload ``upload_id``; the server checks its BLAKE3 ``digest``. Sent
        ``SLICE`` bytes at a time: the timeout is per slice, not for the whole chunk (a slow link)."""
        headers = {"X-PaddleCloud-Digest": digest, "Content-Length": str(len(data))}
        view = memoryview(data)

        def slices() -> Iterable[memoryview]:
            return (view[i : i + SLICE] for i in range(0, len(view), SLICE))

        self._exchange("PUT", f"{API_PREFIX}/pfs/uploads/{upload_id}/{index}", headers, slices, None)

    def fetch(self, path: str, fd: int, off: int, n: int, progress: Callable[[int], None]) -> str:
        """Bytes ``off..off+n`` of the PFS file ``path`` written at ``off`` of ``fd``; their BLAKE3
        digest (the caller compares the whole file's checksum with the server's). What a failed
        request reported to ``progress`` is taken back (the API then sends it again)."""
        import blake3

        query = urlencode({"path": path, "offset": off, "length": n})
        digest: list[str] = []
        reported = [0]

        def body(resp: http.client.HTTPResponse, view: memoryview) -> None:
            h = blake3.blake3()  # a retried request starts again: its own digest
            pos = off
            while pos < off + n:
                k = resp.readinto(view[: min(len(view), off + n - pos)])
                if not k:
                    break
                piece = view[:k]
                h.update(piece)
                try:
                    pos += write_at(fd, [piece], pos)
                except OSError as exc:  # this machine's disk, not the port: raised as it is
                    raise _LocalError(exc) from None
                progress(k)
                reported[0] += k
            if pos != off + n:
                raise InvalidInput(f"{path}: short read at offset {pos}", code=ErrorCode.CHECKSUM_MISMATCH)
            digest.append(h.hexdigest())

        try:
            self._exchange("GET", f"{API_PREFIX}/pfs/file?{query}", {}, None, body)
        except BaseException:
            progress(-reported[0])
            raise
        return digest[-1]

    def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        data: Callable[[], Iterable[memoryview]] | None,
        body: Callable[[http.client.HTTPResponse, memoryview], None] | None,
    ) -> None:
        """One request on an idle connection (or a new one); a kept-alive connection the server
        had closed meanwhile (reset or closed before any answer) is made again, once. ``data``
        makes the request's body; ``body`` reads a 200's body into the connection's buffer; any
        other success has none."""
        for attempt in (0, 1):
            link = self._take()
            try:
                resp = self._send(link, method, url, {**self.session.headers, **headers}, data)
                if resp.status >= 400:
                    self._raise(link, resp)
                if body is not None and resp.status == 200:
                    body(resp, link.buffer())
                else:
                    resp.read()
            except _LocalError as exc:
                link.close()
                raise exc.error from None
            except _STALE as exc:
                link.close()
                if link.fresh or attempt:
                    raise DataUnavailable(f"the data port {self.host}:{self.port}: {exc}") from None
                continue  # the server closed a kept-alive connection: a new one, once
            except (OSError, http.client.HTTPException) as exc:
                link.close()
                raise DataUnavailable(f"the data port {self.host}:{self.port}: {exc}") from None
            except BaseException:
                link.close()
                raise
            self._give(link, keep=not resp.will_close)
            return
        raise AssertionError("unreachable")

    @staticmethod
    def _send(
        link: _Link,
        method: str,
        url: str,
        headers: dict[str, str],
        data: Callable[[], Iterable[memoryview]] | None,
    ) -> http.client.HTTPResponse:
        """The request sent, its answer read. A server that refuses an upload before its body
        (full: 503) answers and closes while the body is still going: the send then fails, and the
        answer, already here, is read all the same."""
        try:
            link.conn.request(method, url, body=data() if data is not None else None, headers=headers)
        except OSError as exc:
            try:
                return link.conn.getresponse()
            except (OSError, http.client.HTTPException):
                raise exc from None
        return link.conn.getresponse()

    @staticmethod
    def _raise(link: _Link, resp: http.client.HTTPResponse) -> None:
        raw = resp.read(1 << 16)
        link.close()  # a refused upload's body was not read: the server closes the connection
        try:
            answer: Any = json.loads(raw)
        except ValueError:
            answer = None
        code = answer.get("error", {}).get("code") if isinstance(answer, dict) else None
        if resp.status == 503 and code == "server_busy":
            raise DataUnavailable("the data port is full")
        raise error_from_body(resp.status, answer)

    # -- connections ----------------------------------------------------------------------------

    def _take(self) -> _Link:
        """An idle connection, else a new one; a port that cannot be connected to is not tried
        again (``reachable``)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        if not self.reachable:
            raise DataUnavailable("the data port cannot be reached from here")
        if self.https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=CONNECT_TIMEOUT_S, context=self.session.ssl_context()
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
        try:
            conn.connect()
        except OSError as exc:  # a firewall, a proxy in front of the API, another network
            conn.close()
            self.reachable = False
            raise DataUnavailable(f"cannot connect to the data port {self.host}:{self.port}: {exc}") from None
        assert conn.sock is not None
        conn.sock.settimeout(TIMEOUT_S)
        return _Link(conn)

    def _give(self, link: _Link, *, keep: bool) -> None:
        link.fresh = False
        with self._lock:
            if keep and len(self._idle) < MAX_IDLE:
                self._idle.append(link)
                return
        link.close()


class _Link:
    """One connection to the data port and the buffer its downloads read into (made on first use)."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self.fresh = True
        self._buffer: memoryview | None = None

    def buffer(self) -> memoryview:
        if self._buffer is None:
            self._buffer = memoryview(bytearray(BUFFER))
        return self._buffer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
