"""The Queue, Cluster and Quota pages and their live parts.

    GET /ui/queue   [/_queue]    waiting jobs in scheduling order with their reasons
    GET /ui/cluster [/_cluster]  nodes: capacity and what is held; the policy; charts of the last hour
    GET /ui/quota   [/_quota]    the caller's compute quota and use, PFS storage and use

Each calls the controller view the REST API serves (``ClusterState``, ``JobService.quota``,
``FileService.usage``) and polls like the Jobs page (204 while nothing changed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from paddlecloud.console.auth import Session, session
from paddlecloud.console.pages_jobs import platform_of
from paddlecloud.console.render import fragment, page, unchanged, version

__all__ = ["router"]

router = APIRouter()

SessionDep = Annotated[Session, Depends(session)]
SinceQ = Annotated[str | None, Query(max_length=64)]
UserQ = Annotated[str | None, Query(max_length=64, description="admins: only this user's jobs")]

_TABLES = ("jobs", "workers", "users")

Builder = Callable[[Request, Session, dict[str, str]], dict[str, Any]]


def _queue(request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    view = platform_of(request).cluster.queue(sess.who, params.get("user") or None)
    return {"queue": view, "mine": sum(1 for e in view.items if e.mine)}


def _cluster(request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    return {"cluster": platform_of(request).cluster.cluster(sess.who), "util_src": "", "queue_src": ""}


def _quota(request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    platform = platform_of(request)
    return {"quota": platform.jobs.quota(sess.who), "storage": platform.files.usage(sess.who)}


_PAGES: dict[str, Builder] = {"queue": _queue, "cluster": _cluster, "quota": _quota}


def _ctx(name: str, request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    gen = platform_of(request).ctx.db.changes.get(*_TABLES)
    return {
        "section": name,
        "who": sess.who,
        "params": params,
        "v": version(gen),
        **_PAGES[name](request, sess, params),
    }


async def _live(
    name: str, request: Request, sess: Session, since: str | None, params: dict[str, str]
) -> Response:
    if unchanged(since, version(platform_of(request).ctx.db.changes.get(*_TABLES))):
        return Response(status_code=204)
    ctx = await run_in_threadpool(_ctx, name, request, sess, params)
    return fragment(request, f"_{name}.html", ctx)


@router.get("/queue", response_class=HTMLResponse)
def queue(request: Request, sess: SessionDep, user: UserQ = None) -> HTMLResponse:
    params = {"user": user} if user else {}
    return page(request, sess, "queue.html", _ctx("queue", request, sess, params))


@router.get("/_queue", response_class=HTMLResponse)
async def queue_live(
    request: Request, sess: SessionDep, since: SinceQ = None, user: UserQ = None
) -> Response:
    return await _live("queue", request, sess, since, {"user": user} if user else {})


@router.get("/cluster", response_class=HTMLResponse)
def cluster(request: Request, sess: SessionDep) -> HTMLResponse:
    return page(request, sess, "cluster.html", _ctx("cluster", request, sess, {}))


@router.get("/_cluster", response_class=HTMLResponse)
async def cluster_live(request: Request, sess: SessionDep, since: SinceQ = None) -> Response:
    return await _live("cluster", request, sess, since, {})


@router.get("/quota", response_class=HTMLResponse)
def quota(request: Request, sess: SessionDep) -> HTMLResponse:
    return page(request, sess, "quota.html", _ctx("quota", request, sess, {}))


@router.get("/_quota", response_class=HTMLResponse)
async def quota_live(request: Request, sess: SessionDep, since: SinceQ = None) -> Response:
    return await _live("quota", request, sess, since, {})
