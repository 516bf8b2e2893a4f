"""A user's limits as the platform reads them: the scheduler's compute quota (``compute_quota(s)``)
and the storage quota the file service and the disk watch check (``storage_quota``: the user's own
or the platform default). Admins change them through ``services.quotas``.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.core.resources import Resources
from paddlecloud.store.tables import UserRow

__all__ = ["compute_quota", "compute_quotas", "storage_quota"]


def storage_quota(session: Session, user: str, default: int | None) -> int | None:
    row = session.scalar(select(UserRow.storage_quota).where(UserRow.name == user))
    return default if row is None else int(row)


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
