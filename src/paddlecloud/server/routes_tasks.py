"""``/api/v1/jobs/{name}/tasks``: a job's data task master. Thin: parse, call the TaskService.

Trainers authenticate with their job's token (``PADDLECLOUD_JOB_TOKEN``) and may act only on that
job; users (owner, admins with ``?user=``) with their own token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from paddlecloud.api.tasks import MAX_PAGE, PAGE, AckRequest, LeaseRequest, TaskLease, TaskList, TaskView
from paddlecloud.controller.services.tasks import TaskPage
from paddlecloud.core.tasks import TaskState
from paddlecloud.server.deps import PlatformDep, TaskCaller

__all__ = ["router"]

router = APIRouter()

UserParam = Annotated[str | None, Query(description="admins: the job's owner (default: the caller)")]


LimitParam = Annotated[int, Query(ge=0, le=MAX_PAGE, description="tasks per page (0: only the summary)")]
AfterParam = Annotated[
    int | None, Query(ge=0, description="list tasks after this index (the last page's next_after)")
]


@router.get("/jobs/{name}/tasks", response_model=TaskList, tags=["tasks"])
def list_tasks(
    name: str, who: TaskCaller, platform: PlatformDep, user: UserParam = None, state: TaskState | None = None,
    limit: LimitParam = PAGE, after: AfterParam = None,
) -> TaskList:  # fmt: skip
    """The task master's summary (pass, counts over every task) and one page of its tasks in index
    order (only those in ``state`` if given); ``next_after`` is set when more follow."""
    page = TaskPage(limit=limit, after=after, state=str(state) if state else None)
    return platform.tasks.status(who, name, user, page)


@router.post("/jobs/{name}/tasks/lease", response_model=TaskLease, tags=["tasks"])
def lease_task(
    name: str, body: LeaseRequest, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> TaskLease:
    """A task under the caller's lease id, or ``wait`` (ask again in ``retry_after`` s), or ``finished``."""
    return platform.tasks.lease(who, name, body, user)


@router.post("/jobs/{name}/tasks/{index}/done", response_model=TaskView, tags=["tasks"])
def task_done(
    name: str, index: int, body: AckRequest, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> TaskView:
    """Acknowledge the task done (``lease_lost`` if the lease is no longer the caller's)."""
    return platform.tasks.done(who, name, index, body, user)


@router.post("/jobs/{name}/tasks/{index}/fail", response_model=TaskView, tags=["tasks"])
def task_fail(
    name: str, index: int, body: AckRequest, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> TaskView:
    """Give the task back as failed: handed out again, or failed for good at the failure limit."""
    return platform.tasks.fail(who, name, index, body, user)


@router.post("/jobs/{name}/tasks/{index}/renew", response_model=TaskView, tags=["tasks"])
def task_renew(
    name: str, index: int, body: AckRequest, who: TaskCaller, platform: PlatformDep, user: UserParam = None
) -> TaskView:
    """Extend the caller's lease by the task master's lease time."""
    return platform.tasks.renew(who, name, index, body, user)
