"""What every SDK session to the API shares, without an HTTP library: the contract the parts above
it use, where the endpoint comes from, and how an answer is checked.

    Transport   the contract: ``request`` / ``stream_bytes`` / ``headers`` / ``ssl_context``, met by
                ``session.Session`` (httpx: the SDK's ``Client``, any endpoint) and by
                ``plain.PlainSession`` (the standard library's http.client: ``Pfs.connect()`` on an
                ``http://`` endpoint, for the ``pfs`` commands' start-up)
    resolve()   endpoint, token and TLS files: given, else the client config's current datacenter
    Checks      the server's API version on the first answer, an error answer raised as the
                ``PaddleCloudError`` the server raised (by its stable code), a transport failure as
                ``ServerUnreachable``: one place for both sessions

No module here imports httpx: a ``pfs`` command on ``http://`` never does
(``tests/unit/test_cli_imports.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from paddlecloud._version import API_VERSION, MIN_SERVER_API_VERSION
from paddlecloud.api import HEADER_API_VERSION
from paddlecloud.api.errors import (
    ErrorCode,
    InvalidInput,
    PaddleCloudError,
    ServerError,
    ServerUnreachable,
    VersionMismatch,
    error_from_body,
)
from paddlecloud.client.config import load_config

__all__ = ["Answer", "Checks", "Transport", "resolve"]

#: the TLS files of a session: (ca, cert, key)
TlsFiles = tuple[str | None, str | None, str | None]


class _Headers(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class Answer(Protocol):
    """An answer as the SDK reads it (``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> _Headers: ...

    @property
    def content(self) -> bytes: ...

    def json(self) -> Any: ...


class Transport(Protocol):
    """What ``client.pfs``, ``client.pfs_data`` and ``client.pfs_local`` need of a session."""

    endpoint: str
    #: the headers every request carries (API version, bearer token): a second connection to the
    #: same server (the PFS data port) sends them too
    headers: dict[str, str]

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer: ...

    def stream_bytes(self, path: str, *, params: dict[str, Any] | None = None) -> Iterator[bytes]: ...

    def ssl_context(self) -> Any: ...

    def close(self) -> None: ...


def resolve(
    endpoint: str | None, token: str | None, tls: TlsFiles
) -> tuple[str | None, str | None, TlsFiles]:
    """``endpoint`` and ``token``, each by default the current datacenter's of the client config,
    and so are the TLS files when the endpoint comes from there too."""
    ca, cert, key = tls
    if endpoint is None or token is None:
        dc = load_config().current
        if dc is not None:
            if not endpoint:
                ca, cert, key = ca or dc.ca, cert or dc.cert, key or dc.key
            endpoint = endpoint or dc.endpoint
            token = token or dc.token
    return endpoint, token, (ca, cert, key)


def no_endpoint() -> InvalidInput:
    return InvalidInput(
        "no PaddleCloud endpoint configured: run `paddlecloud up` for a local platform, "
        "or `paddlecloud login`; or set PADDLECLOUD_ENDPOINT"
    )


class Checks:
    """The answer checks and the headers of a session to ``endpoint`` with ``token``."""

    def __init__(self, endpoint: str, token: str | None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.headers = {HEADER_API_VERSION: str(API_VERSION)}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self._checked = False

    def check(self, response: Answer) -> None:
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
        if 300 <= response.status_code < 400:  # neither session follows one: nothing was done
            where = response.headers.get("location") or "elsewhere"
            raise ServerError(
                f"the server at {self.endpoint} answered {response.status_code}, sending this request to "
                f"{where}: check the datacenter's endpoint (paddlecloud login --endpoint)"
            )
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = None
            raise error_from_body(response.status_code, body)

    def unreachable(self, exc: Exception) -> PaddleCloudError:
        return ServerUnreachable(
            f"cannot reach the PaddleCloud server at {self.endpoint} ({type(exc).__name__}); "
            "is `paddlecloud up` running?"
        )
