"""The SDK side of the PFS same-host fast path: when the client runs on the server's machine, a
file's data moves as an open descriptor over the server's Unix socket, not over HTTP (docs/data.md).

    upload   POST /pfs/local {upload_id} ──▶ grant ──socket: grant + my open file──▶ the server
             copies the chunks (copy_file_range) into its staging file and answers each chunk's digest
    download POST /pfs/local {path} ──▶ grant ──socket: grant──▶ a read-only descriptor of the file

:meth:`LocalPlane.connect` answers ``None`` whenever the fast path is not there (another machine: the
socket cannot be reached; a server without it; ``PADDLECLOUD_PFS_LOCAL=0``) and the caller uses HTTP.
An error after the grant (a refusal, a damaged copy) is raised like an HTTP one.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from paddlecloud.api.errors import PaddleCloudError, ServerError, error_from_body
from paddlecloud.api.files import LocalGrant
from paddlecloud.client.transport import Transport
from paddlecloud.core.fdpass import ProtocolError, recv_msg, send_msg

__all__ = ["BATCH", "ENV_SWITCH", "LocalBusy", "LocalPlane"]

#: ``0`` turns the fast path off for this client (every transfer over HTTP)
ENV_SWITCH = "PADDLECLOUD_PFS_LOCAL"
#: the longest wait for one answer on the socket (one chunk copied, at most 64 MiB)
ANSWER_TIMEOUT_S = 120.0
#: chunk indexes per upload request (a message stays far below ``fdpass.MAX_MESSAGE``)
BATCH = 2048


class LocalBusy(Exception):
    """The server's socket serves as many same-host transfers as it may: this one goes over HTTP."""


class LocalPlane:
    def __init__(self, session: Transport) -> None:
        self.session = session
        self.enabled = os.environ.get(ENV_SWITCH, "1") != "0"

    def connect(self, **target: str) -> tuple[socket.socket, str] | None:
        """A connection to the server's Unix socket and a grant for ``upload_id=`` or ``path=``;
        ``None`` when the fast path is not available here (then it stays off for this client)."""
        if not self.enabled:
            return None
        try:
            r = self.session.request("POST", "/pfs/local", json=target)
            g = LocalGrant.from_json(r.content)
        except PaddleCloudError:  # an older server, none here, or refused: HTTP says why, if at all
            self.enabled = False
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            sock.connect("\0" + g.address.removeprefix("@"))
        except OSError:  # another machine (or network namespace): the name is not here
            sock.close()
            self.enabled = False
            return None
        return sock, g.grant

    def upload(self, conn: tuple[socket.socket, str], fd: int, chunks: list[int],
               on_chunk: Callable[[int, str], None]) -> None:  # fmt: skip
        """Have the server copy ``chunks`` of my open file ``fd`` into the upload; ``on_chunk(i,
        digest)`` as each is held."""
        sock, grant = conn
        with sock:
            _send(sock, {"op": "upload", "grant": grant, "chunks": chunks}, [fd])
            while True:
                msg = _answer(sock)
                if msg.get("ok"):
                    return
                on_chunk(int(msg["i"]), str(msg["d"]))

    def open(self, conn: tuple[socket.socket, str]) -> tuple[int, int]:
        """A read-only descriptor of the granted file and its size (the caller closes it)."""
        sock, grant = conn
        with sock:
            _send(sock, {"op": "download", "grant": grant}, [])
            msg, fds = _recv(sock)
            if len(fds) != 1 or not isinstance(msg.get("size"), int):
                for fd in fds:
                    os.close(fd)
                raise ServerError("the server's socket answered a download without a file")
            return fds[0], int(msg["size"])


def _send(sock: socket.socket, msg: dict[str, Any], fds: list[int]) -> None:
    """Send the request; where the server already answered and closed (busy), raise its answer."""
    try:
        send_msg(sock, msg, fds=fds)
    except OSError:  # EPIPE / ECONNRESET: it spoke first
        _answer(sock)
        raise ServerError("the server's socket closed before the request was sent; copy again") from None


def _recv(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    try:
        msg, fds = recv_msg(sock)
    except (ProtocolError, OSError) as exc:  # a timeout, a reset, a torn message
        raise ServerError(f"the server's socket went away mid-transfer ({exc}); copy again") from None
    if "error" in msg:
        for fd in fds:
            os.close(fd)
        if msg.get("busy") is True:
            raise LocalBusy(str(msg["error"]))
        raise error_from_body(int(msg.get("status", 500)), msg)
    return msg, fds


def _answer(sock: socket.socket) -> dict[str, Any]:
    msg, fds = _recv(sock)
    for fd in fds:
        os.close(fd)
    return msg
