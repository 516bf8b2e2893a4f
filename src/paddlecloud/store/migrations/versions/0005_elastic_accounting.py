"""Live elastic scheduling: start attempts, attained service and the last resize of each job.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("attained", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("accounted_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("resized_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("resized_at")
        batch_op.drop_column("accounted_at")
        batch_op.drop_column("attained")
        batch_op.drop_column("attempts")
