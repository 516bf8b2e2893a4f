"""``/api/v1`` job, package, log and quota routes. Thin: parse, call the JobService, return a view."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio.from_thread
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from paddlecloud.api.models import (
    JobDetail,
    JobList,
    JobSpec,
    JobView,
    PackageView,
    QuotaView,
    WorkerList,
)
from paddlecloud.server.deps import Caller, PlatformDep

__all__ = ["router"]

router = APIRouter()

#: ``?user=NAME``: act on that user's job (admins; anyone may name themselves).
UserParam = Annotated[str | None, Query(description="admins: the job's owner (default: the caller)")]


async def _next(it: AsyncIterator[bytes]) -> bytes:
    return await it.__anext__()


def _blocking_chunks(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """Read an async request body from a worker thread, chunk by chunk (never whole in memory)."""
    it = stream.__aiter__()
    while True:
        try:
            chunk: bytes = anyio.from_thread.run(_next, it)
        except StopAsyncIteration:
            return
        if chunk:
            yield chunk


@router.post("/packages", status_code=201, response_model=PackageView, tags=["packages"])
async def upload_package(request: Request, who: Caller, platform: PlatformDep) -> PackageView:
    """Upload a job package (tar.gz) as the raw request body; returns its content id."""

    def receive() -> PackageView:
        with platform.ctx.session() as s:
            return platform.ctx.packages.receive(s, who.name, _blocking_chunks(request.stream()))

    return await run_in_threadpool(receive)


@router.post("/jobs", status_code=201, response_model=JobDetail, tags=["jobs"])
def submit_job(spec: JobSpec, who: Caller, platform: PlatformDep) -> JobDetail:
    return platform.jobs.submit(who, spec)


@router.get("/jobs", response_model=JobList, tags=["jobs"])
def list_jobs(
    who: Caller,
    platform: PlatformDep,
    all: Annotated[bool, Query(description="include finished jobs")] = False,
    all_users: Annotated[bool, Query(description="admins: every user's jobs")] = False,
    user: UserParam = None,
) -> JobList:
    return JobList(items=platform.jobs.list_jobs(who, all_jobs=all, all_users=all_users, user=user))


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
