"""How code inside a worker reaches the platform's API: over HTTP(S), or through the job's socket.

    opener(ca) ──▶ urllib OpenerDirector   (no proxy; https verified with ``ca`` or the system's CAs)
        PADDLECLOUD_API_SOCKET set: every request to PADDLECLOUD_API goes through that Unix socket
        (the URL's host and scheme stay as they are: the Host header, TLS and its verification)

A job whose workers run in a network namespace of their own (the local backend and Slurm with
isolation ``sandbox``) has no route to the server's port; the run's monitor relays a Unix socket,
bound at ``/run/paddlecloud/api.sock`` in the sandbox, to it (``paddlecloud.node.apirelay``). The
platform's own clients (the task master, adaptive batch reports, the package fetch) open their
requests through :func:`opener`; a program of its own can do the same, or use
``curl --unix-socket "$PADDLECLOUD_API_SOCKET" "$PADDLECLOUD_API/api/v1/..."``.

Standard library only.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import urllib.request
from collections.abc import Mapping
from typing import Any

from paddlecloud.runtime import contract as c

__all__ = ["opener"]


def _connect(path: str, timeout: float | None) -> socket.socket:
    """A connected Unix socket to ``path``, also when the path is longer than a socket address
    may be (through its folder's descriptor, ``/proc/self/fd/N/name``)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        if len(path.encode()) < 100:
            sock.connect(path)
            return sock
        folder, name = os.path.split(path)
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sock.connect(f"/proc/self/fd/{fd}/{name}")
        finally:
            os.close(fd)
    except BaseException:
        sock.close()
        raise
    return sock


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, host: str, **kw: Any) -> None:
        super().__init__(host, **kw)
        self._path = path

    def connect(self) -> None:
        self.sock = _connect(self._path, self.timeout)


class _UnixHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, path: str, host: str, **kw: Any) -> None:
        super().__init__(host, **kw)
        self._path = path

    def connect(self) -> None:
        sock = _connect(self._path, self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _UnixHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(lambda host, **kw: _UnixHTTPConnection(self._path, host, **kw), req)


class _UnixHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, path: str, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._path, self._ctx = path, context or ssl.create_default_context()

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(
            lambda host, **kw: _UnixHTTPSConnection(self._path, host, context=self._ctx, **kw), req
        )


def opener(ca: str = "", environ: Mapping[str, str] | None = None) -> urllib.request.OpenerDirector:
    """An opener for the API: direct (never through a proxy), https verified with the CA bundle
    ``ca`` when given (OSError / ssl.SSLError when it cannot be loaded), and through the job's
    socket when ``PADDLECLOUD_API_SOCKET`` is set."""
    e = os.environ if environ is None else environ
    context = ssl.create_default_context(cafile=ca) if ca else None
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    path = e.get(c.API_SOCKET, "")
    if path:
        handlers += [_UnixHTTPHandler(path), _UnixHTTPSHandler(path, context)]
    elif context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)
