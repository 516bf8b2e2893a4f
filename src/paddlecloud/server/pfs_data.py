"""The PFS data port: the two bulk routes of the file service served by threads, off the event loop.

A client on another host moves a large file in chunks (``client.pfs``); through the API each body
chunk passes uvicorn's event loop in Python, 64 KiB at a time, and downloads have no ``sendfile``,
so the API moved half of what rsync moves over the same link (NOTES.md, issue 25). This port
serves the same two requests, with the same answers and errors, in threads of their own:

    GET /api/v1/pfs/file?path&offset&length   ──▶ FileService.open_range (tenancy, the range)
        ──▶ 200 + Content-Length ──▶ os.sendfile from the file to the socket (no copy through Python;
            over TLS, reads instead)
    PUT /api/v1/pfs/uploads/{id}/{index}       ──▶ FileService.chunk_writer (the upload's owner,
        its index, its digest) ──▶ recv_into one buffer per connection (``BUFFER``) ──▶
        ChunkWriter.write (pwrite + BLAKE3 as it passes) ──▶ ChunkWriter.finish ──▶ 204

The HTTP itself is the standard library's (``http.server``: request line, headers, keep-alive).
Every decision stays in ``controller.services.files``; this module only frames. Bounds: at most
``MAX_CONNECTIONS`` connections, ``MAX_PER_CLIENT`` from one address (one more is answered 503
``server_busy`` at once, and the client sends that chunk through the API instead), ``IDLE_TIMEOUT_S``
for any read or write of a request and ``KEEPALIVE_S`` for a kept-alive connection's next one, a
body no longer than one chunk (``MAX_CHUNK``; a refused body is read and dropped only for a caller
whose token is good, else the connection is closed), user tokens only (a job token reads its
package through the API). ``up --data-port`` chooses the port; ``GET /api/v1/pfs/home`` names it
(the header ``X-PaddleCloud-Data-Port``) to clients, which fall back to the API when they cannot
reach it. The app's lifespan stops it before the platform closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from paddlecloud._version import API_VERSION, MIN_CLIENT_API_VERSION
from paddlecloud.api import API_PREFIX, HEADER_API_VERSION, HEADER_MIN_API_VERSION
from paddlecloud.api.errors import (
    ErrorCode,
    InvalidInput,
    NotFound,
    PaddleCloudError,
    RequestTooLarge,
    ServerError,
    VersionMismatch,
)
from paddlecloud.api.file_requests import MAX_CHUNK
from paddlecloud.controller import Platform

__all__ = ["BUFFER", "IDLE_TIMEOUT_S", "KEEPALIVE_S", "MAX_CONNECTIONS", "MAX_PER_CLIENT", "DataPort"]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 32
#: of those, at most this many from one client address
MAX_PER_CLIENT = 8
#: how long one read or write of a request may wait
IDLE_TIMEOUT_S = 30.0
#: how long a kept-alive connection may wait for its next request (then it is closed)
KEEPALIVE_S = 5.0
#: bytes one upload connection receives into at a time (one pwrite + hash per fill)
BUFFER = 4 << 20
#: one ``sendfile`` call's most bytes (a range is sent in such steps)
SEND_STEP = 8 << 20
HEADER_DIGEST = "X-PaddleCloud-Digest"
HEADER_SIZE = "X-PaddleCloud-Size"
_UPLOADS = f"{API_PREFIX}/pfs/uploads/"
_FILE = f"{API_PREFIX}/pfs/file"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], platform: Platform, tls: ssl.SSLContext | None) -> None:
        self.platform = platform
        self.tls = tls
        self._lock = threading.Lock()
        #: the connections being served, per client address (``MAX_PER_CLIENT`` each)
        self._live: dict[socket.socket, str] = {}
        if ":" in address[0]:  # an IPv6 bind address
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("pfs data port %s: connection ended with an error", client_address, exc_info=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        host = str(client_address[0])
        with self._lock:
            mine = sum(1 for h in self._live.values() if h == host)
            full = len(self._live) >= MAX_CONNECTIONS or mine >= MAX_PER_CLIENT
            if not full:
                self._live[request] = host
        if full:
            if self.tls is None:  # over TLS, no answer without a handshake here: just closed
                _refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            self._live.pop(request, None)

    def get_request(self) -> tuple[Any, Any]:
        conn, addr = super().get_request()
        if self.tls is not None:  # the handshake runs in the connection's thread
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, addr

    def end_connections(self) -> None:
        """Cut every connection being served (``stop``: no request is taken after it)."""
        with self._lock:
            live = list(self._live)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _refuse_busy(request: socket.socket) -> None:
    message = f"the data port is full (at most {MAX_CONNECTIONS} connections, {MAX_PER_CLIENT} per client)"
    body = json.dumps({"error": {"code": "server_busy", "message": message}}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    with contextlib.suppress(OSError):
        request.settimeout(1.0)  # a fresh socket's send buffer is empty: this does not wait
        request.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    #: how long a kept-alive connection may wait for its next request line
    keepalive = KEEPALIVE_S
    server: _Server
    _buffer: memoryview | None = None
    #: bytes of the current request's body not read yet
    _unread = 0
    #: the caller of the current request is known (a refused body is drained only for a caller)
    _known = False
    #: the current request's answer has begun (a later error can only cut the connection)
    _answered = False

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("pfs data port %s: " + format, self.address_string(), *args)

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (OSError, ssl.SSLError) as exc:
                log.info("pfs data port %s: TLS handshake failed: %s", self.address_string(), exc)
                return
        super().handle()

    def handle_one_request(self) -> None:
        self.connection.settimeout(self.keepalive)  # an idle connection does not hold its slot long
        super().handle_one_request()

    def do_GET(self) -> None:
        self._serve(self._download)

    def do_PUT(self) -> None:
        self._serve(self._upload)

    def do_POST(self) -> None:
        self._serve(None)

    do_DELETE = do_PATCH = do_POST  # HEAD: the standard library's 501, without a body

    # -- one request ----------------------------------------------------------------------------

    def _serve(self, route: Any) -> None:
        self.connection.settimeout(IDLE_TIMEOUT_S)
        self._unread, self._known, self._answered = 0, False, False
        try:
            self._unread = self._length()  # every request's body: bounded, drained when refused
            if route is None:
                raise NotFound(
                    f"the data port serves only GET {_FILE} and PUT {_UPLOADS}{{id}}/{{index}}",
                    code=ErrorCode.INVALID_REQUEST,
                )
            self._check_version()
            who = self.server.platform.authenticate(_bearer(self.headers.get("Authorization", "")))
            self._known = True
            route(who)
        except PaddleCloudError as exc:
            self._error(exc)
        except (OSError, ssl.SSLError) as exc:  # the client went away or stalled: nothing to answer
            log.info("pfs data port %s: %s", self.address_string(), exc)
            self.close_connection = True
        except Exception:
            log.exception("pfs data port: unhandled error")
            self._error(ServerError("internal error on the data port; see the server log"))

    def _check_version(self) -> None:
        sent = self.headers.get(HEADER_API_VERSION)
        if sent is not None and (not _whole(sent) or int(sent) < MIN_CLIENT_API_VERSION):
            raise VersionMismatch(
                f"client API version {sent} is older than this server's minimum {MIN_CLIENT_API_VERSION}: "
                "upgrade paddlecloud (pip install -U paddlecloud)",
                code=ErrorCode.CLIENT_TOO_OLD,
            )

    def _download(self, who: Any) -> None:
        if self._unread:  # a GET with a body: served, but its connection carries nothing more
            self.close_connection = True
        url = urlsplit(self.path)
        if url.path != _FILE:
            raise NotFound(f"no such route on the data port: {url.path}", code=ErrorCode.INVALID_REQUEST)
        try:
            query = parse_qs(url.query, max_num_fields=8)
        except ValueError:
            raise InvalidInput("too many query fields", code=ErrorCode.INVALID_REQUEST) from None
        offset = _int(query, "offset", 0)
        length = _int(query, "length", None)
        fd, start, count, size = self.server.platform.files.open_range(
            who, _one(query, "path"), offset, length
        )
        try:
            self._head(200, {"Content-Type": "application/octet-stream", "Content-Length": str(count),
                             HEADER_SIZE: str(size)})  # fmt: skip
            self._answered = True
            if isinstance(self.connection, ssl.SSLSocket):
                self._send_read(fd, start, count)
            else:
                self._send_file(fd, start, count)
        finally:
            os.close(fd)

    def _send_file(self, fd: int, start: int, count: int) -> None:
        """``sendfile``: from the page cache to the socket, no copy through Python."""
        sent = 0
        while sent < count:
            n = self.connection.sendfile(_FdFile(fd), start + sent, min(SEND_STEP, count - sent))
            if n == 0:  # the file shrank under us: the client sees a short body and says so
                self.close_connection = True
                return
            sent += n
            self.server.platform.ctx.metrics.pfs_data_port.labels("sent").inc(n)

    def _send_read(self, fd: int, start: int, count: int) -> None:
        """Over TLS (no ``sendfile``): read into the connection's buffer, then send it."""
        view, sent = self._view(), 0
        while sent < count:
            n = os.preadv(fd, [view[: min(len(view), count - sent)]], start + sent)
            if n == 0:
                self.close_connection = True
                return
            self.connection.sendall(view[:n])
            sent += n
            self.server.platform.ctx.metrics.pfs_data_port.labels("sent").inc(n)

    def _upload(self, who: Any) -> None:
        rest = self.path.split("?", 1)[0].removeprefix(_UPLOADS)
        parts = rest.split("/")
        length = self._unread
        if not self.path.startswith(_UPLOADS) or len(parts) != 2 or not _whole(parts[1]):
            raise NotFound(
                f"no such route on the data port: {self.path[:200]}", code=ErrorCode.INVALID_REQUEST
            )
        writer = self.server.platform.files.chunk_writer(
            who, parts[0], int(parts[1]), self.headers.get(HEADER_DIGEST, "")
        )
        view = self._view()
        while self._unread:
            n = self.rfile.readinto(view[: min(len(view), self._unread)])
            if not n:
                raise OSError(f"the client went away {length - self._unread} bytes into {length}")
            self._unread -= n
            writer.write([view[:n]])
        writer.finish()
        self.server.platform.ctx.metrics.pfs_data_port.labels("received").inc(length)
        self._head(204, {"Content-Length": "0"})

    def _view(self) -> memoryview:
        if self._buffer is None:
            self._buffer = memoryview(bytearray(BUFFER))
        return self._buffer

    def _drain(self) -> None:
        """Read and drop what is left of a refused upload's body (at most one chunk, ``MAX_CHUNK``),
        so that the client, which sends it whole before it reads, gets the answer and the
        connection serves its next request."""
        view = self._view()
        while self._unread:
            n = self.rfile.readinto(view[: min(len(view), self._unread)])
            if not n:
                raise OSError("the client went away")
            self._unread -= n

    def _length(self) -> int:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise InvalidInput("send chunks with a Content-Length", code=ErrorCode.INVALID_REQUEST)
        text = self.headers.get("Content-Length", "0")
        if not _whole(text):
            self.close_connection = True
            raise InvalidInput(f"bad Content-Length {text[:40]!r}", code=ErrorCode.INVALID_REQUEST)
        if int(text) > MAX_CHUNK:
            self.close_connection = True
            raise RequestTooLarge(
                f"a chunk holds at most {MAX_CHUNK >> 20} MiB", code=ErrorCode.REQUEST_TOO_LARGE
            )
        return int(text)

    # -- answers --------------------------------------------------------------------------------

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header(HEADER_API_VERSION, str(API_VERSION))
        self.send_header(HEADER_MIN_API_VERSION, str(MIN_CLIENT_API_VERSION))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _error(self, exc: PaddleCloudError) -> None:
        if self._answered:  # mid-body: a second answer would be read as data; the cut says it
            self.close_connection = True
            return
        body = json.dumps(exc.to_body()).encode()
        if self._unread and not self._known:  # nobody's body: not read for a stranger
            self.close_connection = True
        with contextlib.suppress(OSError, ssl.SSLError):
            if self._unread and not self.close_connection:
                self._drain()
            headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
            if self.close_connection:
                headers["Connection"] = "close"
            self._head(exc.http_status, headers)
            self.wfile.write(body)


class _FdFile:
    """What ``socket.sendfile`` wants of a file (``fileno``, ``seek``, ``read``) around an open descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, pos: int) -> int:
        return os.lseek(self._fd, pos, os.SEEK_SET)

    def read(self, n: int) -> bytes:  # over TLS, ``sendfile`` falls back to reads and sends
        return os.read(self._fd, n)


def _bearer(auth: str) -> str | None:
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _one(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name, [])
    if len(values) != 1:
        raise InvalidInput(f"give {name} once", code=ErrorCode.INVALID_REQUEST, field=name)
    return values[0]


def _whole(text: str) -> bool:
    """A whole number in ASCII digits (``str.isdigit`` also takes "²", which ``int`` refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 19


def _int(query: dict[str, list[str]], name: str, default: int | None) -> Any:
    if name not in query:
        return default
    text = _one(query, name)
    if not _whole(text):
        raise InvalidInput(f"{name} must be a whole number >= 0", code=ErrorCode.INVALID_REQUEST, field=name)
    return int(text)


class DataPort:
    """The port's server and its accepting thread: :meth:`start` binds (``port`` 0: any free one)
    and returns the port; :meth:`stop` closes it (connections in flight end with their thread)."""

    def __init__(self, platform: Platform, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._server = _Server((host, port), platform, tls)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> int:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="pfs-data-port",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Stop accepting, then cut the connections being served (a transfer in flight fails and
        the client says so; what it sent is kept or discarded as any cut upload is)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()
        self._server.end_connections()
