"""The SDK's view of a job's data task master: ``client.tasks`` (``paddlecloud get tasks``).

    client.tasks.status("fit-a-line")            GET  /jobs/{name}/tasks        summary + one page
    client.tasks.all("fit-a-line")               the same, following every page
    client.tasks.lease(job, lease_id, worker)    POST /jobs/{name}/tasks/lease
    client.tasks.done / fail / renew(job, index, lease_id)

Users read their jobs' task state with their own token. The lease calls are what a trainer does;
inside a job use the standard-library client ``paddlecloud.runtime.tasks()`` instead (it renews
leases and retries), this one serves tools and tests (a ``Client`` built with a job token).
"""

from __future__ import annotations

from typing import Any

from paddlecloud.api.tasks import MAX_PAGE, PAGE, TaskLease, TaskList, TaskView
from paddlecloud.client.session import Session

__all__ = ["TaskMaster"]


def _user(user: str | None) -> dict[str, Any]:
    return {"user": user} if user else {}


class TaskMaster:
    def __init__(self, session: Session) -> None:
        self._session = session

    def status(
        self, job: str, *, user: str | None = None, state: str | None = None, limit: int = PAGE,
        after: int | None = None,
    ) -> TaskList:  # fmt: skip
        """The summary (pass, counts) and one page of tasks: at most ``limit`` (0: none), with an
        index above ``after``, only those in ``state`` if given; ``next_after`` is where the next
        page starts (None: this was the last)."""
        params = _user(user) | ({"state": state} if state else {}) | {"limit": limit}
        if after is not None:
            params["after"] = after
        return TaskList.model_validate_json(
            self._session.request("GET", f"/jobs/{job}/tasks", params=params).content
        )

    def all(
        self, job: str, *, user: str | None = None, state: str | None = None, page: int = MAX_PAGE
    ) -> TaskList:
        """Every task, page after page (the summary is the first page's; the pages are read one
        after another, so a running job's tasks may move between them)."""
        first = self.status(job, user=user, state=state, limit=page)
        items, after = list(first.items), first.next_after
        while after is not None:
            more = self.status(job, user=user, state=state, limit=page, after=after)
            items.extend(more.items)
            after = more.next_after
        return first.model_copy(update={"items": items, "next_after": None})

    def lease(self, job: str, lease: str, worker: str = "", *, user: str | None = None) -> TaskLease:
        r = self._session.request(
            "POST", f"/jobs/{job}/tasks/lease", json={"lease": lease, "worker": worker}, params=_user(user)
        )
        return TaskLease.model_validate_json(r.content)

    def _ack(self, job: str, index: int, what: str, body: dict[str, str], user: str | None) -> TaskView:
        r = self._session.request("POST", f"/jobs/{job}/tasks/{index}/{what}", json=body, params=_user(user))
        return TaskView.model_validate_json(r.content)

    def done(self, job: str, index: int, lease: str, *, user: str | None = None) -> TaskView:
        return self._ack(job, index, "done", {"lease": lease}, user)

    def fail(self, job: str, index: int, lease: str, error: str = "", *, user: str | None = None) -> TaskView:
        return self._ack(job, index, "fail", {"lease": lease, "error": error}, user)

    def renew(self, job: str, index: int, lease: str, *, user: str | None = None) -> TaskView:
        return self._ack(job, index, "renew", {"lease": lease}, user)
