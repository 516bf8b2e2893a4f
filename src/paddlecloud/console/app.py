"""The console as an ASGI app of its own, which the API server mounts at ``/ui`` (same process, same
port): ``create_console(platform)``.

    /ui ─▶ SecurityHeaders (every response) ─▶ routes:
             /login, /logout          (here)
             /, /jobs/...             (pages_jobs)
             /queue, /cluster, /quota (pages_cluster)
             /pfs/...                 (pages_pfs)
             /static/...              (the console's CSS and JS and the vendored libraries)
           errors ─▶ an HTML page with the message (htmx requests: the message into ``#flash``);
                     not logged in ─▶ /ui/login?next=... (htmx: ``HX-Redirect``)

The console has no logic about jobs: its pages call the controller's view functions, exactly as the
REST routes do, with the caller's identity (``auth.session``).
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import urlencode, urlsplit

from fastapi import FastAPI, Form, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from paddlecloud.api.errors import ErrorCode, PaddleCloudError, ServerError, Unauthorized
from paddlecloud.console import pages_cluster, pages_jobs, pages_pfs
from paddlecloud.console.auth import (
    COOKIE_MAX_AGE,
    check_origin,
    cookie_flags,
    cookie_name,
    safe_next,
    session,
    verified_form,
)
from paddlecloud.console.render import NAV, STATIC_DIR, TEMPLATES
from paddlecloud.console.security import SecurityHeaders
from paddlecloud.controller import Platform

__all__ = ["create_console"]

log = logging.getLogger("paddlecloud.console")

NextQ = Annotated[str | None, Query(max_length=2000)]


def create_console(platform: Platform) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.platform = platform
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.include_router(pages_jobs.router)
    app.include_router(pages_cluster.router)
    app.include_router(pages_pfs.router)
    _session_routes(app)
    _error_pages(app)
    return app


def _session_routes(app: FastAPI) -> None:
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: NextQ = None) -> HTMLResponse:
        return _login_page(request, safe_next(next), "")

    @app.post("/login", response_model=None)
    async def login(
        request: Request,
        token: Annotated[str, Form(max_length=512)],
        next: Annotated[str, Form(max_length=2000)] = "/ui/",
    ) -> Response:
        check_origin(request)  # no logging in a victim as someone else from another site
        platform: Platform = request.app.state.platform
        try:
            await run_in_threadpool(platform.authenticate, token.strip())
        except Unauthorized:
            return _login_page(request, safe_next(next), "That token is not valid.", status=401)
        response = RedirectResponse(safe_next(next), status_code=303)
        response.set_cookie(
            cookie_name(request), token.strip(), max_age=COOKIE_MAX_AGE, **cookie_flags(request)
        )
        return response

    @app.post("/logout", response_model=None)
    async def logout(request: Request) -> Response:
        await verified_form(request, await session(request))
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(cookie_name(request), **cookie_flags(request))
        return response

    @app.get("", include_in_schema=False)
    def root() -> RedirectResponse:  # /ui without the slash
        return RedirectResponse("/ui/", status_code=308)


def _login_page(request: Request, target: str, error: str, *, status: int = 200) -> HTMLResponse:
    ctx = {"next": target, "error": error, "who": None, "csrf": "", "nav": (), "section": ""}
    return TEMPLATES.TemplateResponse(request, "login.html", ctx, status_code=status)


def _is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


async def _error_response(request: Request, status: int, message: str) -> Response:
    if status == 401:
        return _to_login(request)
    if request.headers.get("accept", "").startswith("text/plain"):  # the log panel's fetch
        return PlainTextResponse(message, status_code=status)
    if _is_htmx(request):
        response = TEMPLATES.TemplateResponse(request, "_flash.html", {"message": message, "error": True},
                                              status_code=status)  # fmt: skip
        response.headers["HX-Retarget"] = "#flash"
        response.headers["HX-Reswap"] = "innerHTML"
        return response
    ctx: dict[str, object] = {"status": status, "message": message, "who": None, "csrf": "", "nav": (),
                              "section": ""}  # fmt: skip
    try:  # a logged-in caller keeps the navigation (and the way out)
        sess = await session(request)
        ctx.update(who=sess.who, csrf=sess.csrf, nav=NAV)
    except PaddleCloudError:
        pass
    return TEMPLATES.TemplateResponse(request, "error.html", ctx, status_code=status)


def _to_login(request: Request) -> Response:
    """Not logged in: browsers go to the login page (and come back); scripts get a 401."""
    if _is_htmx(request):
        current = urlsplit(request.headers.get("hx-current-url", "")).path
        response = Response(status_code=401)
        response.headers["HX-Redirect"] = "/ui/login?" + urlencode({"next": safe_next(current)})
        return response
    if request.method == "GET" and "authorization" not in request.headers:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/ui/login?" + urlencode({"next": safe_next(here)}), status_code=303)
    ctx = {"status": 401, "message": "log in with your API token", "who": None, "csrf": "", "nav": (),
           "section": ""}  # fmt: skip
    return TEMPLATES.TemplateResponse(request, "error.html", ctx, status_code=401)


def _error_pages(app: FastAPI) -> None:
    @app.exception_handler(PaddleCloudError)
    async def _platform(request: Request, exc: PaddleCloudError) -> Response:
        return await _error_response(request, exc.http_status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body"))
        return await _error_response(request, 422, f"{where}: {first.get('msg', 'invalid value')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return await _error_response(request, exc.status_code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("console: unhandled error")
        err = ServerError(
            f"internal error: {type(exc).__name__}; see the server log", code=ErrorCode.INTERNAL
        )
        return await _error_response(request, 500, err.message)
