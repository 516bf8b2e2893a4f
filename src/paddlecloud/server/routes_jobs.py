"""``/api/v1`` job, log and quota routes. Thin: parse, call the JobService, return a view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from paddlecloud.api.history import TrainerHistory
from paddlecloud.api.models import (
    JobDetail,
    JobList,
    JobSpec,
    JobView,
    QuotaView,
    WorkerList,
)
from paddlecloud.controller.services.jobs import JobListQuery
from paddlecloud.server.deps import Caller, PlatformDep, memory_or_thread

__all__ = ["router"]

router = APIRouter()

#: ``?user=NAME``: act on that user's job (admins; anyone may name themselves).
UserParam = Annotated[str | None, Query(description="admins: the job's owner (default: the caller)")]


@router.post("/jobs", status_code=201, response_model=JobDetail, tags=["jobs"])
def submit_job(spec: JobSpec, who: Caller, platform: PlatformDep) -> JobDetail:
    return platform.jobs.submit(who, spec)


@router.get("/jobs", response_model=JobList, tags=["jobs"])
async def list_jobs(
    who: Caller,
    platform: PlatformDep,
    all: Annotated[bool, Query(description="include finished jobs")] = False,
    all_users: Annotated[bool, Query(description="admins: every user's jobs")] = False,
    user: UserParam = None,
) -> Response:
    q = JobListQuery(all_jobs=all, all_users=all_users, user=user)
    body = await memory_or_thread(
        lambda: platform.jobs.cached_list(who, q), lambda: platform.jobs.list_json(who, q)
    )
    return Response(body, media_type="application/json")


@router.get("/jobs/{name}", response_model=JobDetail, tags=["jobs"])
def get_job(name: str, who: Caller, platform: PlatformDep, user: UserParam = None) -> JobDetail:
    return platform.jobs.get(who, name, user)


@router.post("/jobs/{name}/kill", response_model=JobView, tags=["jobs"])
def kill_job(
    name: str,
    who: Caller,
    platform: PlatformDep,
    grace: Annotated[float | None, Query(ge=0, le=3600, description="SIGTERM to SIGKILL, seconds")] = None,
    user: UserParam = None,
) -> JobView:
    return platform.jobs.kill(who, name, grace, user=user)


@router.delete("/jobs/{name}", status_code=204, tags=["jobs"])
def delete_job(name: str, who: Caller, platform: PlatformDep, user: UserParam = None) -> Response:
    """Remove a job from the history (killing it first if it still runs)."""
    platform.jobs.delete(who, name, user)
    return Response(status_code=204)


@router.get("/jobs/{name}/workers", response_model=WorkerList, tags=["jobs"])
def list_workers(name: str, who: Caller, platform: PlatformDep, user: UserParam = None) -> WorkerList:
    return WorkerList(items=platform.jobs.workers(who, name, user))


@router.get("/jobs/{name}/history", response_model=TrainerHistory, tags=["jobs"])
def job_history(name: str, who: Caller, platform: PlatformDep, user: UserParam = None) -> TrainerHistory:
    """The job's trainer count over time (held and running; a point per change)."""
    return platform.jobs.trainers_history(who, name, user)


@router.get("/jobs/{name}/logs", tags=["jobs"], response_class=StreamingResponse)
def job_logs(
    name: str,
    who: Caller,
    platform: PlatformDep,
    worker: str | None = None,
    tail: Annotated[int | None, Query(ge=0)] = None,
    follow: bool = False,
    previous: bool = False,
    user: UserParam = None,
) -> StreamingResponse:
    """Plain-text log lines; with several workers each line starts with ``[worker]``."""
    chunks = platform.jobs.logs(
        who, name, worker=worker, tail=tail, follow=follow, previous=previous, user=user
    )
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")


@router.get("/quota", response_model=QuotaView, tags=["quota"])
def get_quota(who: Caller, platform: PlatformDep) -> QuotaView:
    return platform.jobs.quota(who)
