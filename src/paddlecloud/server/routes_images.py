"""``/api/v1`` container-registry login routes: a user's own credentials for pulling images.

Thin: what is checked and stored lives in ``controller.services.registries``.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from paddlecloud.api.images import RegistryLogin, RegistryLoginList
from paddlecloud.server.deps import Caller, PlatformDep

__all__ = ["router"]

router = APIRouter()


@router.put("/registries/{registry}/login", status_code=204, tags=["images"])
def login(registry: str, body: RegistryLogin, who: Caller, platform: PlatformDep) -> Response:
    """Store (or replace) your credentials for ``registry``: your jobs' pulls from it use them."""
    platform.registries.login(who, registry, body)
    return Response(status_code=204)


@router.delete("/registries/{registry}/login", status_code=204, tags=["images"])
def logout(registry: str, who: Caller, platform: PlatformDep) -> Response:
    """Forget your credentials for ``registry``."""
    platform.registries.logout(who, registry)
    return Response(status_code=204)


@router.get("/registries", response_model=RegistryLoginList, tags=["images"])
def logins(who: Caller, platform: PlatformDep) -> RegistryLoginList:
    """The registries you are logged in to (never a password)."""
    return platform.registries.logins(who)
