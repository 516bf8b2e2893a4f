"""Request dependencies: the platform held by the app, and the caller's identity from its token.

``Caller``: a user token (every route). ``TaskCaller``: a user token or a job token (``pcj_…``, the
task routes only; it names one job, see ``controller/model/jobtokens.py``). ``BearerToken``: the token as
sent, unchecked (``/metrics``, whose access rule is the platform's).

``Caller`` is resolved on the event loop when the platform knows the token from memory, and in the
thread pool (a database read) only when it does not: a request then costs no thread hop for its
authentication.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from paddlecloud.controller import Identity, JobIdentity, Platform, is_job_token

__all__ = ["BearerToken", "Caller", "PlatformDep", "TaskCaller", "get_platform", "memory_or_thread"]

T = TypeVar("T")


async def memory_or_thread(memory: Callable[[], T | None], build: Callable[[], T]) -> T:
    """``memory()`` when it has the answer (on the event loop, no thread hop), else ``build()`` in
    the thread pool (it reads the database)."""
    known = memory()
    if known is not None:
        return known
    return await run_in_threadpool(build)


async def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


async def _identity(request: Request, platform: PlatformDep) -> Identity:
    token = _bearer(request)
    return await memory_or_thread(
        lambda: platform.cached_identity(token), lambda: platform.authenticate(token)
    )


def _task_caller(request: Request, platform: PlatformDep) -> Identity | JobIdentity:
    token = _bearer(request)
    if token is not None and is_job_token(token):
        return platform.tasks.authenticate(token)
    return platform.authenticate(token)


BearerToken = Annotated[str | None, Depends(_bearer)]
Caller = Annotated[Identity, Depends(_identity)]
TaskCaller = Annotated[Identity | JobIdentity, Depends(_task_caller)]
