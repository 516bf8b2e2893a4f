"""SQLAlchemy 2 ORM tables: users, jobs, workers, events; job tokens, task queues and tasks; the
state and recent reports of adaptive-batch jobs; SampleSets and their SampleJobs.

Times are float seconds since the epoch from the controller's injected clock. The schema is created
and upgraded only by Alembic (``store/migrations``); keep both in step.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "AdaptiveReportRow",
    "AdaptiveRow",
    "Base",
    "EventRow",
    "JobRow",
    "JobTokenRow",
    "RegistryLoginRow",
    "SampleJobRow",
    "SampleSetRow",
    "TaskQueueRow",
    "TaskRow",
    "UserRow",
    "WorkerRow",
]


class Base(DeclarativeBase):
    pass


class UserRow(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    #: PFS storage limit in bytes; None: the platform's default
    storage_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: compute limits for the scheduler (None: unlimited in that dimension)
    cpu_quota_m: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    memory_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    gpu_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)


class RegistryLoginRow(Base):
    """A user's credentials for one container registry (``paddlecloud image login``): the password
    encrypted with the server's key (``controller.model.registry_logins``), never listed."""

    __tablename__ = "registry_logins"
    __table_args__ = (UniqueConstraint("user", "registry", name="uq_registry_logins_user_registry"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(String(63))
    #: host[:port] of the registry (the column "registry"; ``registry`` itself is SQLAlchemy's)
    registry_name: Mapped[str] = mapped_column("registry", String(255))
    username: Mapped[str] = mapped_column(String(255))
    secret: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("user", "name", name="uq_jobs_user_name"),
        Index("ix_jobs_phase", "phase"),
        Index("ix_jobs_user_submitted", "user", "submitted_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(63))
    #: PFS path of the job's package archive
    package_id: Mapped[str] = mapped_column(Text)
    framework: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    phase: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    placement: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    output_dir: Mapped[str] = mapped_column(Text, default="")
    #: how many times the job was started (a preempted job is started again)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: service received so far, trainer-seconds (GPU-seconds for GPU jobs), up to ``accounted_at``
    attained: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    accounted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: when the scheduler last changed its trainer count (None: never)
    resized_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    workers: Mapped[list[WorkerRow]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="WorkerRow.id"
    )
    events: Mapped[list[EventRow]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="EventRow.id"
    )
    #: adaptive-batch jobs only (None for the others); loaded with the job in one query per load
    adaptive: Mapped[AdaptiveRow | None] = relationship(
        lazy="selectin", cascade="all, delete-orphan", passive_deletes=True
    )


class WorkerRow(Base):
    __tablename__ = "workers"
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_workers_job_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    role: Mapped[str] = mapped_column(String(16))
    index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str] = mapped_column(String(63), default="")
    endpoint: Mapped[str] = mapped_column(String(255), default="")
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    log_path: Mapped[str] = mapped_column(Text, default="")
    #: why the last run ended as it did (``core.phases.WorkerReason``: "OOMKilled"), and details
    reason: Mapped[str] = mapped_column(String(32), default="")
    message: Mapped[str] = mapped_column(Text, default="")

    job: Mapped[JobRow] = relationship(back_populates="workers")


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Float)
    type: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)

    job: Mapped[JobRow] = relationship(back_populates="events")


class JobTokenRow(Base):
    """A job's API token (given to its workers at each start), stored only as its SHA-256."""

    __tablename__ = "job_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class TaskQueueRow(Base):
    """A job's data task master: settings and the current pass (``controller/services/tasks.py``)."""

    __tablename__ = "task_queues"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    #: the pass in progress, 0-based
    pass_no: Mapped[int] = mapped_column(Integer, default=0)
    num_passes: Mapped[int] = mapped_column(Integer, default=1)
    lease_seconds: Mapped[float] = mapped_column(Float)
    max_failures: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    #: when the last pass ended (None: not yet)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class TaskRow(Base):
    """One task of a task queue and its lease state in the current pass (``core/tasks.py``)."""

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("queue_id", "index", name="uq_tasks_queue_index"),
        Index("ix_tasks_queue_state", "queue_id", "state"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue_id: Mapped[int] = mapped_column(ForeignKey("task_queues.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    length: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    state: Mapped[str] = mapped_column(String(8))
    lease: Mapped[str] = mapped_column(String(64), default="")
    holder: Mapped[str] = mapped_column(String(63), default="")
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    leases: Mapped[int] = mapped_column(Integer, default=0)
    done_passes: Mapped[int] = mapped_column(Integer, default=0)
    done_lease: Mapped[str] = mapped_column(String(64), default="")
    error: Mapped[str] = mapped_column(Text, default="")


class AdaptiveRow(Base):
    """An adaptive-batch job's assignment and what its reports say (``controller/services/adaptive.py``).

    Made at submit; the scheduler's decisions write ``batch_size`` / ``trainers``, the job's reports
    the rest (gradient statistics smoothed by an exponential moving average)."""

    __tablename__ = "adaptive_states"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    #: the global batch assigned now, and the trainer count it was chosen for (0: not admitted yet)
    batch_size: Mapped[int] = mapped_column(Integer)
    trainers: Mapped[int] = mapped_column(Integer, default=0)
    #: reports stored so far (also the version of the cached goodput table), and the last one's time
    reports: Mapped[int] = mapped_column(Integer, default=0)
    last_report_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    grad_sqr: Mapped[float | None] = mapped_column(Float, nullable=True)
    grad_var: Mapped[float | None] = mapped_column(Float, nullable=True)
    lr_gain: Mapped[float | None] = mapped_column(Float, nullable=True)
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: when a resize last set its batch, batch-only or not (the re-batch cooldown; None: never)
    rebatched_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class AdaptiveReportRow(Base):
    """One stored step-time report of an adaptive job (the last ``KEEP_REPORTS`` are kept)."""

    __tablename__ = "adaptive_reports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Float)
    replicas: Mapped[int] = mapped_column(Integer)
    #: the nodes its trainers were on when it arrived
    nodes: Mapped[int] = mapped_column(Integer)
    local_bsz: Mapped[float] = mapped_column(Float)
    step_time_s: Mapped[float] = mapped_column(Float)


class SampleSetRow(Base):
    """One user's SampleSet (``controller/services/samplesets.py``): what was asked, and what the backend
    reported last (files, bytes, per-node caches). A deleted one keeps its row (``deleting``) until
    the backend has unmounted and removed it; the name stays taken until then."""

    __tablename__ = "samplesets"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_samplesets_owner_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(63), index=True)
    name: Mapped[str] = mapped_column(String(63))
    #: the PFS folder it is synced from (/pfs/...)
    source: Mapped[str] = mapped_column(Text)
    #: per-node cache cap, bytes
    cache_size: Mapped[int] = mapped_column(BigInteger)
    #: the nodes asked for (None: every node)
    nodes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    phase: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    files: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    #: sum over the nodes (counted against the owner's storage quota)
    cached_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    #: [{"node", "mounted", "cached_bytes", "message"}] as last reported
    node_caches: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    deleting: Mapped[bool] = mapped_column(Boolean, default=False)


class SampleJobRow(Base):
    """One SampleJob (sync, warmup, clear, rmr) of a SampleSet; they run one at a time, in id order."""

    __tablename__ = "sample_jobs"
    __table_args__ = (Index("ix_sample_jobs_set_phase", "sampleset_id", "phase"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sampleset_id: Mapped[int] = mapped_column(ForeignKey("samplesets.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text, default="")
    phase: Mapped[str] = mapped_column(String(16))
    done: Mapped[int] = mapped_column(BigInteger, default=0)
    total: Mapped[int] = mapped_column(BigInteger, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
