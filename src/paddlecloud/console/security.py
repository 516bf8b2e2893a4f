"""Security headers on every ``/ui/`` response, in one place (a pure ASGI middleware).

Content-Security-Policy   scripts, styles, images and requests from this origin only: no inline
                          script or style, no eval (htmx runs with ``allowEval: false``), no
                          plugins, no framing (``frame-ancestors 'none'``), forms post here only
X-Content-Type-Options    nosniff: a log or a PFS file is never taken for HTML or script
Referrer-Policy           same-origin: job names in URLs never reach another site (not
                          no-referrer: Chromium then sends `Origin: null` with a form POST)
X-Frame-Options           DENY (older browsers; CSP says the same)
Cross-Origin-*-Policy     same-origin: no other site's window or fetch gets at these responses
Cache-Control             no-store for pages and data (they are one user's); static assets an hour
Server-Timing             ``app;dur=MS``: the server's time for the request (bench/console.py)
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "SecurityHeaders"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

_COMMON = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
_NO_STORE = (b"cache-control", b"no-store")
_STATIC = (b"cache-control", b"private, max-age=3600")


class SecurityHeaders:
    """Stamp the headers above on every response of the wrapped (console) app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        static = str(scope.get("path", "")).startswith(f"{scope.get('root_path', '')}/static/")

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = message.get("headers", [])
                own_csp = any(k.lower() == b"content-security-policy" for k, _ in given)
                headers = [(k, v) for k, v in given if k.lower() != b"cache-control"]
                took = (time.perf_counter() - started) * 1000
                # a response with a policy of its own (a log, a download: sandboxed) keeps it
                headers += [h for h in _COMMON if not (own_csp and h[0] == b"content-security-policy")]
                headers.append(_STATIC if static else _NO_STORE)
                headers.append((b"server-timing", f"app;dur={took:.1f}".encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, stamped)
