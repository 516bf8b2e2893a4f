"""API latency for the platform's metrics: a pure ASGI middleware that times every HTTP request.

    request ──▶ RequestMetricsMiddleware ──▶ (version check, body limit, routing, route)
                 │ timed from arrival to the response's start (status line and headers sent), so a
                 │ download's or a followed log's length does not count, an upload's body does
                 └ after the response: PlatformMetrics.request(method, route template, status, s)

The route label is the matched route's template (``/api/v1/jobs/{name}``), never the raw path, so
its values are bounded by the app's routes: a mount (static files) is ``<mount>/{path}``, a path no
route matches ``<unmatched>``. A request the app fails on without answering counts as 500.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paddlecloud.controller.model.metrics import PlatformMetrics

__all__ = ["UNMATCHED", "RequestMetricsMiddleware", "route_template"]

UNMATCHED = "<unmatched>"


def route_template(scope: Scope, root_path: str = "", prefixes: dict[int, str] | None = None) -> str:
    """The template of the route that served ``scope`` (after the app ran: routing records it in the
    scope). A route of an included router knows its path without the prefix it was included under:
    the prefix is the part of the request's path before where the route's pattern matches.
    ``prefixes`` (route id -> prefix, as last found; checked on each use) saves the search."""
    route = scope.get("route")
    template, pattern = getattr(route, "path", None), getattr(route, "path_regex", None)
    if isinstance(template, str) and pattern is not None:
        path = str(scope.get("path", ""))
        known = prefixes.get(id(route)) if prefixes is not None else None
        if known is not None and path.startswith(known) and pattern.match(path[len(known) :]):
            return known + template
        for i, ch in enumerate(path):
            if ch == "/" and pattern.match(path[i:]):
                if prefixes is not None:
                    prefixes[id(route)] = path[:i]
                return path[:i] + template
        return template
    mounted = str(scope.get("root_path", ""))
    if mounted != root_path:  # a mount (static files) put its prefix in root_path
        return f"{mounted}/{{path}}"
    return UNMATCHED


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: PlatformMetrics) -> None:
        self.app = app
        self.metrics = metrics
        #: the app's routes' include prefixes (bounded by its routes)
        self._prefixes: dict[int, str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        root_path = str(scope.get("root_path", ""))
        status, took = 500, 0.0

        async def timed(message: Message) -> None:
            nonlocal status, took
            if message["type"] == "http.response.start":
                status, took = int(message["status"]), time.perf_counter() - started
            await send(message)

        try:
            await self.app(scope, receive, timed)
        finally:
            took = took or time.perf_counter() - started
            route = route_template(scope, root_path, self._prefixes)
            self.metrics.request(str(scope["method"]), route, status, took)
