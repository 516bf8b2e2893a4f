"""``/api/v1/jobs/{name}/adaptive``: an adaptive-batch job's assignment and its reports. Thin: parse,
call the AdaptiveService.

A job's trainers authenticate with its token (``PADDLECLOUD_JOB_TOKEN``) and may act only on that
job; its owner (admins with ``?user=``) may read the state with their own token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from paddlecloud.api.adaptive import AdaptiveReport, AdaptiveState
from paddlecloud.server.deps import PlatformDep, TaskCaller

__all__ = ["router"]

router = APIRouter()

UserParam = Annotated[str | None, Query(description="admins: the job's owner (default: the caller)")]


@router.get("/jobs/{name}/adaptive", response_model=AdaptiveState, tags=["adaptive"])
def adaptive_state(
    name: str, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> AdaptiveState:
    """The job's batch settings, the global batch assigned now and what its reports say."""
    return platform.adaptive.state(who, name, user)


@router.post("/jobs/{name}/adaptive/report", response_model=AdaptiveState, tags=["adaptive"])
def adaptive_report(
    name: str, body: AdaptiveReport, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> AdaptiveState:
    """A trainer's step time and gradient statistics (at most one per job per 5 s is stored); the
    assignment now."""
    return platform.adaptive.report(who, name, body, user)
