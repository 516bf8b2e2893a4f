"""Unauthenticated ``/api/v1`` routes: health and version (with the backend's capabilities)."""

from __future__ import annotations

from fastapi import APIRouter

from paddlecloud._version import API_VERSION, MIN_CLIENT_API_VERSION, __version__
from paddlecloud.api.models import VersionView
from paddlecloud.server.deps import PlatformDep

__all__ = ["router"]

router = APIRouter()


@router.get("/health", tags=["system"])
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/version", response_model=VersionView, tags=["system"])
def version(platform: PlatformDep) -> VersionView:
    backend = platform.ctx.backend
    return VersionView(
        version=__version__,
        api_version=API_VERSION,
        min_client_api_version=MIN_CLIENT_API_VERSION,
        backend=backend.name,
        capabilities=sorted(str(c) for c in backend.capabilities),
        max_package_bytes=platform.ctx.config.max_package_bytes,
        datacenter=platform.ctx.config.datacenter,
    )
