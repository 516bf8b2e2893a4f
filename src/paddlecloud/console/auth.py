"""Who is asking, and may they change something: the console's session cookie, bearer tokens, CSRF.

    request ─▶ token: ``Authorization: Bearer`` (scripts) or the session cookie (browsers)
            ─▶ Platform.authenticate (from memory when known) ─▶ Identity, the API's tenancy
    POST    ─▶ check_origin: ``Origin`` / ``Sec-Fetch-Site`` name this origin (when sent)
            ─▶ with the cookie: the CSRF token (``X-CSRF-Token`` header or ``csrf_token`` field)

The cookie holds the user's API token itself: HttpOnly (no script reads it), ``SameSite=Lax``,
``Path=/ui``, ``Secure`` (and named ``__Secure-paddlecloud``) over TLS, 12 hours. Nothing is kept on
the server, so a restart logs nobody out and a rotated or revoked token ends its sessions at once.
Lax rather than Strict: a link to a job page from another site (chat, mail) opens logged in, and
Lax never sends the cookie with a cross-site POST; every state change is a POST that also needs the
CSRF token and this origin.

The CSRF token is an HMAC of a fixed label keyed with the session's API token: per session, stable
across server restarts, and impossible to compute without the token (which no other site can read).
Bearer requests need none (a browser never attaches that header on its own).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from paddlecloud.api.errors import ErrorCode, Forbidden, Unauthorized
from paddlecloud.controller import Identity, Platform

__all__ = [
    "COOKIE_MAX_AGE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "Session",
    "check_csrf",
    "check_origin",
    "cookie_flags",
    "cookie_name",
    "csrf_token",
    "safe_next",
    "session",
    "verified_form",
]

CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
COOKIE_MAX_AGE = 12 * 3600
_CSRF_LABEL = b"paddlecloud-console-csrf-v1"
#: longer than any token the platform issues (``pc_`` + 43 characters): refused unread
_MAX_TOKEN = 512


class Session:
    """The caller of one console request."""

    __slots__ = ("by_cookie", "token", "who")

    def __init__(self, who: Identity, token: str, by_cookie: bool) -> None:
        self.who = who
        self.token = token
        self.by_cookie = by_cookie

    @property
    def csrf(self) -> str:
        return csrf_token(self.token)


def cookie_name(request: Request) -> str:
    return "__Secure-paddlecloud" if request.url.scheme == "https" else "paddlecloud"


def cookie_flags(request: Request) -> dict[str, Any]:
    """The session cookie's attributes (the same when it is set and when it is deleted)."""
    return {"path": "/ui", "secure": request.url.scheme == "https", "httponly": True, "samesite": "lax"}


def csrf_token(token: str) -> str:
    return hmac.new(token.encode(), _CSRF_LABEL, hashlib.sha256).hexdigest()


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


async def session(request: Request) -> Session:
    """The caller (``Unauthorized`` when no valid token came: the console then asks to log in)."""
    platform: Platform = request.app.state.platform
    token = _bearer(request)
    by_cookie = token is None
    if token is None:
        token = request.cookies.get(cookie_name(request))
    if not token or len(token) > _MAX_TOKEN:
        raise Unauthorized("log in with your API token", code=ErrorCode.UNAUTHORIZED)
    who = platform.cached_identity(token)
    if who is None:
        who = await run_in_threadpool(platform.authenticate, token)
    return Session(who, token, by_cookie)


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def check_origin(request: Request) -> None:
    """Refuse a request another site's page sent (``Origin`` or ``Sec-Fetch-Site`` say so)."""
    origin = request.headers.get("origin")
    if origin is not None and origin != _own_origin(request):
        raise Forbidden(
            f"this request came from another site ({urlsplit(origin).netloc or origin[:80]!r}); "
            "use the console's own pages",
            code=ErrorCode.FORBIDDEN,
        )
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise Forbidden(
            "this request came from another site; use the console's own pages", code=ErrorCode.FORBIDDEN
        )


def check_csrf(request: Request, sess: Session, form_value: str | None) -> None:
    """A state change: same origin, and with the cookie the session's CSRF token."""
    check_origin(request)
    if not sess.by_cookie:
        return
    sent = request.headers.get(CSRF_HEADER) or form_value or ""
    if not hmac.compare_digest(sent.encode(), sess.csrf.encode()):
        raise Forbidden(
            "the form's security token is missing or outdated: reload the page and try again",
            code=ErrorCode.FORBIDDEN,
        )


async def verified_form(request: Request, sess: Session, *, max_files: int = 0) -> FormData:
    """The body of a state-changing request (a form, possibly empty), after :func:`check_csrf`.
    Nothing of the request is acted on before this returns."""
    check_origin(request)  # before reading a body another site may have sent
    kind = request.headers.get("content-type", "")
    form = FormData()
    if kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await request.form(max_files=max_files, max_fields=20)
    token = form.get(CSRF_FIELD)
    check_csrf(request, sess, token if isinstance(token, str) else None)
    return form


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a console path of this server only (never another host)."""
    if target is None or not target.isascii() or not target.isprintable() or "\\" in target:
        return "/ui/"
    if not target.startswith("/ui/"):
        return "/ui/"
    return target[:2000]
