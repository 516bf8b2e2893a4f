"""Persistence: SQLAlchemy tables, the database opener and the Alembic migrations."""

from __future__ import annotations

from paddlecloud.store.changes import ChangeCounters
from paddlecloud.store.db import Database, open_database
from paddlecloud.store.tables import Base, EventRow, JobRow, UserRow, WorkerRow

__all__ = [
    "Base",
    "ChangeCounters",
    "Database",
    "EventRow",
    "JobRow",
    "UserRow",
    "WorkerRow",
    "open_database",
]
