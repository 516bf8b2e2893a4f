"""Adaptive batch size: each adaptive job's assignment and smoothed statistics, its recent reports.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adaptive_states",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("trainers", sa.Integer(), nullable=False),
        sa.Column("reports", sa.Integer(), nullable=False),
        sa.Column("last_report_at", sa.Float(), nullable=True),
        sa.Column("grad_sqr", sa.Float(), nullable=True),
        sa.Column("grad_var", sa.Float(), nullable=True),
        sa.Column("lr_gain", sa.Float(), nullable=True),
        sa.Column("step_time_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id"),
    )
    op.create_table(
        "adaptive_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("local_bsz", sa.Float(), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("adaptive_reports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_adaptive_reports_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("adaptive_reports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_adaptive_reports_job_id"))
    op.drop_table("adaptive_reports")
    op.drop_table("adaptive_states")
