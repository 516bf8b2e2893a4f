"""Exception handlers: every error leaves the server as ``{"error": {"code", "message", "field"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from paddlecloud.api.errors import ErrorCode, InvalidInput, PaddleCloudError, ServerError

__all__ = ["install_error_handlers", "validation_message"]

log = logging.getLogger("paddlecloud.server")


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """One line naming the first broken field and its rule, e.g. ``trainers.cpu: '1x' is not ...``."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{field}: {msg}{more}" if field else f"{msg}{more}"), field


def _response(err: PaddleCloudError) -> JSONResponse:
    return JSONResponse(status_code=err.http_status, content=err.to_body())


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PaddleCloudError)
    async def _platform(_req: Request, exc: PaddleCloudError) -> JSONResponse:
        return _response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(req: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = validation_message(exc)
        code = ErrorCode.INVALID_SPEC if req.url.path.endswith("/jobs") else ErrorCode.INVALID_REQUEST
        return _response(InvalidInput(message, code=code, field=field))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = ErrorCode.INVALID_REQUEST
        err = PaddleCloudError(str(exc.detail), code=code)
        err.http_status = exc.status_code
        return _response(err)

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _response(ServerError(f"internal error: {type(exc).__name__}; see the server log"))
