"""Framed JSON messages with open file descriptors over a Unix socket: the wire of the PFS same-host
fast path (client SDK <-> server), stdlib only.

    sender: send_msg(sock, {"grant": ...}, fds=[fd]) ──4-byte length + JSON, fds as SCM_RIGHTS──▶
    receiver: recv_msg(sock) -> (dict, [fd, ...])

A message is at most ``MAX_MESSAGE`` bytes and carries at most ``MAX_FDS`` descriptors: a longer
one, a malformed one or one with more descriptors is refused (``ProtocolError``), and every
descriptor that came with a refused message is closed, so a hostile peer cannot leak descriptors
into the receiver.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct
from typing import Any

__all__ = ["MAX_FDS", "MAX_MESSAGE", "ProtocolError", "recv_msg", "send_msg"]

MAX_MESSAGE = 64 << 10
MAX_FDS = 1
_LEN = struct.Struct("!I")


class ProtocolError(Exception):
    """The peer sent something that is not a message of this protocol (or closed mid-message)."""


def send_msg(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(data)} bytes is over {MAX_MESSAGE}")
    frame = _LEN.pack(len(data)) + data
    if fds:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([frame], anc)
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _recv_exact(sock: socket.socket, n: int, fds: list[int]) -> bytes:
    """``n`` bytes; descriptors that arrive with them are appended to ``fds`` (at most MAX_FDS)."""
    buf = b""
    while len(buf) < n:
        data, anc, flags, _ = sock.recvmsg(n - len(buf), socket.CMSG_SPACE((MAX_FDS + 1) * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
        if flags & socket.MSG_CTRUNC or len(fds) > MAX_FDS:
            raise ProtocolError(f"at most {MAX_FDS} descriptor(s) per message")
        if not data:
            raise ProtocolError("connection closed mid-message")
        buf += data
    return buf


def recv_msg(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One message and the descriptors that came with it (the caller owns and closes them)."""
    fds: list[int] = []
    try:
        (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size, fds))
        if n > MAX_MESSAGE:
            raise ProtocolError(f"message of {n} bytes is over {MAX_MESSAGE}")
        msg = json.loads(_recv_exact(sock, n, fds))
        if not isinstance(msg, dict):
            raise ProtocolError("a message is a JSON object")
    except (ProtocolError, ValueError, OSError) as exc:
        _close_all(fds)
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(str(exc)) from None
    return msg, fds
