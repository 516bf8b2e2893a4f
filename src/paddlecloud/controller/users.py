"""Users and API tokens. Tokens are random (``secrets``) and stored only as their SHA-256."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Unauthorized
from paddlecloud.core.clock import Clock
from paddlecloud.store.tables import UserRow

__all__ = ["Identity", "UserDirectory"]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Identity:
    __slots__ = ("is_admin", "name")

    def __init__(self, name: str, is_admin: bool) -> None:
        self.name = name
        self.is_admin = is_admin


class UserDirectory:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def create_or_rotate(self, session: Session, name: str, *, admin: bool = False) -> str:
        """Create ``name`` (or give it a new token); returns the token, which is never stored."""
        token = "pc_" + secrets.token_urlsafe(32)
        row = session.scalar(select(UserRow).where(UserRow.name == name))
        if row is None:
            session.add(
                UserRow(name=name, token_sha256=_hash(token), is_admin=admin, created_at=self.clock.now())
            )
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
