"""The platform's API inside a job's network namespace: a Unix socket relayed to the server's port.

    worker (job's netns)  connect(/run/paddlecloud/api.sock)   bound into its sandbox
        ──▶ monitor (host's netns)  Relay: accept on the run's socket file, connect to the server's
            HOST:PORT, copy bytes both ways (TLS, when the API is https, stays end to end)

A job's namespace has no route to the host, so the only way out of it is this socket; what it
reaches is the API, which checks the job's token on every request as it does for anyone. One relay
per worker run, in its monitor (its CPU counts against the run's cgroup): at most
``MAX_CONNECTIONS`` at once (more wait in the listen queue), each connection bounded by an idle
timeout, every thread a daemon that ends with the monitor.

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time

__all__ = ["MAX_CONNECTIONS", "Relay", "listen"]

MAX_CONNECTIONS = 32
IDLE_TIMEOUT_S = 600.0
_CONNECT_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024


def _bind_unix(sock: socket.socket, path: str) -> None:
    """Bind to ``path`` even when it is longer than a socket address may be (108 bytes): through
    the folder's descriptor (``/proc/self/fd/N/name``)."""
    if len(path.encode()) < 100:
        sock.bind(path)
        return
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def listen(path: str) -> socket.socket:
    """The run's API socket at ``path``, listening (made by the backend before the run's monitor
    starts, and handed to it: ``--api-fd``); whoever may connect to a file there may use it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        _bind_unix(sock, path)
        os.chmod(path, 0o666)  # the sandbox's user (uid 1000 in its user namespace) connects
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


class Relay:
    """Accept on the listening Unix socket ``fd`` and relay each connection to ``target``."""

    def __init__(self, fd: int, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.socket(fileno=fd)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> None:
        threading.Thread(target=self._accept, name="api-relay", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self) -> None:
        """Until the socket is closed; a refusal of the moment (no descriptors, memory or threads
        left in the run's limits) is waited out, never the end of the relay."""
        while True:
            self._slots.acquire()
            try:
                conn, _ = self.sock.accept()
            except OSError as exc:
                self._slots.release()
                if exc.errno == errno.EBADF or self.sock.fileno() < 0:
                    return
                time.sleep(0.5)
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # no thread now (the run's pids limit): this connection is refused
                conn.close()
                self._slots.release()
                time.sleep(0.5)

    def _serve(self, conn: socket.socket) -> None:
        try:
            try:
                upstream = socket.create_connection(self.target, timeout=_CONNECT_TIMEOUT_S)
            except OSError:
                return  # the worker sees its connection closed: the API is unreachable
            with upstream:
                _pump(conn, upstream)
        finally:
            conn.close()
            self._slots.release()


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have finished sending (or nothing moved for the idle
    timeout)."""
    a.setblocking(False)
    b.setblocking(False)
    peer = {a: b, b: a}
    open_ = {a, b}
    with selectors.DefaultSelector() as sel:
        for s in open_:
            sel.register(s, selectors.EVENT_READ)
        while open_:
            ready = sel.select(IDLE_TIMEOUT_S)
            if not ready:
                return
            for key, _ in ready:
                src = key.fileobj
                assert isinstance(src, socket.socket)
                try:
                    data = src.recv(_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                dst = peer[src]
                if not data:  # this side finished sending: pass the end on
                    sel.unregister(src)
                    open_.discard(src)
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    continue
                try:
                    dst.settimeout(IDLE_TIMEOUT_S)
                    dst.sendall(data)
                    dst.setblocking(False)
                except OSError:
                    return
