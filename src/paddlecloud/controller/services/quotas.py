"""Admins change a user's limits (``PATCH /users/{name}/quota``, ``paddlecloud quota set``): storage,
CPU, memory, GPUs. What the limits are, as the scheduler and the file service read them:
``model.limits``."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import ErrorCode, InvalidInput, NotFound
from paddlecloud.api.file_requests import QuotaUpdate
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.core.quantity import QuantityError, parse_cpu, parse_memory
from paddlecloud.store.tables import UserRow

__all__ = ["set_storage_quota", "update_quotas"]


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


def set_storage_quota(session: Session, user: str, limit: int | None) -> None:
    """``limit`` None: back to the platform default."""
    row = session.scalar(select(UserRow).where(UserRow.name == user))
    if row is None:
        raise NotFound(f"user {user!r} not found", code=ErrorCode.USER_NOT_FOUND)
    row.storage_quota = limit
    session.commit()
