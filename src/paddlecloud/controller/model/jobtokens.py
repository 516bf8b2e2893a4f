"""Job tokens: the credential a job's workers use for their own job's task master, and nothing else.

    Context.launch(row) ──issue()──▶ "pcj_…" ──JobLaunch.api──▶ PADDLECLOUD_JOB_TOKEN in every worker
                        └─ job_tokens row: sha256 only
    request "Authorization: Bearer pcj_…" ──authenticate()──▶ JobIdentity(job id, user, name)

Every start of a job (and every re-adoption after a server restart) issues a fresh random token;
the earlier ones stay valid while the job exists, because its running workers hold them. The rows
go with the job (``ON DELETE CASCADE``). A job token is never accepted where a user token is
expected (its prefix routes it here, and the users table never holds its hash).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Unauthorized
from paddlecloud.store.tables import JobRow, JobTokenRow

__all__ = ["JOB_TOKEN_PREFIX", "JobIdentity", "authenticate_job", "is_job_token", "issue_job_token"]

JOB_TOKEN_PREFIX = "pcj_"


@dataclass(frozen=True)
class JobIdentity:
    """A caller authenticated by a job token: it may act on this one job's tasks only."""

    job_id: int
    user: str
    name: str


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_job_token(token: str | None) -> bool:
    return bool(token) and str(token).startswith(JOB_TOKEN_PREFIX)


def issue_job_token(session: Session, job_id: int, now: float) -> str:
    """A new token for the job; the row is added to ``session`` (the caller commits)."""
    token = JOB_TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(JobTokenRow(job_id=job_id, token_sha256=_hash(token), created_at=now))
    return token


def authenticate_job(session: Session, token: str) -> JobIdentity:
    found = session.execute(
        select(JobRow.id, JobRow.user, JobRow.name)
        .join(JobTokenRow, JobTokenRow.job_id == JobRow.id)
        .where(JobTokenRow.token_sha256 == _hash(token))
    ).first()
    if found is None:
        raise Unauthorized("job token not recognised: its job was removed, or the token is not one of ours")
    return JobIdentity(job_id=found[0], user=found[1], name=found[2])
