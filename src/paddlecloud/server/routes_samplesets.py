"""``/api/v1/samplesets`` routes: SampleSets and their SampleJobs. Thin: parse, call the
SampleSetService (``controller/services/samplesets.py``), return a view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from paddlecloud.api.samplesets import (
    SampleJobList,
    SampleJobRequest,
    SampleJobView,
    SampleSetList,
    SampleSetSpec,
    SampleSetView,
)
from paddlecloud.server.deps import Caller, PlatformDep

__all__ = ["router"]

router = APIRouter()


@router.post("/samplesets", status_code=201, response_model=SampleSetView, tags=["samplesets"])
def create_sampleset(spec: SampleSetSpec, who: Caller, platform: PlatformDep) -> SampleSetView:
    return platform.samplesets.create(who, spec)


@router.get("/samplesets", response_model=SampleSetList, tags=["samplesets"])
def list_samplesets(
    who: Caller,
    platform: PlatformDep,
    all: Annotated[bool, Query(description="admins: every user's SampleSets")] = False,
) -> SampleSetList:
    return SampleSetList(items=platform.samplesets.list_all(who, all_users=all))


@router.get("/samplesets/{name}", response_model=SampleSetView, tags=["samplesets"])
def get_sampleset(name: str, who: Caller, platform: PlatformDep) -> SampleSetView:
    return platform.samplesets.get(who, name)


@router.delete("/samplesets/{name}", status_code=202, response_model=SampleSetView, tags=["samplesets"])
def delete_sampleset(name: str, who: Caller, platform: PlatformDep) -> SampleSetView:
    return platform.samplesets.delete(who, name)


@router.post("/samplesets/{name}/jobs", status_code=202, response_model=SampleJobView, tags=["samplesets"])
def add_sample_job(name: str, req: SampleJobRequest, who: Caller, platform: PlatformDep) -> SampleJobView:
    return platform.samplesets.add_job(who, name, req)


@router.get("/samplesets/{name}/jobs", response_model=SampleJobList, tags=["samplesets"])
def list_sample_jobs(name: str, who: Caller, platform: PlatformDep) -> SampleJobList:
    return SampleJobList(items=platform.samplesets.jobs(who, name))
