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

from paddlecloud._version import API_VERSION, MIN_SERVER_API_VERSION
from paddlecloud.api import API_PREFIX, HEADER_API_VERSION
from paddlecloud.api.errors import (
    ErrorCode,
    InvalidInput,
    PaddleCloudError,
    ServerUnreachable,
    VersionMismatch,
    error_from_body,
)
from paddlecloud.client.config import load_config

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


class Session:
    """Requests below ``/api/v1`` to ``endpoint``. ``http``: an ``httpx.Client`` to use instead of
    a new one (tests bind it to the ASGI app: the transport seam); ``tls``: ``(ca, cert, key)``."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
        tls: tuple[str | None, str | None, str | None] = (None, None, None),
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        headers = {HEADER_API_VERSION: str(API_VERSION)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        #: what a second connection to the same server needs (the PFS data port, client.pfs_data):
        #: the headers every request carries and, for https, the TLS files' SSL context
        self.headers = dict(headers)
        self._tls: ssl.SSLContext | None = None
        if http is None:
            ctx = self._tls = tls_context(*tls)
            if ctx is None and self.endpoint.lower().startswith("http://"):
                ctx = plain_http_context()
            if ctx is None:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout)
            else:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout, verify=ctx)
        http.headers.update(headers)
        self.http = http
        self._checked = False

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

    def check(self, response: httpx.Response) -> None:
        """The server's API version (first answer only) and the answer's status."""
        if not self._checked:
            sent = response.headers.get(HEADER_API_VERSION)
            if sent is not None and sent.isdigit() and int(sent) < MIN_SERVER_API_VERSION:
                raise VersionMismatch(
                    f"server API version {sent} is older than this client needs ({MIN_SERVER_API_VERSION}): "
                    "upgrade the server or use an older paddlecloud",
                    code=ErrorCode.SERVER_TOO_OLD,
                )
            self._checked = True
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = None
            raise error_from_body(response.status_code, body)

    def unreachable(self, exc: Exception) -> PaddleCloudError:
        if isinstance(exc, httpx.ConnectError) and ("SSL" in str(exc) or "certificate" in str(exc)):
            return ServerUnreachable(
                f"TLS handshake with {self.endpoint} failed: {exc}; check the datacenter's ca, cert and "
                "key (paddlecloud login --ca/--cert/--key)"
            )
        return ServerUnreachable(
            f"cannot reach the PaddleCloud server at {self.endpoint} ({type(exc).__name__}); "
            "is `paddlecloud up` running?"
        )


def connect(
    endpoint: str | None = None,
    token: str | None = None,
    *,
    http: httpx.Client | None = None,
    timeout: float = 30.0,
    tls: tuple[str | None, str | None, str | None] = (None, None, None),
) -> Session:
    """A session to ``endpoint`` with ``token``, both by default the current datacenter's of the
    client config, and so are the TLS files ``tls`` (ca, cert, key) when the endpoint comes from
    there too. ``Client()`` and ``Pfs.connect()`` (the CLI's ``pfs`` commands, which need none of the
    job models) are both made by it."""
    ca, cert, key = tls
    if endpoint is None or token is None:
        dc = load_config().current
        if dc is not None:
            if not endpoint:
                ca, cert, key = ca or dc.ca, cert or dc.cert, key or dc.key
            endpoint = endpoint or dc.endpoint
            token = token or dc.token
    if not endpoint and http is None:
        raise InvalidInput(
            "no PaddleCloud endpoint configured: run `paddlecloud up` for a local platform, "
            "or `paddlecloud login`; or set PADDLECLOUD_ENDPOINT"
        )
    return Session(endpoint or "http://testserver", token, http=http, timeout=timeout, tls=(ca, cert, key))
