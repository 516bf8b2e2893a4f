"""The SDK's HTTP session: one ``httpx.Client`` to one server, shared by every part of the SDK.

    Client ─┬─ Pfs ────────┐
            ├─ TaskMaster ─┼──▶ Session.request / stream_bytes / stream_lines ──httpx──▶ /api/v1/...
            └──────────────┘        (API version header, bearer token, TLS context)

The session checks the server's API version on the first answer, turns an error answer into the
same :class:`paddlecloud.api.errors.PaddleCloudError` the server raised (by its stable code) and a
transport failure into ``ServerUnreachable``. It knows nothing of jobs or files: the modules above
it (``pfs``, ``tasks``, ``client``) do, and import it, never each other upwards. :func:`connect`
makes one from the client config (endpoint, token, TLS files): ``Client()`` and ``Pfs.connect()``
both start there. An ``http://`` endpoint gets an SSL context that loads no CA bundle
(:func:`plain_http_context`); ``https://`` keeps httpx's verifying default or the TLS files.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from paddlecloud.api import API_PREFIX
from paddlecloud.api.errors import InvalidInput, PaddleCloudError, ServerUnreachable
from paddlecloud.client.transport import Checks, TlsFiles, no_endpoint, resolve

__all__ = ["Session", "connect", "plain_http_context", "tls_context"]


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """What ``verify=ca, cert=(cert, key)`` meant to httpx before 0.28 deprecated both: an SSL context
    trusting ``ca`` (a file or a directory; default: httpx's own trust store) and presenting the client
    certificate. ``None`` when no TLS file is set (httpx's defaults apply)."""
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise InvalidInput("a TLS client certificate needs both cert and key", field="cert" if key else "key")
    try:
        if ca:
            ctx = (
                ssl.create_default_context(capath=ca)
                if os.path.isdir(ca)
                else ssl.create_default_context(cafile=ca)
            )
        else:
            ctx = httpx.create_ssl_context()
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f"{k} {v}" for k, v in (("ca", ca), ("cert", cert), ("key", key)) if v)
        raise InvalidInput(f"cannot load the TLS files ({files}): {exc}") from None
    return ctx


def plain_http_context() -> ssl.SSLContext:
    """The SSL context of a session to an ``http://`` endpoint: one that verifies (certificate and
    host name required) but trusts no certificate authority. httpx builds its transports' SSL context
    when the client is made, by default from certifi's CA bundle (tens of milliseconds, every
    command); a plain-http session never does a TLS handshake, and should anything ever reach an
    https URL through it, the handshake fails (``ServerUnreachable`` naming TLS) instead of talking
    unverified. An ``https://`` endpoint still gets httpx's verifying default or :func:`tls_context`."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname=True, CERT_REQUIRED, no CAs


class Session(Checks):
    """Requests below ``/api/v1`` to ``endpoint``. ``http``: an ``httpx.Client`` to use instead of
    a new one (tests bind it to the ASGI app: the transport seam); ``tls``: ``(ca, cert, key)``.
    A :class:`paddlecloud.client.transport.Transport`, as ``client.plain.PlainSession`` is."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
        tls: TlsFiles = (None, None, None),
    ) -> None:
        super().__init__(endpoint, token)
        self._tls: ssl.SSLContext | None = None
        if http is None:
            ctx = self._tls = tls_context(*tls)
            if ctx is None and self.endpoint.lower().startswith("http://"):
                ctx = plain_http_context()
            if ctx is None:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout)
            else:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout, verify=ctx)
        http.headers.update(self.headers)
        self.http = http

    def close(self) -> None:
        self.http.close()

    def ssl_context(self) -> ssl.SSLContext | None:
        """The SSL context another connection to this server uses: None for ``http://``, else the
        TLS files' (:func:`tls_context`) or httpx's verifying default."""
        if not self.endpoint.lower().startswith("https://"):
            return None
        if self._tls is None:  # made once (httpx's default loads its CA bundle)
            self._tls = httpx.create_ssl_context()
        return self._tls

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One API call (``path`` below ``/api/v1``); errors raised as PaddleCloudError."""
        try:
            response = self.http.request(method, API_PREFIX + path, **kw)
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from None
        self.check(response)
        return response

    def stream_bytes(self, path: str, **kw: Any) -> Iterator[bytes]:
        """A GET whose body is yielded as it arrives."""
        with self._stream(path, **kw) as response:
            yield from response.iter_bytes(1 << 20)

    def stream_lines(self, path: str, **kw: Any) -> Iterator[str]:
        """A GET whose body is yielded line by line (without the newline) as it arrives."""
        with self._stream(path, **kw) as response:
            yield from response.iter_lines()

    @contextmanager
    def _stream(self, path: str, **kw: Any) -> Iterator[httpx.Response]:
        """A streamed GET: an error answer is read and raised as PaddleCloudError, a transport
        failure (also one while the body is read) as ServerUnreachable."""
        try:
            with self.http.stream("GET", API_PREFIX + path, **kw) as response:
                if response.status_code >= 400:
                    response.read()
                self.check(response)
                yield response
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from None

    def unreachable(self, exc: Exception) -> PaddleCloudError:
        if isinstance(exc, httpx.ConnectError) and ("SSL" in str(exc) or "certificate" in str(exc)):
            return ServerUnreachable(
                f"TLS handshake with {self.endpoint} failed: {exc}; check the datacenter's ca, cert and "
                "key (paddlecloud login --ca/--cert/--key)"
            )
        return super().unreachable(exc)


def connect(
    endpoint: str | None = None,
    token: str | None = None,
    *,
    http: httpx.Client | None = None,
    timeout: float = 30.0,
    tls: TlsFiles = (None, None, None),
) -> Session:
    """A session to ``endpoint`` with ``token``, both by default the current datacenter's of the
    client config, and so are the TLS files ``tls`` (ca, cert, key) when the endpoint comes from
    there too. ``Client()`` and ``Pfs.connect()`` (the CLI's ``pfs`` commands, which need none of the
    job models) are both made by it."""
    endpoint, token, tls = resolve(endpoint, token, tls)
    if not endpoint and http is None:
        raise no_endpoint()
    return Session(endpoint or "http://testserver", token, http=http, timeout=timeout, tls=tls)
