"""``/api/v1`` user routes: who am I, and (admins) list users, create one, issue a new token, grant
or revoke admin, delete one.

Thin: the admin check and every decision live in ``controller.services.users``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from paddlecloud.api.file_requests import QuotaUpdate
from paddlecloud.api.models import TokenView, UserCreate, UserList, UserView
from paddlecloud.api.users import AdminUpdate, UserDeleted
from paddlecloud.controller.services.quotas import update_quotas
from paddlecloud.server.deps import Caller, PlatformDep

__all__ = ["router"]

router = APIRouter()


@router.get("/whoami", response_model=UserView, tags=["users"])
def whoami(who: Caller, platform: PlatformDep) -> UserView:
    """The user the request's token belongs to."""
    return platform.users.whoami(who)


@router.get("/users", response_model=UserList, tags=["users"])
def list_users(who: Caller, platform: PlatformDep) -> UserList:
    """Every user (admins only)."""
    with platform.ctx.session() as s:
        return platform.users.list_users(s, who)


@router.post("/users", status_code=201, response_model=TokenView, tags=["users"])
def create_user(spec: UserCreate, who: Caller, platform: PlatformDep) -> TokenView:
    """Create a user (admins only); the answer holds its API token, shown this once."""
    with platform.ctx.session() as s:
        return platform.users.create(s, who, spec)


@router.put("/users/{name}/quota", status_code=204, tags=["users"])
def set_quota(name: str, update: QuotaUpdate, who: Caller, platform: PlatformDep) -> Response:
    """Set a user's quotas (admins only): the fields given change (see QuotaUpdate)."""
    with platform.ctx.session() as s:
        update_quotas(s, who, name, update)
    return Response(status_code=204)


@router.post("/users/{name}/token", response_model=TokenView, tags=["users"])
def rotate_token(name: str, who: Caller, platform: PlatformDep) -> TokenView:
    """Issue a new API token for a user (admins only); the old one stops working at once."""
    with platform.ctx.session() as s:
        return platform.users.rotate(s, who, name)


@router.put("/users/{name}/admin", response_model=UserView, tags=["users"])
def set_admin(name: str, update: AdminUpdate, who: Caller, platform: PlatformDep) -> UserView:
    """Grant or revoke admin status (admins only; never your own revocation, never the last admin)."""
    with platform.ctx.session() as s:
        return platform.users.set_admin(s, who, name, update.admin)


@router.delete("/users/{name}", response_model=UserDeleted, tags=["users"])
def delete_user(
    name: str,
    who: Caller,
    platform: PlatformDep,
    force: Annotated[
        bool, Query(description="kill the user's active jobs (else: 409 user_has_jobs)")
    ] = False,
    delete_files: Annotated[
        bool, Query(description="delete the user's PFS home too (default: kept)")
    ] = False,
) -> UserDeleted:
    """Delete a user (admins only, never yourself): their jobs are removed, their token stops working."""
    return platform.delete_user(who, name, force=force, delete_files=delete_files)
