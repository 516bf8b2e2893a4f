"""SampleSet rows as the rest of the controller needs them: found, turned into backend refs, ready.

    JobService.submit ──find_sampleset(owner, name)──▶ 404 sampleset_not_found when none (or another
                                                        user's: the lookup is by owner)
    Context.launch    ──launch_ref(row, ...)────────▶ JobLaunch.sampleset (SampleSetRef)
    Reconciler        ──readiness(...)──────────────▶ hold a job until its SampleSet is Ready; the
                                                        JobRequest's cache_nodes (>= 90 % cached)
    FileService quota ──cached_bytes_of(owner)──────▶ used = PFS bytes + cached bytes

The SampleSet service itself (create, jobs, delete) is ``controller/services/samplesets.py``, its lifecycle
loop ``controller/loop/sampleset_loop.py``; this module holds only what the others share, so that none
of them imports those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import Conflict, ErrorCode, NotFound
from paddlecloud.api.samplesets import SampleSetPhase
from paddlecloud.backends.base import Backend, Capability
from paddlecloud.backends.errors import JobRejected
from paddlecloud.backends.samplesets import SampleSetBackend, SampleSetRef
from paddlecloud.controller.model.ports import PfsSpace
from paddlecloud.store.tables import SampleSetRow

__all__ = [
    "CACHE_HELD_FRACTION",
    "Readiness",
    "cache_nodes",
    "cached_bytes_of",
    "check_job_sampleset",
    "find_sampleset",
    "launch_ref",
    "readiness",
    "ref_of",
    "sampleset_backend",
    "sampleset_not_found",
    "samplesets_unavailable",
]

#: a node "holds the cache" of a SampleSet when it caches at least this share of its bytes
CACHE_HELD_FRACTION = 0.9


def sampleset_not_found(name: str) -> NotFound:
    return NotFound(
        f"SampleSet {name!r} not found (see: paddlecloud get samplesets)",
        code=ErrorCode.SAMPLESET_NOT_FOUND,
        field="sampleset",
    )


def sampleset_backend(backend: Backend) -> SampleSetBackend | None:
    """The backend's SampleSet engine, or None when it does not declare ``samplesets``."""
    if Capability.SAMPLESETS not in backend.capabilities:
        return None
    engine: SampleSetBackend | None = getattr(backend, "samplesets", None)
    return engine


def samplesets_unavailable(backend: Backend) -> Conflict:
    return Conflict(
        f"the {backend.name} backend cannot cache SampleSets (it does not declare samplesets; "
        "`paddlecloud version` lists what it offers): run the job without --sampleset",
        code=ErrorCode.SAMPLESETS_UNAVAILABLE,
    )


def check_job_sampleset(s: Session, backend: Backend, owner: str, name: str) -> None:
    """At submit: ``name`` is one of ``owner``'s SampleSets on a backend that can mount it."""
    if sampleset_backend(backend) is None:
        raise samplesets_unavailable(backend)
    if find_sampleset(s, owner, name) is None:
        raise sampleset_not_found(name)


def find_sampleset(s: Session, owner: str, name: str) -> SampleSetRow | None:
    """``owner``'s live SampleSet ``name`` (one being deleted is not found)."""
    return s.scalar(
        select(SampleSetRow).where(
            SampleSetRow.owner == owner, SampleSetRow.name == name, SampleSetRow.deleting.is_(False)
        )
    )


def ref_of(row: SampleSetRow, files: PfsSpace, all_nodes: Sequence[str]) -> SampleSetRef:
    """The backend's view of ``row``: its volume's uid, the source on this machine, the nodes."""
    source = files.local_path(files.parse(row.source))
    if source is None:  # pragma: no cover - only local stores exist so far
        raise JobRejected("this file store gives no local paths: SampleSets cannot read their source")
    nodes = tuple(row.nodes) if row.nodes is not None else tuple(all_nodes)
    return SampleSetRef(
        key=f"{row.owner}/{row.name}",
        owner=row.owner,
        name=row.name,
        uid=f"ss-{row.id}",
        source=source,
        cache_size=row.cache_size,
        nodes=nodes,
    )


def launch_ref(s: Session, owner: str, name: str, files: PfsSpace, backend: Backend) -> SampleSetRef:
    """The SampleSet a starting job of ``owner`` names (``JobRejected``: gone, or not mountable here;
    the job then fails with that message)."""
    if sampleset_backend(backend) is None:
        raise JobRejected(f"the {backend.name} backend cannot mount SampleSets (job names {name!r})")
    row = find_sampleset(s, owner, name)
    if row is None:
        raise JobRejected(f"SampleSet {name!r} no longer exists (deleted after the job was submitted)")
    return ref_of(row, files, [n.name for n in backend.nodes()])


def cache_nodes(row: SampleSetRow) -> frozenset[str]:
    """Nodes whose mount caches at least ``CACHE_HELD_FRACTION`` of the volume's bytes."""
    if row.bytes <= 0:
        return frozenset()
    need = CACHE_HELD_FRACTION * row.bytes
    return frozenset(
        str(n["node"])
        for n in row.node_caches or []
        if n.get("mounted") and int(n.get("cached_bytes", 0)) >= need
    )


@dataclass(frozen=True)
class Readiness:
    """Whether a job naming a SampleSet may start now, and where its cache is."""

    ready: bool
    #: why not (for the job's message), "" when ready
    message: str = ""
    cache_nodes: frozenset[str] = frozenset()


def readiness(s: Session, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Readiness]:
    """For each (owner, name): Ready (with its cache nodes) or why the job waits."""
    keys = set(wanted)
    if not keys:
        return {}
    owners = {o for o, _ in keys}
    rows = s.scalars(
        select(SampleSetRow).where(SampleSetRow.owner.in_(owners), SampleSetRow.deleting.is_(False))
    ).all()
    found = {(r.owner, r.name): r for r in rows}
    out = {}
    for key in keys:
        row = found.get(key)
        if row is None:
            out[key] = Readiness(False, f"SampleSet {key[1]!r} no longer exists")
        elif row.phase == SampleSetPhase.READY:
            out[key] = Readiness(True, cache_nodes=cache_nodes(row))
        elif row.phase == SampleSetPhase.FAILED:
            out[key] = Readiness(
                False,
                f"SampleSet {key[1]!r} Failed: {row.message} (fix it: paddlecloud sampleset sync {key[1]})",
            )
        else:
            out[key] = Readiness(False, f"waiting for SampleSet {key[1]!r} to be Ready ({row.phase})")
    return out


def cached_bytes_of(s: Session, owner: str) -> int:
    """Bytes ``owner``'s SampleSets cache over all nodes (they count against the storage quota)."""
    n = s.scalar(select(func.sum(SampleSetRow.cached_bytes)).where(SampleSetRow.owner == owner))
    return int(n or 0)
