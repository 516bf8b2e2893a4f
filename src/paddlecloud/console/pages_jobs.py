"""The Jobs and Job pages: ``/ui/`` and ``/ui/jobs/NAME``, their live parts, logs and the kill.

    GET  /ui/                     the jobs (waiting first, with reason and message)
    GET  /ui/_jobs?since=V        its live part: 204 while unchanged, else the part again
    GET  /ui/jobs/NAME            one job: state, workers, tasks, outputs, events, chart, logs
    GET  /ui/jobs/NAME/_live      its live part
    GET  /ui/jobs/NAME/log        a worker's log tail as plain text (``X-Log-Live``: more may come)
    POST /ui/jobs/NAME/kill       kill it (CSRF), answer the live part

``?user=NAME`` acts on another user's job (admins), as in the API; another user's job is a 404.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from paddlecloud.console.auth import Session, session, verified_form
from paddlecloud.console.render import fragment, page, unchanged, version
from paddlecloud.console.views import (
    FINISHED_PAGE,
    MAX_FINISHED,
    PHASE_FILTERS,
    JobsFilter,
    LogQuery,
    job_page,
    jobs_page,
    log_text,
)
from paddlecloud.controller import Platform

__all__ = ["platform_of", "router"]

router = APIRouter()

SessionDep = Annotated[Session, Depends(session)]
UserQ = Annotated[str | None, Query(max_length=64, description="admins: another user's")]
SinceQ = Annotated[str | None, Query(max_length=64)]
NameP = Annotated[str, Path(max_length=253)]
PhaseQ = Annotated[str, Query(max_length=16)]
LimitQ = Annotated[int, Query(ge=1, le=MAX_FINISHED)]
WorkerQ = Annotated[str, Query(min_length=1, max_length=64)]
TailQ = Annotated[int, Query(ge=1, le=5000)]

#: tables whose writes change the Jobs page / a Job page
_JOBS_TABLES = ("jobs", "workers")
_JOB_TABLES = ("jobs", "workers", "events", "tasks", "task_queues")


def platform_of(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


def _gen(request: Request, tables: tuple[str, ...]) -> int:
    return platform_of(request).ctx.db.changes.get(*tables)


# -- Jobs -------------------------------------------------------------------------------------------


def _jobs_ctx(request: Request, sess: Session, f: JobsFilter) -> dict[str, Any]:
    data = jobs_page(platform_of(request), sess.who, f)
    params = {k: v for k, v in (("phase", f.phase), ("user", f.user)) if v}
    if f.limit != FINISHED_PAGE:
        params["limit"] = str(f.limit)
    return {
        "section": "jobs",
        "data": data,
        "f": f,
        "params": params,
        "phases": list(PHASE_FILTERS),
        "who": sess.who,
        "v": version(_gen(request, _JOBS_TABLES)),
        "more": min(MAX_FINISHED, f.limit + FINISHED_PAGE) if data.finished_total > f.limit else 0,
    }


@router.get("/", response_class=HTMLResponse)
def jobs(
    request: Request, sess: SessionDep, phase: PhaseQ = "", user: UserQ = None, limit: LimitQ = FINISHED_PAGE
) -> HTMLResponse:
    f = JobsFilter(phase if phase in PHASE_FILTERS else "", user or "", limit)
    return page(request, sess, "jobs.html", _jobs_ctx(request, sess, f))


@router.get("/_jobs", response_class=HTMLResponse)
async def jobs_live(
    request: Request,
    sess: SessionDep,
    since: SinceQ = None,
    phase: PhaseQ = "",
    user: UserQ = None,
    limit: LimitQ = FINISHED_PAGE,
) -> Response:
    if unchanged(since, version(_gen(request, _JOBS_TABLES))):
        return Response(status_code=204)
    f = JobsFilter(phase if phase in PHASE_FILTERS else "", user or "", limit)
    ctx = await run_in_threadpool(_jobs_ctx, request, sess, f)
    return fragment(request, "_jobs.html", ctx)


# -- one job ----------------------------------------------------------------------------------------


def _job_ctx(
    request: Request, sess: Session, name: str, user: str | None, oob: bool = False
) -> dict[str, Any]:
    """``oob``: the live part also carries the events, swapped in out of band (``hx-swap-oob``)."""
    data = job_page(platform_of(request), sess.who, name, user)
    return {
        "section": "jobs",
        "d": data,
        "job": data.job,
        "user_q": {"user": user} if user else {},
        "who": sess.who,
        "csrf": sess.csrf,
        "v": version(_gen(request, _JOB_TABLES)),
        "chart_src": "",
        "oob": oob,
    }


@router.get("/jobs/{name}", response_class=HTMLResponse)
def job(request: Request, sess: SessionDep, name: NameP, user: UserQ = None) -> HTMLResponse:
    return page(request, sess, "job.html", _job_ctx(request, sess, name, user))


@router.get("/jobs/{name}/_live", response_class=HTMLResponse)
async def job_live(
    request: Request, sess: SessionDep, name: NameP, since: SinceQ = None, user: UserQ = None
) -> Response:
    if unchanged(since, version(_gen(request, _JOB_TABLES))):
        return Response(status_code=204)
    ctx = await run_in_threadpool(_job_ctx, request, sess, name, user, True)
    return fragment(request, "_job_live.html", ctx)


@router.post("/jobs/{name}/kill", response_class=HTMLResponse)
async def kill(request: Request, sess: SessionDep, name: NameP, user: UserQ = None) -> Response:
    await verified_form(request, sess)
    platform = platform_of(request)
    await run_in_threadpool(lambda: platform.jobs.kill(sess.who, name, None, user=user))
    if request.headers.get("hx-request") != "true":  # a plain form: back to the page
        suffix = f"?{urlencode({'user': user})}" if user else ""
        return RedirectResponse(f"/ui/jobs/{quote(name, safe='')}{suffix}", status_code=303)
    ctx = await run_in_threadpool(_job_ctx, request, sess, name, user, True)
    return fragment(request, "_job_live.html", ctx)


@router.get("/jobs/{name}/log", response_class=PlainTextResponse)
def log(
    request: Request,
    sess: SessionDep,
    name: NameP,
    worker: WorkerQ,
    tail: TailQ = 500,
    previous: bool = False,
    user: UserQ = None,
) -> PlainTextResponse:
    """Plain text, never HTML: the browser shows it as text whatever it holds."""
    q = LogQuery(name=name, worker=worker, tail=tail, previous=previous, user=user)
    text, live = log_text(platform_of(request), sess.who, q)
    return PlainTextResponse(
        text,
        headers={
            "X-Log-Live": "1" if live else "0",
            "Content-Security-Policy": "sandbox; default-src 'none'",
        },
    )
