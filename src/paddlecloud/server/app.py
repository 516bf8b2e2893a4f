"""The FastAPI application: ``create_app(platform)`` mounts the routers under ``/api/v1``.

Request path: version check (middleware) → auth (dependency) → route → ``JobService`` → response
model. The OpenAPI document is served at ``/api/v1/openapi.json`` and browsable at ``/docs``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from paddlecloud._version import API_VERSION, MIN_CLIENT_API_VERSION, __version__
from paddlecloud.api import API_PREFIX, HEADER_API_VERSION, HEADER_MIN_API_VERSION
from paddlecloud.api.errors import ErrorCode, VersionMismatch
from paddlecloud.controller import Platform
from paddlecloud.server import routes_jobs, routes_system
from paddlecloud.server.errors import install_error_handlers

__all__ = ["create_app"]


def create_app(platform: Platform, *, run_loop: bool = True) -> FastAPI:
    """Build the app. With ``run_loop`` the reconciler starts and stops with the app's lifespan."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if run_loop:
            platform.start()
        try:
            yield
        finally:
            if run_loop:
                platform.reconciler.stop()

    app = FastAPI(
        title="PaddleCloud",
        version=__version__,
        openapi_url=f"{API_PREFIX}/openapi.json",
        lifespan=lifespan,
    )
    app.state.platform = platform
    install_error_handlers(app)

    @app.middleware("http")
    async def api_version(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        sent = request.headers.get(HEADER_API_VERSION)
        if sent is not None and (not sent.isdigit() or int(sent) < MIN_CLIENT_API_VERSION):
            err = VersionMismatch(
                f"client API version {sent} is older than this server's minimum {MIN_CLIENT_API_VERSION}: "
                "upgrade paddlecloud (pip install -U paddlecloud)",
                code=ErrorCode.CLIENT_TOO_OLD,
            )
            response: Response = JSONResponse(status_code=err.http_status, content=err.to_body())
        else:
            response = await call_next(request)
        response.headers[HEADER_API_VERSION] = str(API_VERSION)
        response.headers[HEADER_MIN_API_VERSION] = str(MIN_CLIENT_API_VERSION)
        return response

    app.include_router(routes_system.router, prefix=API_PREFIX)
    app.include_router(routes_jobs.router, prefix=API_PREFIX)
    return app
