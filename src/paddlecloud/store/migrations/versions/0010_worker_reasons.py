"""Workers: why a run ended as it did beyond its exit code (``OOMKilled``), and the details.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason", sa.String(32), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("message", sa.Text(), nullable=False, server_default=""))
    # the defaults only filled the existing rows: the ORM sets both on every insert
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.alter_column("reason", server_default=None)
        batch_op.alter_column("message", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_column("message")
        batch_op.drop_column("reason")
