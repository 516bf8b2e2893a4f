"""Per-user storage limits: the user's own ``storage_quota`` or the platform default."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import ErrorCode, InvalidInput, NotFound
from paddlecloud.api.file_requests import QuotaUpdate
from paddlecloud.controller.identity import Identity, require_admin
from paddlecloud.core.quantity import QuantityError, parse_cpu, parse_memory
from paddlecloud.core.resources import Resources
from paddlecloud.store.tables import UserRow

__all__ = ["compute_quota", "compute_quotas", "set_storage_quota", "storage_quota", "update_quotas"]


def storage_quota(session: Session, user: str, default: int | None) -> int | None:
    row = session.scalar(select(UserRow.storage_quota).where(UserRow.name == user))
    return default if row is None else int(row)


def _quantity(parse: Callable[[str], int], text: str | None, field: str) -> int | None:
    if text is None:
        return None
    try:
        return parse(text)
    except QuantityError as exc:
        raise InvalidInput(f"{field}: {exc}", field=field) from None


def update_quotas(session: Session, who: Identity, user: str, update: QuotaUpdate) -> None:
    """Admins change the limits named in ``update`` (see QuotaUpdate); others stay."""
    require_admin(who, "set quotas")
    row = session.scalar(select(UserRow).where(UserRow.name == user))
    if row is None:
        raise NotFound(f"user {user!r} not found", code=ErrorCode.USER_NOT_FOUND)
    given = update.model_fields_set
    if "storage" in given:
        row.storage_quota = _quantity(parse_memory, update.storage, "storage")
    if "cpu" in given:
        row.cpu_quota_m = _quantity(parse_cpu, update.cpu, "cpu")
    if "memory" in given:
        row.memory_quota = _quantity(parse_memory, update.memory, "memory")
    if "gpu" in given:
        row.gpu_quota = update.gpu
    session.commit()


_UNLIMITED = 1 << 62


def compute_quota(row: UserRow) -> Resources | None:
    """The user's compute limit for the scheduler; None when no dimension is limited."""
    if row.cpu_quota_m is None and row.memory_quota is None and row.gpu_quota is None:
        return None
    return Resources(
        row.cpu_quota_m if row.cpu_quota_m is not None else _UNLIMITED,
        row.memory_quota if row.memory_quota is not None else _UNLIMITED,
        row.gpu_quota if row.gpu_quota is not None else _UNLIMITED,
    )


def compute_quotas(session: Session) -> dict[str, Resources]:
    """Every user with a compute limit."""
    out = {}
    for row in session.scalars(select(UserRow)):
        q = compute_quota(row)
        if q is not None:
            out[row.name] = q
    return out


def set_storage_quota(session: Session, user: str, limit: int | None) -> None:
    """``limit`` None: back to the platform default."""
    row = session.scalar(select(UserRow).where(UserRow.name == user))
    if row is None:
        raise NotFound(f"user {user!r} not found", code=ErrorCode.USER_NOT_FOUND)
    row.storage_quota = limit
    session.commit()
