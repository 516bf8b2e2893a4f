"""The PFS browser: ``/ui/pfs/<area>/...`` mirrors ``/pfs/<datacenter>/<area>/...``.

    GET  /ui/pfs/                       to the caller's home, /ui/pfs/home/<user>/
    GET  /ui/pfs/home/alice/a/b         a directory: its entries (live); a file: its bytes, as a
                                        download (attachment, octet-stream, sandboxed)
    GET  /ui/pfs/_list/home/alice/a     the listing alone (polled; 204 while unchanged)
    POST /ui/pfs/home/alice/a           op=upload (one small file into a), op=mkdir (name),
                                        op=delete (a itself; recursive for a directory); CSRF

Every access goes through ``FileService`` with the caller's identity (as ``/api/v1/pfs``): a user
reads their home and public, writes their home; admins everywhere. Uploads are small files (at most
``UPLOAD_MAX``, one request, ``FileService.put_small``); ``paddlecloud pfs cp`` moves larger ones.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from paddlecloud.api.errors import ErrorCode, InvalidInput, RequestTooLarge
from paddlecloud.api.files import FileInfo
from paddlecloud.console.auth import Session, session, verified_form
from paddlecloud.console.live import digest
from paddlecloud.console.pages_jobs import platform_of
from paddlecloud.console.render import PFS_PREFIX as UPLOAD_PREFIX
from paddlecloud.console.render import fragment, page, pfs_url
from paddlecloud.core.checksum import ChunkedHasher

__all__ = ["MAX_LISTED", "UPLOAD_MAX", "UPLOAD_PREFIX", "router"]

router = APIRouter()

#: the largest file the console uploads (one request); the server's body limit lets these through
UPLOAD_MAX = 16 << 20
#: entries a listing shows at most
MAX_LISTED = 1000

SessionDep = Annotated[Session, Depends(session)]
RelP = Annotated[str, Path(max_length=4096)]
SinceQ = Annotated[str | None, Query(max_length=64)]


def _abs(request: Request, rel: str) -> str:
    dc = platform_of(request).files.datacenter
    return f"/pfs/{dc}/{rel.strip('/')}"


def _crumbs(rel: str, admin: bool) -> list[tuple[str, str]]:
    """(label, URL) from the area down to ``rel``; URL "" where the caller may not list (the
    list of every home is for admins)."""
    parts = [p for p in rel.strip("/").split("/") if p]
    out = []
    for i, p in enumerate(parts):
        url = UPLOAD_PREFIX + "/".join(quote(x, safe="") for x in parts[: i + 1])
        out.append((p, "" if (i == 0 and p == "home" and not admin) else url))
    return out


def _listing(request: Request, sess: Session, rel: str) -> dict[str, Any]:
    files = platform_of(request).files
    entries = files.listdir(sess.who, _abs(request, rel), recursive=False)
    entries.sort(key=lambda f: (f.type != "dir", f.path))
    shown = entries[:MAX_LISTED]
    return {
        "section": "pfs",
        "rel": rel.strip("/"),
        "here": pfs_url(_abs(request, rel)),
        "crumbs": _crumbs(rel, sess.who.is_admin),
        "home": f"{UPLOAD_PREFIX}home/{quote(sess.who.name, safe='')}",
        "entries": [(e, e.path.rsplit("/", 1)[-1], pfs_url(e.path)) for e in shown],
        "hidden": len(entries) - len(shown),
        "writable": _writable(sess, rel),
        "upload_max": UPLOAD_MAX,
        "who": sess.who,
        "csrf": sess.csrf,
        "v": digest([entries, len(entries)]),
    }


def _writable(sess: Session, rel: str) -> bool:
    parts = rel.strip("/").split("/")
    return sess.who.is_admin or (len(parts) >= 2 and parts[0] == "home" and parts[1] == sess.who.name)


@router.get("/pfs", include_in_schema=False)
@router.get("/pfs/", include_in_schema=False)
def pfs_home(sess: SessionDep) -> RedirectResponse:
    return RedirectResponse(f"{UPLOAD_PREFIX}home/{quote(sess.who.name, safe='')}", status_code=303)


@router.get("/pfs/_list/{rel:path}", response_class=HTMLResponse)
async def listing_live(request: Request, sess: SessionDep, rel: RelP, since: SinceQ = None) -> Response:
    ctx = await run_in_threadpool(_listing, request, sess, rel)
    if since == ctx["v"]:
        return Response(status_code=204)
    return fragment(request, "_pfs.html", ctx)


@router.get("/pfs/{rel:path}", response_model=None)
def browse(request: Request, sess: SessionDep, rel: RelP) -> Response:
    files = platform_of(request).files
    info = files.stat(sess.who, _abs(request, rel))
    if info.type == "file":
        return _download(request, sess, info)
    return page(request, sess, "pfs.html", _listing(request, sess, rel))


def _download(request: Request, sess: Session, info: FileInfo) -> StreamingResponse:
    size, blocks = platform_of(request).files.read(sess.who, info.path, 0, None)
    name = info.path.rsplit("/", 1)[-1]
    return StreamingResponse(
        blocks,
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
            "Content-Security-Policy": "sandbox; default-src 'none'",
        },
    )


@router.post("/pfs/{rel:path}", response_class=HTMLResponse)
async def change(request: Request, sess: SessionDep, rel: RelP) -> Response:
    form = await verified_form(request, sess, max_files=1)
    op = form.get("op")
    target = _abs(request, rel)
    files = platform_of(request).files
    if op == "upload":
        note = await _upload(request, sess, target, form)
        shown = rel
    elif op == "mkdir":
        name = _name(form.get("name"))
        await run_in_threadpool(files.mkdir, sess.who, f"{target.rstrip('/')}/{name}", False)
        note, shown = f"created {name}/", rel
    elif op == "delete":
        recursive = form.get("recursive") == "1"
        await run_in_threadpool(files.remove, sess.who, target, recursive)
        shown = rel.strip("/").rsplit("/", 1)[0]
        note = f"deleted {rel.strip('/').rsplit('/', 1)[-1]}"
    else:
        raise InvalidInput("op must be upload, mkdir or delete", field="op")
    if request.headers.get("hx-request") != "true":
        return RedirectResponse(pfs_url(_abs(request, shown)), status_code=303)
    ctx = await run_in_threadpool(_listing, request, sess, shown)
    response = fragment(request, "_pfs.html", {**ctx, "note": note})
    response.headers["HX-Push-Url"] = ctx["here"]
    return response


def _name(value: Any) -> str:
    """One path component from a form (a new directory's or an uploaded file's name)."""
    if not isinstance(value, str):
        raise InvalidInput("give a name", field="name")
    name = value.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name or name in (".", "..") or len(name) > 255 or not name.isprintable():
        raise InvalidInput(
            f"{name[:80]!r} is not a usable file name", code=ErrorCode.INVALID_PATH, field="name"
        )
    return name


async def _upload(request: Request, sess: Session, directory: str, form: FormData) -> str:
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidInput("choose a file to upload", field="file")
    name = _name(upload.filename)
    data = await upload.read(UPLOAD_MAX + 1)
    if len(data) > UPLOAD_MAX:
        raise RequestTooLarge(
            f"the console uploads files of up to {UPLOAD_MAX >> 20} MiB; "
            "use `paddlecloud pfs cp` for larger ones",
            code=ErrorCode.REQUEST_TOO_LARGE,
        )
    hasher = ChunkedHasher(max(len(data), 1))
    hasher.update(data)
    overwrite = form.get("overwrite") == "1"
    files = platform_of(request).files
    path = f"{directory.rstrip('/')}/{name}"
    await run_in_threadpool(files.put_small, sess.who, path, data, hasher.checksum(), overwrite)
    return f"uploaded {name} ({len(data)} bytes)"
