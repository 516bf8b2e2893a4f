"""``/api/v1/pfs`` routes of the file service. Thin: parse, call FileService, return a view.

Bodies are streamed: a chunk upload is written block by block (at most ``BLOCK`` bytes held) and a
download is read from the store 1 MiB at a time.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from paddlecloud.api.errors import ErrorCode, PackageTooLarge
from paddlecloud.api.file_requests import (
    MAX_CHUNK,
    MIN_CHUNK,
    LocalGrantRequest,
    MkdirRequest,
    MoveRequest,
    RemoveRequest,
    UploadBegin,
    UploadComplete,
)
from paddlecloud.api.files import (
    HEADER_DATA_PORT,
    ChecksumView,
    FileInfo,
    FileList,
    LocalGrant,
    PfsHome,
    StorageUsage,
    UploadView,
)
from paddlecloud.controller import JobIdentity
from paddlecloud.server.deps import Caller, PlatformDep, TaskCaller

__all__ = ["router"]

router = APIRouter(prefix="/pfs", tags=["pfs"])

BLOCK = 4 << 20
HEADER_DIGEST = "X-PaddleCloud-Digest"
HEADER_CHECKSUM = "X-PaddleCloud-Checksum"
HEADER_SIZE = "X-PaddleCloud-Size"

PathQ = Annotated[str, Query(description="/pfs/<datacenter>/home/<user>/... or /pfs/<datacenter>/public/...")]


@router.get("/stat", response_model=FileInfo)
def stat(path: PathQ, who: Caller, platform: PlatformDep) -> FileInfo:
    return platform.files.stat(who, path)


@router.get("/list", response_model=FileList)
def list_dir(path: PathQ, who: Caller, platform: PlatformDep, recursive: bool = False) -> FileList:
    """A directory's entries (``recursive``: the whole tree); a glob in the last component filters."""
    return FileList(items=platform.files.listdir(who, path, recursive))


@router.post("/mkdir", response_model=FileInfo, status_code=201)
def mkdir(req: MkdirRequest, who: Caller, platform: PlatformDep) -> FileInfo:
    return platform.files.mkdir(who, req.path, req.parents)


@router.post("/remove", status_code=204)
def remove(req: RemoveRequest, who: Caller, platform: PlatformDep) -> Response:
    platform.files.remove(who, req.path, req.recursive)
    return Response(status_code=204)


@router.post("/move", response_model=FileInfo)
def move(req: MoveRequest, who: Caller, platform: PlatformDep) -> FileInfo:
    return platform.files.move(who, req.src, req.dst)


@router.get("/home", response_model=PfsHome)
def home(who: Caller, platform: PlatformDep, request: Request, response: Response) -> PfsHome:
    """The caller's home: what ``pfs:REL`` paths expand to; the header ``X-PaddleCloud-Data-Port``
    names the PFS data port when the server has one (``server.pfs_data``: the bulk transfers)."""
    data_port = getattr(request.app.state, "data_port", None)
    if data_port is not None:
        response.headers[HEADER_DATA_PORT] = str(data_port)
    return platform.files.home_of(who)


@router.get("/usage", response_model=StorageUsage)
def usage(who: Caller, platform: PlatformDep) -> StorageUsage:
    return platform.files.usage(who)


@router.get("/checksum", response_model=ChecksumView)
def checksum(
    path: PathQ,
    who: Caller,
    platform: PlatformDep,
    chunk_size: Annotated[int, Query(ge=MIN_CHUNK, le=MAX_CHUNK)] = 16 << 20,
) -> ChecksumView:
    return platform.files.checksum(who, path, chunk_size)


@router.get("/file")
def download(
    path: PathQ,
    caller: TaskCaller,
    platform: PlatformDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    length: Annotated[int | None, Query(ge=0)] = None,
) -> StreamingResponse:
    """A file's bytes (from ``offset``, ``length`` of them). A job token may read its own job's
    package only (the Kubernetes pods fetch it so)."""
    who = platform.jobs.package_reader(caller, path) if isinstance(caller, JobIdentity) else caller
    size, blocks = platform.files.read(who, path, offset, length)
    return StreamingResponse(blocks, media_type="application/octet-stream", headers={HEADER_SIZE: str(size)})


@router.put("/file", response_model=FileInfo, status_code=201)
async def put_file(
    path: PathQ,
    request: Request,
    who: Caller,
    platform: PlatformDep,
    overwrite: bool = False,
    checksum: Annotated[str, Header(alias=HEADER_CHECKSUM)] = "",
) -> FileInfo:
    """A whole small file (at most one chunk, 64 MiB) in one request; larger files use /uploads."""
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_CHUNK:
            raise PackageTooLarge(
                f"a single PUT holds at most {MAX_CHUNK >> 20} MiB; use a resumable upload",
                code=ErrorCode.INVALID_REQUEST,
            )
    return await run_in_threadpool(platform.files.put_small, who, path, bytes(body), checksum, overwrite)


@router.post("/local", response_model=LocalGrant, status_code=201)
def local_grant(req: LocalGrantRequest, who: Caller, platform: PlatformDep) -> LocalGrant:
    """A one-time grant for the same-host fast path (a client on the server's machine moves the data
    as an open file over the server's Unix socket instead of HTTP); ``not_supported`` without one."""
    return platform.pfs_local.grant(who, req.upload_id, req.path)


@router.post("/uploads", response_model=UploadView, status_code=201)
def begin_upload(req: UploadBegin, who: Caller, platform: PlatformDep) -> UploadView:
    """Start (or resume: same user, path, size and chunk size) a chunked upload."""
    return platform.files.begin_upload(who, req.path, req.size, req.chunk_size, req.overwrite)


@router.put("/uploads/{upload_id}/{index}", status_code=204)
async def put_chunk(
    upload_id: str,
    index: int,
    request: Request,
    who: Caller,
    platform: PlatformDep,
    digest: Annotated[str, Header(alias=HEADER_DIGEST)] = "",
) -> Response:
    writer = await run_in_threadpool(platform.files.chunk_writer, who, upload_id, index, digest)
    pieces: list[bytes] = []
    held = 0
    async for piece in request.stream():
        pieces.append(piece)
        held += len(piece)
        if held >= BLOCK:  # one thread hop (and one pwritev) per few MiB, never the whole body
            await run_in_threadpool(writer.write, pieces)
            pieces, held = [], 0
    if pieces:
        await run_in_threadpool(writer.write, pieces)
    await run_in_threadpool(writer.finish)
    return Response(status_code=204)


@router.post("/uploads/{upload_id}/complete", response_model=FileInfo)
def complete_upload(
    upload_id: str, req: UploadComplete, who: Caller, platform: PlatformDep, overwrite: bool = False
) -> FileInfo:
    return platform.files.complete_upload(who, upload_id, req.checksum, overwrite)


@router.delete("/uploads/{upload_id}", status_code=204)
def abort_upload(upload_id: str, who: Caller, platform: PlatformDep) -> Response:
    platform.files.abort_upload(who, upload_id)
    return Response(status_code=204)
