"""Request dependencies: the platform held by the app, and the caller's identity from its token.

``Caller``: a user token (every route). ``TaskCaller``: a user token or a job token (``pcj_…``, the
task routes only; it names one job, see ``controller/jobtokens.py``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from paddlecloud.controller import Identity, JobIdentity, Platform, is_job_token

__all__ = ["Caller", "PlatformDep", "TaskCaller", "get_platform"]


def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _identity(request: Request, platform: PlatformDep) -> Identity:
    return platform.authenticate(_bearer(request))


def _task_caller(request: Request, platform: PlatformDep) -> Identity | JobIdentity:
    token = _bearer(request)
    if token is not None and is_job_token(token):
        return platform.tasks.authenticate(token)
    return platform.authenticate(token)


Caller = Annotated[Identity, Depends(_identity)]
TaskCaller = Annotated[Identity | JobIdentity, Depends(_task_caller)]
