"""Alembic migrations of the PaddleCloud schema (applied by ``store.db.upgrade`` at start-up)."""
