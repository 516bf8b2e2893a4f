"""Request body limits: a pure ASGI middleware that refuses a body over the limit before reading it.

    request ──▶ BodyLimitMiddleware ──▶ app
                 │ Content-Length > limit: 413 request_too_large, the app is never called
                 │ Transfer-Encoding (chunked): bytes counted as the app reads them; past the limit
                 │   the 413 is sent at once and the app is told the client went away
                 │ neither (a GET): no body, passed through untouched
                 ├ PFS byte uploads (PUT /pfs/file, PUT /pfs/uploads/{id}/{i}): only Content-Length
                 │ against the chunk limit (64 MiB); the routes count what they stream themselves
                 └ the console's small-file uploads (POST /ui/pfs/...): its own larger limit

JSON requests (a job spec, a lease) are small: ``up --max-request-size`` (1 MiB by default) bounds
them, so no request makes the server hold or parse more than that. Nothing is buffered here, and the
upload routes' bodies pass untouched (no per-message work), so transfers keep their speed.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paddlecloud.api import API_PREFIX
from paddlecloud.api.errors import RequestTooLarge
from paddlecloud.api.file_requests import MAX_CHUNK
from paddlecloud.console.pages_pfs import UPLOAD_MAX as CONSOLE_UPLOAD_MAX
from paddlecloud.console.pages_pfs import UPLOAD_PREFIX as CONSOLE_UPLOAD_PREFIX
from paddlecloud.core.quantity import human_bytes

__all__ = ["BodyLimitMiddleware"]

_UPLOADS = (f"{API_PREFIX}/pfs/file", f"{API_PREFIX}/pfs/uploads/")


#: multipart framing around a console upload's file
_FORM_OVERHEAD = 64 << 10

_KINDS = {
    "chunk": ("a PFS upload chunk", "use a resumable upload with smaller chunks (paddlecloud pfs cp does)"),
    "console": ("a console upload", "use `paddlecloud pfs cp` for larger files"),
    "body": (
        "a request body",
        "send less (a long task list belongs in files of the input; large settings in a file of "
        "the package), or ask the operator to raise `paddlecloud up --max-request-size`",
    ),
}


def _too_large(size: str, limit: int, kind: str) -> RequestTooLarge:
    what, hint = _KINDS[kind]
    return RequestTooLarge(f"{what} of {size} is over this server's limit of {human_bytes(limit)}: {hint}")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        """``max_bytes``: the limit of a body other than a PFS upload (``PlatformConfig``)."""
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope["path"])
        upload = scope["method"] == "PUT" and path.startswith(_UPLOADS)
        kind, limit = "body", self.max_bytes
        if upload:
            kind, limit = "chunk", MAX_CHUNK
        elif scope["method"] == "POST" and path.startswith(CONSOLE_UPLOAD_PREFIX):
            kind, limit = "console", max(self.max_bytes, CONSOLE_UPLOAD_MAX + _FORM_OVERHEAD)
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._refuse(_too_large(human_bytes(int(length)), limit, kind), scope, receive, send)
            return
        if upload or length is not None or "transfer-encoding" not in headers:
            # the server delivers no more than Content-Length, and no body without either header
            await self.app(scope, receive, send)
            return
        await self._counted(scope, receive, send, limit, kind)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int, kind: str) -> None:
        """A body without a length: count it as the app reads; past the limit answer 413 at once."""
        seen = 0
        refused = False

        async def counting_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    err = _too_large(f"more than {human_bytes(limit)}", limit, kind)
                    await self._refuse(err, scope, receive, send)
                    return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counting_receive, guarded_send)

    @staticmethod
    async def _refuse(err: RequestTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            status_code=err.http_status, content=err.to_body(), headers={"Connection": "close"}
        )
        await response(scope, receive, send)
