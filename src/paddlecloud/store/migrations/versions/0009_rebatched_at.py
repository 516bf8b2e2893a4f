"""Adaptive batch size: when a resize last set each adaptive job's batch (the re-batch cooldown).

A batch-only resize no longer sets ``jobs.resized_at`` (it restarts nothing, so it must not start
the grow cooldown); the re-batch cooldown reads this column instead. NULL: never re-batched.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("adaptive_states", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rebatched_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("adaptive_states", schema=None) as batch_op:
        batch_op.drop_column("rebatched_at")
