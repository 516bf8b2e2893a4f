"""The Jobs and Job pages: ``/ui/`` and ``/ui/jobs/NAME``, their live parts, logs and the kill.

    GET  /ui/                     the jobs (waiting first, with reason and message)
    GET  /ui/_jobs?since=V        its live part: 204 while unchanged, else the part again
    GET  /ui/jobs/NAME            one job: state, batch size (adaptive: the live assignment), workers,
                                  tasks, outputs, events, chart, logs
    GET  /ui/jobs/NAME/_live      its live part
    GET  /ui/jobs/NAME/log        a worker's log tail as plain text (``X-Log-Live``: more may come)
    POST /ui/jobs/NAME/kill       kill it (CSRF), answer the live part

``?user=NAME`` acts on another user's job (admins), as in the API; another user's job is a 404.
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from paddlecloud.console.auth import Session, session, verified_form
from paddlecloud.console.live import stamp
from paddlecloud.console.render import MEMO, built, fragment, live, page, remembered
from paddlecloud.console.views import (
    FINISHED_PAGE,
    MAX_FINISHED,
    PHASE_FILTERS,
    JobsFilter,
    LogQuery,
    finished_jobs,
    job_page,
    job_users,
    jobs_page,
    log_live,
    log_tail,
    trainer_chart,
    unfinished_jobs,
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
_JOBS_TABLES = ("jobs", "workers", "events", "users")
_JOB_TABLES = ("jobs", "workers", "events", "tasks", "task_queues", "adaptive_states")


def platform_of(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


# -- Jobs -------------------------------------------------------------------------------------------


def _filter(phase: str, user: str | None, limit: int) -> JobsFilter:
    return JobsFilter(phase if phase in PHASE_FILTERS else "", user or "", limit)


def _jobs_data(request: Request, sess: Session, f: JobsFilter) -> dict[str, Any]:
    """What the Jobs page shows (memoised per caller and filter: ``console.live``)."""

    def build() -> dict[str, Any]:
        platform, who = platform_of(request), sess.who
        caller = (who.name, who.is_admin)
        # the history's page changes only with events (a job's end, its removal), the users list
        # with the users table: neither is read again when only a running job's row changed
        ended, _ = MEMO.get_or_build(
            ("jobs-finished", caller, f),
            stamp(platform, ("events",)),
            lambda: finished_jobs(platform, who, f),
        )
        users, _ = MEMO.get_or_build(
            ("users", caller), stamp(platform, ("users",)), lambda: job_users(platform, who)
        )
        data = jobs_page(unfinished_jobs(platform, who, f), ended, users)
        more = min(MAX_FINISHED, f.limit + FINISHED_PAGE) if data.finished_total > f.limit else 0
        return {"data": data, "more": more}

    params = {k: v for k, v in (("phase", f.phase), ("user", f.user)) if v}
    if f.limit != FINISHED_PAGE:
        params["limit"] = str(f.limit)
    fixed = {"section": "jobs", "f": f, "params": params, "phases": list(PHASE_FILTERS), "who": sess.who}
    return {"key": ("jobs", sess.who.name, sess.who.is_admin, f), "build": build, "fixed": fixed}


@router.get("/", response_class=HTMLResponse)
def jobs(
    request: Request, sess: SessionDep, phase: PhaseQ = "", user: UserQ = None, limit: LimitQ = FINISHED_PAGE
) -> HTMLResponse:
    part = _jobs_data(request, sess, _filter(phase, user, limit))
    ctx = built(request, part["key"], _JOBS_TABLES, part["build"])
    return page(request, sess, "jobs.html", {**part["fixed"], **ctx})


@router.get("/_jobs", response_class=HTMLResponse)
async def jobs_live(
    request: Request,
    sess: SessionDep,
    since: SinceQ = None,
    phase: PhaseQ = "",
    user: UserQ = None,
    limit: LimitQ = FINISHED_PAGE,
) -> Response:
    part = _jobs_data(request, sess, _filter(phase, user, limit))
    got = await live(request, since, part["key"], _JOBS_TABLES, part["build"])
    if got is None:
        return Response(status_code=204)
    return fragment(request, "_jobs.html", {**part["fixed"], **got[0], "v": got[1]})


# -- one job ----------------------------------------------------------------------------------------


def _job_part(request: Request, sess: Session, name: str, user: str | None) -> dict[str, Any]:
    def build() -> dict[str, Any]:
        data = job_page(platform_of(request), sess.who, name, user)
        return {"d": data, "job": data.job}

    query = f"?{urlencode({'user': user})}" if user else ""
    fixed = {"section": "jobs", "user_q": {"user": user} if user else {}, "who": sess.who, "csrf": sess.csrf,
             "chart_src": f"/ui/jobs/{quote(name, safe='')}/trainers.json{query}"}  # fmt: skip
    return {"key": ("job", sess.who.name, sess.who.is_admin, name, user), "build": build, "fixed": fixed}


@router.get("/jobs/{name}", response_class=HTMLResponse)
def job(request: Request, sess: SessionDep, name: NameP, user: UserQ = None) -> HTMLResponse:
    part = _job_part(request, sess, name, user)
    ctx = built(request, part["key"], _JOB_TABLES, part["build"])
    return page(request, sess, "job.html", {**part["fixed"], **ctx, "oob": False})


async def _job_live_part(
    request: Request, sess: Session, name: str, user: str | None, since: str | None
) -> Response:
    """The job's live part (and its events, out of band: ``hx-swap-oob``); 204 when unchanged."""
    part = _job_part(request, sess, name, user)
    got = await live(request, since, part["key"], _JOB_TABLES, part["build"])
    if got is None:
        return Response(status_code=204)
    return fragment(request, "_job_live.html", {**part["fixed"], **got[0], "v": got[1], "oob": True})


@router.get("/jobs/{name}/_live", response_class=HTMLResponse)
async def job_live(
    request: Request, sess: SessionDep, name: NameP, since: SinceQ = None, user: UserQ = None
) -> Response:
    return await _job_live_part(request, sess, name, user, since)


@router.post("/jobs/{name}/kill", response_class=HTMLResponse)
async def kill(request: Request, sess: SessionDep, name: NameP, user: UserQ = None) -> Response:
    await verified_form(request, sess)
    platform = platform_of(request)
    await run_in_threadpool(lambda: platform.jobs.kill(sess.who, name, None, user=user))
    if request.headers.get("hx-request") != "true":  # a plain form: back to the page
        suffix = f"?{urlencode({'user': user})}" if user else ""
        return RedirectResponse(f"/ui/jobs/{quote(name, safe='')}{suffix}", status_code=303)
    return await _job_live_part(request, sess, name, user, None)


#: a log tail is read at most once per this many seconds for all the consoles following it
_LOG_SHARED_S = 1.0


@router.get("/jobs/{name}/log", response_class=PlainTextResponse)
async def log(
    request: Request,
    sess: SessionDep,
    name: NameP,
    worker: WorkerQ,
    tail: TailQ = 500,
    previous: bool = False,
    since: SinceQ = None,
    user: UserQ = None,
) -> Response:
    """Plain text, never HTML: the browser shows it as text whatever it holds. ``X-Log-Live``: more
    may come; ``X-Log-Version``: send it back as ``since`` and get a 204 while the text is the same.

    The caller's consoles following one log share its reads: the tail is read again once the job's
    rows changed or a second has passed, and whether it may grow once the job's rows changed."""
    q = LogQuery(name=name, worker=worker, tail=tail, previous=previous, user=user)
    platform = platform_of(request)
    gen = stamp(platform, ("jobs", "workers"))
    who = (sess.who.name, sess.who.is_admin)
    text_at = (*gen, int(time.monotonic() / _LOG_SHARED_S))
    text, value = await remembered(("log", who, q), text_at, lambda: log_tail(platform, sess.who, q))
    live_now, _ = await remembered(("log-live", who, q), gen, lambda: log_live(platform, sess.who, q))
    headers = {"X-Log-Live": "1" if live_now else "0", "X-Log-Version": value,
               "Content-Security-Policy": "sandbox; default-src 'none'"}  # fmt: skip
    if since == value:
        return Response(status_code=204, headers=headers)
    return PlainTextResponse(text, headers=headers)


@router.get("/jobs/{name}/trainers.json")
def trainers(request: Request, sess: SessionDep, name: NameP, user: UserQ = None) -> JSONResponse:
    """The job's trainer count over time, for its chart."""
    return JSONResponse(trainer_chart(platform_of(request), sess.who, name, user))
