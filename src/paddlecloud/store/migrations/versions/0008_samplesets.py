"""SampleSets (data sets cached on the nodes, JuiceFS) and their SampleJobs.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "samplesets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("cache_size", sa.BigInteger(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=True),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("files", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("cached_bytes", sa.BigInteger(), nullable=False),
        sa.Column("node_caches", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("deleting", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "name", name="uq_samplesets_owner_name"),
    )
    with op.batch_alter_table("samplesets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_samplesets_owner"), ["owner"], unique=False)
    op.create_table(
        "sample_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sampleset_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("done", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["sampleset_id"], ["samplesets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sample_jobs", schema=None) as batch_op:
        batch_op.create_index("ix_sample_jobs_set_phase", ["sampleset_id", "phase"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sample_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_sample_jobs_set_phase")
    op.drop_table("sample_jobs")
    with op.batch_alter_table("samplesets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_samplesets_owner"))
    op.drop_table("samplesets")
