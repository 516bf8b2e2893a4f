"""Job packages live in PFS: drop the content-addressed packages table; package_id holds a PFS path.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("packages")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("package_id", existing_type=sa.String(length=64), type_=sa.Text())


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("package_id", existing_type=sa.Text(), type_=sa.String(length=64))
    op.create_table(
        "packages",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=63), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
