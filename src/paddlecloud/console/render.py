"""Templates and what every page gets: one Jinja environment (autoescape on for every template), the
filters that turn numbers into text for people, and the live-update versions.

    page route ─▶ page(request, sess, "jobs.html", ctx) ─▶ base.html + the page's template
                  ctx gets: who, csrf (for the meta tag htmx sends back), nav, static(), poll_ms

Every value from a user (job names, env values, messages, file names, log lines) goes through
autoescape; nothing here or in the templates marks user data safe. Live parts poll
(``hx-trigger="every 2s"``) with ``?since=DIGEST``; :func:`live` says when to answer 204 (htmx then
swaps nothing): while the data behind a part is as it was (``console.live``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from paddlecloud.console.auth import Session
from paddlecloud.console.live import Memo, stamp
from paddlecloud.core.durations import human_duration
from paddlecloud.core.quantity import format_cpu, format_memory, human_bytes

__all__ = [
    "MEMO",
    "NAV",
    "PFS_PREFIX",
    "POLL_MS",
    "STATIC_DIR",
    "TEMPLATES",
    "age",
    "built",
    "duration",
    "fragment",
    "live",
    "page",
    "pfs_url",
    "remembered",
    "static_url",
    "until",
]

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
#: how often a page's live parts ask for news (ms); an unchanged answer is a 204 of a few hundred bytes
POLL_MS = 2000
#: every live part's latest data (``console.live``)
MEMO = Memo()


def _hash_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:10]


_ASSET_HASHES: dict[str, str] = {}


def static_url(name: str) -> str:
    """``/ui/static/NAME?v=HASH``: a changed file gets a new URL, so caches never serve an old one."""
    digest = _ASSET_HASHES.get(name)
    if digest is None:
        digest = _ASSET_HASHES[name] = _hash_of(STATIC_DIR / name)
    return f"/ui/static/{quote(name)}?v={digest}"


PFS_PREFIX = "/ui/pfs/"


def pfs_url(pfs_path: str) -> str:
    """The console URL of ``/pfs/<dc>/<area>/...``: ``/ui/pfs/<area>/...``, each part quoted."""
    parts = pfs_path.removeprefix("/pfs/").split("/")[1:]
    return PFS_PREFIX + "/".join(quote(p, safe="") for p in parts if p)


def duration(start: datetime | None, end: datetime | None) -> str:
    """``1m30s``-style length of a run; "" when it has no start."""
    if start is None:
        return ""
    seconds = max(0, int((end.timestamp() if end else time.time()) - start.timestamp()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        m, s = divmod(seconds, 60)
        return f"{m}m{s}s" if s else f"{m}m"
    h, m = divmod(seconds // 60, 60)
    return f"{h}h{m}m" if m else f"{h}h"


def age(when: datetime | None, now: float | None = None) -> str:
    """``5s``, ``3m``, ``2h5m``, ``4d``: how long ago ``when`` was."""
    if when is None:
        return ""
    seconds = max(0, int((now if now is not None else time.time()) - when.timestamp()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        h, m = divmod(seconds // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    return f"{seconds // 86400}d"


def until(when: datetime | None, now: float | None = None) -> str:
    """``in 12m``, ``in 2h5m``, ``now``: how long until ``when`` (an estimate), rounded up."""
    if when is None:
        return ""
    seconds = when.timestamp() - (now if now is not None else time.time())
    return "now" if seconds <= 0 else f"in {human_duration(seconds)}"


def _iso(when: datetime | None) -> str:
    return "" if when is None else when.astimezone(UTC).isoformat(timespec="seconds")


def _clock(when: datetime | None) -> str:
    return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cpu(millicores: int) -> str:
    return format_cpu(millicores) if millicores % 1000 == 0 else f"{millicores / 1000:.2f}".rstrip("0")


def _memory(n: int) -> str:
    """Whole MiB in the spec's notation (``512Mi``, ``2Gi``), anything else for people."""
    return format_memory(n) if n % (1 << 20) == 0 else human_bytes(n)


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        age=age,
        until=until,
        iso=_iso,
        clock=_clock,
        bytes=human_bytes,
        cpu=_cpu,
        mem=_memory,
        urlpart=lambda v: quote(str(v), safe=""),
    )
    env.globals.update(
        static=static_url,
        percent=_percent,
        urlencode=urlencode,
        poll_ms=POLL_MS,
        pfs_url=pfs_url,
        duration=duration,
    )
    return env


TEMPLATES = Jinja2Templates(env=_env())

NAV = (("jobs", "/ui/", "Jobs"), ("queue", "/ui/queue", "Queue"), ("cluster", "/ui/cluster", "Cluster"),
       ("quota", "/ui/quota", "Quota"), ("pfs", "/ui/pfs/", "Files"))  # fmt: skip


def page(
    request: Request, sess: Session, template: str, ctx: dict[str, Any], *, status: int = 200
) -> HTMLResponse:
    """A whole page (``base.html`` around ``template``)."""
    full = {"who": sess.who, "csrf": sess.csrf, "nav": NAV, "section": ctx.get("section", ""), **ctx}
    return TEMPLATES.TemplateResponse(request, template, full, status_code=status)


def fragment(request: Request, template: str, ctx: dict[str, Any]) -> HTMLResponse:
    """A live part alone (what an htmx poll swaps in)."""
    return TEMPLATES.TemplateResponse(request, template, ctx)


async def remembered(key: Hashable, at: Hashable, build: Callable[[], T]) -> tuple[T, str]:
    """``MEMO.get_or_build`` answered on the event loop when known, else built in a thread."""
    hit = MEMO.known(key, at)
    if hit is not None:
        data: T = hit[0]
        return data, hit[1]
    return await run_in_threadpool(MEMO.get_or_build, key, at, build)


async def live(
    request: Request,
    since: str | None,
    key: Hashable,
    tables: tuple[str, ...],
    build: Callable[[], dict[str, Any]],
) -> tuple[dict[str, Any], str] | None:
    """A live part's data and digest, or None when the caller has it already (``since``: answer
    204). While no table it reads changed, the answer comes from memory on the event loop."""
    data, value = await remembered(key, stamp(request.app.state.platform, tables), build)
    return None if value == since else (data, value)


def built(
    request: Request, key: Hashable, tables: tuple[str, ...], build: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """A live part's data for a whole page (in a thread already), with its digest as ``v``."""
    data, value = MEMO.get_or_build(key, stamp(request.app.state.platform, tables), build)
    return {**data, "v": value}
