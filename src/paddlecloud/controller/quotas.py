"""Per-user storage limits: the user's own ``storage_quota`` or the platform default."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import ErrorCode, InvalidInput, NotFound
from paddlecloud.controller.users import Identity, require_admin
from paddlecloud.core.quantity import QuantityError, parse_memory
from paddlecloud.store.tables import UserRow

__all__ = ["set_storage_quota", "storage_quota", "update_storage_quota"]


def storage_quota(session: Session, user: str, default: int | None) -> int | None:
    row = session.scalar(select(UserRow.storage_quota).where(UserRow.name == user))
    return default if row is None else int(row)


def update_storage_quota(session: Session, who: Identity, user: str, storage: str | None) -> None:
    """Admins set a user's storage limit from a quantity (``500Gi``); None restores the default."""
    require_admin(who, "set quotas")
    limit = None
    if storage is not None:
        try:
            limit = parse_memory(storage)
        except QuantityError as exc:
            raise InvalidInput(f"storage: {exc}", field="storage") from None
    set_storage_quota(session, user, limit)


def set_storage_quota(session: Session, user: str, limit: int | None) -> None:
    """``limit`` None: back to the platform default."""
    row = session.scalar(select(UserRow).where(UserRow.name == user))
    if row is None:
        raise NotFound(f"user {user!r} not found", code=ErrorCode.USER_NOT_FOUND)
    row.storage_quota = limit
    session.commit()
