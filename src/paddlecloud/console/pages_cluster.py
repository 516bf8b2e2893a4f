"""The Queue, Cluster and Quota pages and their live parts.

    GET /ui/queue   [/_queue]    waiting jobs in scheduling order with their reasons
    GET /ui/cluster [/_cluster]  nodes: capacity and what is held; the policy; charts of the last hour
    GET /ui/quota   [/_quota]    the caller's compute quota and use, PFS storage and use

Each calls the controller view the REST API serves (``ClusterState``, ``JobService.quota``,
``FileService.usage``) and polls like the Jobs page (204 while nothing changed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from paddlecloud.console.auth import Session, session
from paddlecloud.console.pages_jobs import platform_of
from paddlecloud.console.render import built, fragment, live, page
from paddlecloud.console.views import cluster_chart

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
    return {"cluster": platform_of(request).cluster.cluster(sess.who)}


def _quota(request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    platform = platform_of(request)
    return {"quota": platform.jobs.quota(sess.who), "storage": platform.files.usage(sess.who)}


_PAGES: dict[str, Builder] = {"queue": _queue, "cluster": _cluster, "quota": _quota}
#: what a page shows besides its live part (chart sources, filled in by the history)
_FIXED: dict[str, dict[str, str]] = {
    "cluster": {
        "util_src": "/ui/cluster/history.json?chart=util",
        "queue_src": "/ui/cluster/history.json?chart=queue",
    }
}


def _part(name: str, request: Request, sess: Session, params: dict[str, str]) -> dict[str, Any]:
    key = (name, sess.who.name, sess.who.is_admin, tuple(sorted(params.items())))
    fixed = {"section": name, "who": sess.who, "params": params, **_FIXED.get(name, {})}
    return {"key": key, "build": lambda: _PAGES[name](request, sess, params), "fixed": fixed}


def _page(name: str, request: Request, sess: Session, params: dict[str, str]) -> HTMLResponse:
    part = _part(name, request, sess, params)
    ctx = built(request, part["key"], _TABLES, part["build"])
    return page(request, sess, f"{name}.html", {**part["fixed"], **ctx})


async def _live(
    name: str, request: Request, sess: Session, since: str | None, params: dict[str, str]
) -> Response:
    part = _part(name, request, sess, params)
    got = await live(request, since, part["key"], _TABLES, part["build"])
    if got is None:
        return Response(status_code=204)
    return fragment(request, f"_{name}.html", {**part["fixed"], **got[0], "v": got[1]})


@router.get("/queue", response_class=HTMLResponse)
def queue(request: Request, sess: SessionDep, user: UserQ = None) -> HTMLResponse:
    return _page("queue", request, sess, {"user": user} if user else {})


@router.get("/_queue", response_class=HTMLResponse)
async def queue_live(
    request: Request, sess: SessionDep, since: SinceQ = None, user: UserQ = None
) -> Response:
    return await _live("queue", request, sess, since, {"user": user} if user else {})


@router.get("/cluster", response_class=HTMLResponse)
def cluster(request: Request, sess: SessionDep) -> HTMLResponse:
    return _page("cluster", request, sess, {})


@router.get("/_cluster", response_class=HTMLResponse)
async def cluster_live(request: Request, sess: SessionDep, since: SinceQ = None) -> Response:
    return await _live("cluster", request, sess, since, {})


@router.get("/quota", response_class=HTMLResponse)
def quota(request: Request, sess: SessionDep) -> HTMLResponse:
    return _page("quota", request, sess, {})


@router.get("/_quota", response_class=HTMLResponse)
async def quota_live(request: Request, sess: SessionDep, since: SinceQ = None) -> Response:
    return await _live("quota", request, sess, since, {})


@router.get("/cluster/history.json")
def cluster_history(
    request: Request, sess: SessionDep, chart: Annotated[Literal["util", "queue"], Query()] = "util"
) -> JSONResponse:
    """The last hour of the cluster, for its charts (aggregates only: any signed-in user)."""
    del sess  # signed in is enough, as for GET /api/v1/cluster/history
    return JSONResponse(cluster_chart(platform_of(request), chart))
