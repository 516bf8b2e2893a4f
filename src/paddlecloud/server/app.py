"""The FastAPI application: ``create_app(platform)`` mounts the routers under ``/api/v1`` and the web
console (``paddlecloud.console``) under ``/ui`` (``/`` leads there).

API request path: request timing (middleware, the platform's metrics) → version check (middleware) → body
limit (middleware) → auth (dependency) → route → ``JobService`` → response model. The OpenAPI
document is served at ``/api/v1/openapi.json`` and browsable at ``/docs``; Prometheus metrics at
``/metrics`` (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paddlecloud._version import API_VERSION, MIN_CLIENT_API_VERSION, __version__
from paddlecloud.api import API_PREFIX, HEADER_API_VERSION, HEADER_MIN_API_VERSION
from paddlecloud.api.errors import ErrorCode, VersionMismatch
from paddlecloud.console import create_console
from paddlecloud.controller import Platform
from paddlecloud.server import (
    routes_adaptive,
    routes_images,
    routes_jobs,
    routes_metrics,
    routes_pfs,
    routes_samplesets,
    routes_scheduling,
    routes_system,
    routes_tasks,
    routes_users,
)
from paddlecloud.server.errors import install_error_handlers
from paddlecloud.server.limits import BodyLimitMiddleware
from paddlecloud.server.metrics import RequestMetricsMiddleware
from paddlecloud.server.pfs_socket import PfsSocket

__all__ = ["ApiVersionMiddleware", "create_app"]

_VERSION_HEADERS = [
    (HEADER_API_VERSION.lower().encode(), str(API_VERSION).encode()),
    (HEADER_MIN_API_VERSION.lower().encode(), str(MIN_CLIENT_API_VERSION).encode()),
]


class ApiVersionMiddleware:
    """Pure ASGI (no body buffering, so uploads stream at full speed): stamp every response with the
    API versions and refuse clients older than the minimum with ``client_too_old``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_VERSION_HEADERS]
            await send(message)

        wanted = HEADER_API_VERSION.lower().encode()
        sent = next((v.decode("latin-1") for k, v in scope["headers"] if k == wanted), None)
        if sent is not None and (not sent.isdigit() or int(sent) < MIN_CLIENT_API_VERSION):
            err = VersionMismatch(
                f"client API version {sent} is older than this server's minimum {MIN_CLIENT_API_VERSION}: "
                "upgrade paddlecloud (pip install -U paddlecloud)",
                code=ErrorCode.CLIENT_TOO_OLD,
            )
            await JSONResponse(status_code=err.http_status, content=err.to_body())(scope, receive, stamped)
            return
        await self.app(scope, receive, stamped)


def create_app(platform: Platform, *, run_loop: bool = True) -> FastAPI:
    """Build the app. With ``run_loop`` the reconciler starts and stops with the app's lifespan."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if run_loop:
            platform.start()
        pfs_socket = PfsSocket(platform.pfs_local) if run_loop and platform.files.store.local_paths else None
        if pfs_socket is not None:
            pfs_socket.start()
        try:
            yield
        finally:
            data_port = getattr(_app.state, "pfs_data", None)  # server.main.open_data_port's
            if data_port is not None:
                data_port.stop()
            if pfs_socket is not None:
                pfs_socket.stop()
            if run_loop:  # the loops, then the backend: what it mounted or holds for no job goes
                platform.close()

    app = FastAPI(
        title="PaddleCloud",
        version=__version__,
        openapi_url=f"{API_PREFIX}/openapi.json",
        lifespan=lifespan,
    )
    app.state.platform = platform
    install_error_handlers(app)

    app.add_middleware(BodyLimitMiddleware, max_bytes=platform.ctx.config.max_request_bytes)
    app.add_middleware(ApiVersionMiddleware)
    app.add_middleware(RequestMetricsMiddleware, metrics=platform.ctx.metrics)  # outermost: times all
    app.include_router(routes_system.router, prefix=API_PREFIX)
    app.include_router(routes_jobs.router, prefix=API_PREFIX)
    app.include_router(routes_tasks.router, prefix=API_PREFIX)
    app.include_router(routes_adaptive.router, prefix=API_PREFIX)
    app.include_router(routes_pfs.router, prefix=API_PREFIX)
    app.include_router(routes_samplesets.router, prefix=API_PREFIX)
    app.include_router(routes_users.router, prefix=API_PREFIX)
    app.include_router(routes_images.router, prefix=API_PREFIX)
    app.include_router(routes_scheduling.router, prefix=API_PREFIX)
    app.include_router(routes_metrics.router, prefix=API_PREFIX)
    app.include_router(routes_metrics.metrics_router)
    app.mount("/ui", create_console(platform))
    app.add_route("/", _to_console, include_in_schema=False)
    return app


async def _to_console(_request: Request) -> RedirectResponse:
    """``/`` in a browser: the web console."""
    return RedirectResponse("/ui/", status_code=307)
