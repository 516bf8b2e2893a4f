"""Per-user storage limits: the user's own ``storage_quota`` or the platform default."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import ErrorCode, NotFound
from paddlecloud.store.tables import UserRow

__all__ = ["set_storage_quota", "storage_quota"]


def storage_quota(session: Session, user: str, default: int | None) -> int | None:
    row = session.scalar(select(UserRow.storage_quota).where(UserRow.name == user))
    return default if row is None else int(row)


def set_storage_quota(session: Session, user: str, limit: int | None) -> None:
    """``limit`` None: back to the platform default."""
    row = session.scalar(select(UserRow).where(UserRow.name == user))
    if row is None:
        raise NotFound(f"user {user!r} not found", code=ErrorCode.USER_NOT_FOUND)
    row.storage_quota = limit
    session.commit()
