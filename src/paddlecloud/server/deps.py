"""Request dependencies: the platform held by the app, and the caller's identity from its token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from paddlecloud.controller import Identity, Platform

__all__ = ["Caller", "PlatformDep", "get_platform"]


def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


def _identity(request: Request, platform: PlatformDep) -> Identity:
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    return platform.authenticate(token)


Caller = Annotated[Identity, Depends(_identity)]
