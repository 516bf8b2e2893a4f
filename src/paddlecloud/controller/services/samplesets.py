"""SampleSets: the requests (create, list, get, SampleJobs, delete); the lifecycle loop is
``controller/loop/sampleset_loop.py``.

    route ──▶ SampleSetService.create: capability, name, source (a PFS folder the owner may read),
              cache size, nodes, quota (the projected cache) ──▶ INSERT samplesets (Pending) +
              sample_jobs [sync, warmup] ──▶ wake the loop
    then the loop (``SampleSetLoop``) mounts, syncs and warms it through the backend

Tenancy: every lookup is by (owner, name), so another user's SampleSet is not found (404
``sampleset_not_found``), never forbidden; admins list everyone's with ``all_users``. The cached
bytes count against the owner's storage quota (``FileService.held_elsewhere``,
``sampleset_refs.cached_bytes_of``). A SampleSet that a job not finished yet names cannot be
deleted (409 ``sampleset_in_use``, naming the jobs).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, InvalidInput
from paddlecloud.api.samplesets import (
    NodeCacheView,
    SampleJobKind,
    SampleJobPhase,
    SampleJobRequest,
    SampleJobView,
    SampleSetPhase,
    SampleSetSpec,
    SampleSetView,
)
from paddlecloud.backends.samplesets import (
    SampleSetBackend,
)
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.sampleset_refs import (
    find_sampleset,
    sampleset_backend,
    sampleset_not_found,
    samplesets_unavailable,
)
from paddlecloud.controller.services.files import FileService
from paddlecloud.core.phases import TERMINAL_PHASES
from paddlecloud.core.quantity import QuantityError, parse_memory
from paddlecloud.store.tables import JobRow, SampleJobRow, SampleSetRow

__all__ = ["SampleSetService", "check_job_path"]

log = logging.getLogger("paddlecloud.samplesets")

#: the default cache size: the source's bytes times this, at least ``MIN_DEFAULT_CACHE``
CACHE_HEADROOM = 1.1
MIN_DEFAULT_CACHE = 64 * 2**20
#: SampleJobs shown with a SampleSet
JOBS_SHOWN = 20


def check_job_path(kind: SampleJobKind, path: str) -> str:
    """The path of a SampleJob, normalised (``a/b``), or 422 ``sampleset_path_invalid``: relative to
    the volume root, no "..", not empty for rmr; sync and clear take none."""

    def bad(why: str) -> InvalidInput:
        return InvalidInput(
            f"{kind} path {path!r} {why}", code=ErrorCode.SAMPLESET_PATH_INVALID, field="path"
        )

    if kind in (SampleJobKind.SYNC, SampleJobKind.CLEAR):
        if path:
            raise bad("is not taken: sync and clear work on the whole SampleSet (give no path)")
        return ""
    if "\0" in path:
        raise bad("holds a NUL byte")
    if path.startswith("/"):
        raise bad('is absolute: give it relative to the SampleSet\'s root (e.g. "train/part-0")')
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise bad('holds "..": give a path inside the SampleSet')
    if kind == SampleJobKind.RMR and not parts:
        raise bad("is empty: name what to remove (delete the whole SampleSet with `sampleset delete`)")
    return "/".join(parts)


def _job_view(j: SampleJobRow) -> SampleJobView:
    return SampleJobView(
        id=j.id, kind=j.kind, path=j.path, phase=SampleJobPhase(j.phase), done=j.done, total=j.total,
        message=j.message, created_at=j.created_at, finished_at=j.finished_at,
    )  # fmt: skip


def _view(s: Session, row: SampleSetRow) -> SampleSetView:
    jobs = s.scalars(
        select(SampleJobRow)
        .where(SampleJobRow.sampleset_id == row.id)
        .order_by(SampleJobRow.id.desc())
        .limit(JOBS_SHOWN)
    ).all()
    return SampleSetView(
        name=row.name,
        owner=row.owner,
        source=row.source,
        phase=SampleSetPhase(row.phase),
        message=row.message,
        files=row.files,
        bytes=row.bytes,
        cached_bytes=row.cached_bytes,
        cache_size=row.cache_size,
        nodes=[NodeCacheView.model_validate(n) for n in row.node_caches or []],
        jobs=[_job_view(j) for j in jobs],
        created_at=row.created_at,
        deleting=row.deleting,
    )


class SampleSetService:
    """What the ``/samplesets`` routes call; every method takes the caller's identity."""

    def __init__(self, ctx: Context, files: FileService, wake: threading.Event | None = None) -> None:
        self.ctx = ctx
        self.files = files
        #: set to wake the lifecycle loop (``SampleSetLoop.wake``)
        self.wake = wake or threading.Event()

    # -- queries --------------------------------------------------------------------------------

    def _row(self, s: Session, who: Identity, name: str) -> SampleSetRow:
        row = find_sampleset(s, who.name, name)
        if row is None:
            raise sampleset_not_found(name)
        return row

    def get(self, who: Identity, name: str) -> SampleSetView:
        with self.ctx.session() as s:
            return _view(s, self._row(s, who, name))

    def list_all(self, who: Identity, *, all_users: bool = False) -> list[SampleSetView]:
        """The caller's SampleSets (``all_users``: everyone's, admins only), by name."""
        with self.ctx.session() as s:
            q = select(SampleSetRow).order_by(SampleSetRow.owner, SampleSetRow.name)
            if all_users:
                require_admin(who, "listing every user's SampleSets")
            else:
                q = q.where(SampleSetRow.owner == who.name)
            return [_view(s, r) for r in s.scalars(q)]

    def jobs(self, who: Identity, name: str) -> list[SampleJobView]:
        """The SampleSet's SampleJobs, latest first."""
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            q = select(SampleJobRow).where(SampleJobRow.sampleset_id == row.id)
            rows = s.scalars(q.order_by(SampleJobRow.id.desc()))
            return [_job_view(j) for j in rows]

    # -- commands -------------------------------------------------------------------------------

    def _engine(self) -> SampleSetBackend:
        engine = sampleset_backend(self.ctx.backend)
        if engine is None:
            raise samplesets_unavailable(self.ctx.backend)
        return engine

    def create(self, who: Identity, spec: SampleSetSpec) -> SampleSetView:
        self._engine()
        source_bytes = self._check_source(who, spec.source)
        nodes = self._check_nodes(spec.nodes)
        cache_size = self._cache_size(spec.cache_size, source_bytes)
        width = len(nodes) if nodes is not None else len(self.ctx.backend.nodes())
        self.files.check_room(who.name, min(cache_size, source_bytes) * width)
        now = self.ctx.clock.now()
        with self.ctx.session() as s:
            row = SampleSetRow(
                owner=who.name, name=spec.name, source=spec.source, cache_size=cache_size, nodes=nodes,
                phase=SampleSetPhase.PENDING, message="waiting to be mounted and synced", files=0,
                bytes=0, cached_bytes=0, node_caches=[], created_at=now, updated_at=now, deleting=False,
            )  # fmt: skip
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                s.rollback()
                raise self._exists(s, who, spec.name) from None
            for kind in (SampleJobKind.SYNC, SampleJobKind.WARMUP):  # sync then warmup, by themselves
                s.add(self._new_job(row.id, kind, "", now))
            s.commit()
            view = _view(s, row)
        self.wake.set()
        return view

    @staticmethod
    def _exists(s: Session, who: Identity, name: str) -> Conflict:
        going = s.scalar(
            select(SampleSetRow.deleting).where(SampleSetRow.owner == who.name, SampleSetRow.name == name)
        )
        tail = (
            "it is being deleted: try again once `paddlecloud get samplesets` no longer lists it"
            if going
            else f"pick another name or delete it first (paddlecloud sampleset delete {name})"
        )
        return Conflict(f"SampleSet {name!r} already exists; {tail}", code=ErrorCode.SAMPLESET_EXISTS,
                        field="name")  # fmt: skip

    def _check_source(self, who: Identity, source: str) -> int:
        """The source is a folder ``who`` may read; its size in bytes."""
        files = self.files
        info = files.stat(who, source)  # invalid_path / forbidden / path_not_found as for `pfs ls`
        if info.type != "dir":
            raise Conflict(
                f"source {source} is a file: give the folder that holds the data set",
                code=ErrorCode.NOT_A_DIRECTORY,
                field="source",
            )
        return files.bytes_below(files.parse(source))

    def _check_nodes(self, nodes: list[str] | None) -> list[str] | None:
        if nodes is None:
            return None
        known = [n.name for n in self.ctx.backend.nodes()]
        unknown = sorted(set(nodes) - set(known))
        if unknown or not nodes:
            what = f"unknown node(s) {', '.join(unknown)}" if unknown else "no node given"
            raise InvalidInput(f"{what}; this cluster's nodes: {', '.join(known)}",
                               code=ErrorCode.INVALID_REQUEST, field="nodes")  # fmt: skip
        return list(dict.fromkeys(nodes))

    @staticmethod
    def _cache_size(text: str | None, source_bytes: int) -> int:
        if text is None:
            return max(int(source_bytes * CACHE_HEADROOM), MIN_DEFAULT_CACHE)
        try:
            n = parse_memory(text)
        except QuantityError as exc:
            raise InvalidInput(
                f"cache_size: {exc}", code=ErrorCode.INVALID_REQUEST, field="cache_size"
            ) from None
        if n < 2**20:
            raise InvalidInput(f"cache_size {text!r} is under 1Mi (the cache's unit)",
                               code=ErrorCode.INVALID_REQUEST, field="cache_size")  # fmt: skip
        return n

    def _new_job(self, set_id: int, kind: SampleJobKind, path: str, now: float) -> SampleJobRow:
        return SampleJobRow(sampleset_id=set_id, kind=str(kind), path=path, phase=SampleJobPhase.PENDING,
                            done=0, total=0, message="", created_at=now)  # fmt: skip

    def add_job(self, who: Identity, name: str, req: SampleJobRequest) -> SampleJobView:
        """Queue a sync, warmup, clear or rmr; it runs after the SampleSet's earlier jobs."""
        self._engine()
        path = check_job_path(req.kind, req.path)
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            if req.kind == SampleJobKind.WARMUP:  # the cache it may fill counts against the quota
                width = len(row.node_caches or []) or 1
                more = min(row.cache_size, row.bytes) * width - row.cached_bytes
                self.files.check_room(who.name, max(more, 0))
            job = self._new_job(row.id, req.kind, path, self.ctx.clock.now())
            s.add(job)
            s.commit()
            view = _job_view(job)
        self.wake.set()
        return view

    def delete(self, who: Identity, name: str) -> SampleSetView:
        """Unmount and remove it (in the background); refused while a job not finished names it."""
        with self.ctx.session() as s:
            row = self._row(s, who, name)
            users = [
                j.name
                for j in s.scalars(
                    select(JobRow).where(JobRow.user == who.name, JobRow.phase.not_in(list(TERMINAL_PHASES)))
                )
                if (spec := self.ctx.specs.peek(j)) is not None and spec.sampleset == name
            ]
            if users:
                raise Conflict(
                    f"SampleSet {name!r} is used by job(s) {', '.join(sorted(users))}: "
                    "delete it once they have finished (or kill them)",
                    code=ErrorCode.SAMPLESET_IN_USE,
                )
            row.deleting = True
            row.message = "deleting: unmounting and removing the cache"
            s.commit()
            view = _view(s, row)
        self.wake.set()
        return view
