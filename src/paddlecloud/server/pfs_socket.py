"""The Unix socket of the PFS same-host fast path: where a client on this machine redeems a grant
(``POST /api/v1/pfs/local``) and hands over, or receives, an open file (docs/data.md).

    listen on an abstract name (``@paddlecloud-pfs-<random>``: no file, nothing left behind)
    per connection, in a thread (at most ``MAX_CONNECTIONS`` at once; more are answered
    {"error", "status": 503, "busy": true} at once, and the client goes over HTTP instead):
      ◀── {"op": "upload", "grant", "chunks": [i...]} + the client's file descriptor
      ──▶ {"i": i, "d": digest} per chunk held, then {"ok": true}
      ◀── {"op": "download", "grant"}
      ──▶ {"ok": true, "size": n} + a read-only descriptor of the file
      ──▶ {"error": {...}, "status": 4xx} when refused (the HTTP error body and status)

Thin like the routes: framing (``core.fdpass``) and errors here, every decision in
``controller.services.files_local.LocalTransfers``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
from typing import Any

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.controller.services.files_local import LocalTransfers
from paddlecloud.core.fdpass import ProtocolError, recv_msg, send_msg

__all__ = ["MAX_CONNECTIONS", "PfsSocket"]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
#: how long a connection may take to send its request
REQUEST_TIMEOUT_S = 10.0
#: how long an answer may wait for the client to take it
ANSWER_TIMEOUT_S = 60.0


class PfsSocket:
    def __init__(self, local: LocalTransfers) -> None:
        self.local = local
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> None:
        name = f"paddlecloud-pfs-{os.getpid()}-{secrets.token_hex(8)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.bind("\0" + name)
        sock.listen(64)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="pfs-socket", daemon=True)
        self._thread.start()
        self.local.address = "@" + name

    def stop(self) -> None:
        self.local.address = None
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed by stop()
            if not self._slots.acquire(blocking=False):
                with conn, contextlib.suppress(OSError, ProtocolError):  # "busy": the client uses HTTP
                    busy = f"server busy (over {MAX_CONNECTIONS} same-host transfers); try again"
                    error = {"code": "internal", "message": busy}
                    send_msg(conn, {"error": error, "status": 503, "busy": True})
                continue
            threading.Thread(target=self._serve, args=(conn,), name="pfs-socket-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            with conn:
                conn.settimeout(REQUEST_TIMEOUT_S)
                try:
                    msg, fds = recv_msg(conn)
                    conn.settimeout(ANSWER_TIMEOUT_S)  # a client that stops reading is dropped
                    self._dispatch(conn, msg, fds)
                except PaddleCloudError as exc:
                    _reply_error(conn, exc.to_body()["error"], exc.http_status)
                except ProtocolError as exc:
                    _reply_error(conn, {"code": "invalid_request", "message": f"bad message: {exc}"}, 400)
                except OSError as exc:  # the client went away, or its descriptor would not read
                    log.info("pfs socket: %s", exc)
                    with contextlib.suppress(OSError):
                        _reply_error(conn, {"code": "internal", "message": f"copy failed: {exc}"}, 500)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._slots.release()

    def _dispatch(self, conn: socket.socket, msg: dict[str, Any], fds: list[int]) -> None:
        op = msg.get("op")
        if op == "upload":
            if len(fds) != 1:
                raise ProtocolError("an upload sends exactly one descriptor")
            self.local.fill(msg.get("grant"), fds[0], msg.get("chunks"),
                            lambda i, d: send_msg(conn, {"i": i, "d": d}))  # fmt: skip
            send_msg(conn, {"ok": True})
        elif op == "download":
            if fds:
                raise ProtocolError("a download sends no descriptor")
            fd, size = self.local.open(msg.get("grant"))
            try:
                send_msg(conn, {"ok": True, "size": size}, fds=[fd])
            finally:
                os.close(fd)
        else:
            raise ProtocolError(f"unknown op {op!r}")


def _reply_error(conn: socket.socket, error: dict[str, Any], status: int) -> None:
    with contextlib.suppress(OSError, ProtocolError):
        send_msg(conn, {"error": error, "status": status})
