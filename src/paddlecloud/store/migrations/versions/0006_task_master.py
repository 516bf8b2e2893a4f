"""Data task master: job tokens, one task queue per job, its tasks and their leases.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_sha256"),
    )
    with op.batch_alter_table("job_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_tokens_job_id"), ["job_id"], unique=False)

    op.create_table(
        "task_queues",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("pass_no", sa.Integer(), nullable=False),
        sa.Column("num_passes", sa.Integer(), nullable=False),
        sa.Column("lease_seconds", sa.Float(), nullable=False),
        sa.Column("max_failures", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id"),
    )

    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("lease", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=63), nullable=False),
        sa.Column("lease_expires", sa.Float(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("leases", sa.Integer(), nullable=False),
        sa.Column("done_passes", sa.Integer(), nullable=False),
        sa.Column("done_lease", sa.String(length=64), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["queue_id"], ["task_queues.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("queue_id", "index", name="uq_tasks_queue_index"),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_queue_state", ["queue_id", "state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_queue_state")
    op.drop_table("tasks")
    op.drop_table("task_queues")
    with op.batch_alter_table("job_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_tokens_job_id"))
    op.drop_table("job_tokens")
