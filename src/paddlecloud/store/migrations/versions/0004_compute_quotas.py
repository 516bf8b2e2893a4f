"""Per-user compute quotas (cpu, memory, gpu) for the scheduler.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cpu_quota_m", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("memory_quota", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("gpu_quota", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("gpu_quota")
        batch_op.drop_column("memory_quota")
        batch_op.drop_column("cpu_quota_m")
