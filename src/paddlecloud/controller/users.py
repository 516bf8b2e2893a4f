"""Users and API tokens. Tokens are random (``secrets``) and stored only as their SHA-256.

Managing users (list, create, issue a new token) is for admins: :func:`require_admin` is the one
place that decides, and every admin-only operation (here and in ``JobService``) calls it first, so a
non-admin learns nothing (not even whether a user exists) from an admin endpoint.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, NotFound, Unauthorized
from paddlecloud.api.models import TokenView, UserCreate, UserList, UserView
from paddlecloud.controller.config import ComputeLimits
from paddlecloud.core.clock import Clock
from paddlecloud.store.tables import UserRow

__all__ = ["Identity", "UserDirectory", "require_admin"]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> str:
    return "pc_" + secrets.token_urlsafe(32)


class Identity:
    __slots__ = ("is_admin", "name")

    def __init__(self, name: str, is_admin: bool) -> None:
        self.name = name
        self.is_admin = is_admin


def require_admin(who: Identity, what: str) -> None:
    """Raise ``Forbidden`` (code ``forbidden``) unless ``who`` is an admin; ``what`` names the action."""
    if not who.is_admin:
        raise Forbidden(f"{what} is for admins only; user {who.name!r} is not one", code=ErrorCode.FORBIDDEN)


class UserDirectory:
    def __init__(self, clock: Clock, default_quota: ComputeLimits | None = None) -> None:
        self.clock = clock
        self.default_quota = default_quota or ComputeLimits()

    def _new_row(self, name: str, token: str, admin: bool) -> UserRow:
        """A new user; non-admins start with the platform's default compute quota."""
        q = ComputeLimits() if admin else self.default_quota
        return UserRow(
            name=name, token_sha256=_hash(token), is_admin=admin, created_at=self.clock.now(),
            cpu_quota_m=q.cpu_m, memory_quota=q.memory, gpu_quota=q.gpu,
        )  # fmt: skip

    def create_or_rotate(self, session: Session, name: str, *, admin: bool = False) -> str:
        """Create ``name`` (or give it a new token); returns the token, which is never stored.

        The platform's own bootstrap (``paddlecloud up``, tests); requests go through :meth:`create`
        and :meth:`rotate`, which check the caller."""
        token = _new_token()
        row = session.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            session.add(self._new_row(name, token, admin))
        else:
            row.token_sha256 = _hash(token)
        session.commit()
        return token

    def authenticate(self, session: Session, token: str | None) -> Identity:
        if not token:
            raise Unauthorized("no API token: run `paddlecloud up` (local) or `paddlecloud login`")
        row = session.scalar(select(UserRow).where(UserRow.token_sha256 == _hash(token)))
        if row is None:
            raise Unauthorized("API token not recognised: it may have been rotated; log in again")
        return Identity(row.name, row.is_admin)

    # -- requests -------------------------------------------------------------------------------

    def whoami(self, who: Identity) -> UserView:
        return UserView(name=who.name, is_admin=who.is_admin)

    def list_users(self, session: Session, who: Identity) -> UserList:
        require_admin(who, "listing users")
        rows = session.scalars(select(UserRow).order_by(UserRow.name)).all()
        return UserList(items=[UserView(name=r.name, is_admin=r.is_admin) for r in rows])

    def create(self, session: Session, who: Identity, spec: UserCreate) -> TokenView:
        """A new user and its first token (returned once). ``user_exists`` if the name is taken."""
        require_admin(who, "creating users")
        exists = Conflict(
            f"user {spec.name!r} already exists; issue a new token with "
            f"`paddlecloud admin rotate-token {spec.name}`",
            code=ErrorCode.USER_EXISTS,
            field="name",
        )
        if session.scalar(select(UserRow.id).where(UserRow.name == spec.name)) is not None:
            raise exists
        token = _new_token()
        session.add(self._new_row(spec.name, token, spec.admin))
        try:
            session.commit()
        except IntegrityError:  # created concurrently
            session.rollback()
            raise exists from None
        return TokenView(name=spec.name, token=token)

    def rotate(self, session: Session, who: Identity, name: str) -> TokenView:
        """Give ``name`` a new token; the old one stops working at once. ``user_not_found`` if missing."""
        require_admin(who, "issuing tokens")
        row = session.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            raise NotFound(
                f"user {name!r} not found (see: paddlecloud admin users)", code=ErrorCode.USER_NOT_FOUND
            )
        token = _new_token()
        row.token_sha256 = _hash(token)
        session.commit()
        return TokenView(name=name, token=token)
