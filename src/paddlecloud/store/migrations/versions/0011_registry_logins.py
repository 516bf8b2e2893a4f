"""Registry logins: a user's credentials for a container registry (``paddlecloud image login``),
the password encrypted with the server's key.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_logins",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user", sa.String(63), nullable=False),
        sa.Column("registry", sa.String(255), nullable=False),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("user", "registry", name="uq_registry_logins_user_registry"),
    )


def downgrade() -> None:
    op.drop_table("registry_logins")
