"""The SampleSet part of the backend contract: data sets cached near the trainers (JuiceFS).

A SampleSet is one user's data set, copied once from their PFS into a JuiceFS volume and cached on
the nodes that train on it (paddle-operator's SampleSet, Fluid's Dataset). The controller keeps its
record and phase in the database; a backend that declares ``Capability.SAMPLESETS`` does the work
on its engine::

    controller ──ensure(ref)────────────▶ backend   format the volume (once), mount it on ref.nodes
               ──start_task(ref, task)──▶ backend   sync | warmup | clear | rmr, in the background
               ◀──task_status(ref, id)─── backend   progress (done / total) and the outcome
               ◀──status(ref)──────────── backend   files, bytes, per-node mount and cached bytes
               ──delete(ref)────────────▶ backend   unmount everywhere, destroy the volume

A job that names a SampleSet gets ``JobLaunch.sampleset``: the backend shows each worker the
mount of the node it runs on, read-only, at ``PADDLECLOUD_SAMPLESET_DIR``
(:data:`SAMPLESET_DIR_ENV`).

Engines: ``storage.juicefs`` (the JuiceFS binary: format, mount, sync, warmup, evict, rmr); the
local backend mounts once per emulated node; Slurm mounts once per worker run on its node (cache
on node-local disk; warmup and clear as jobs on the nodes: ``backends/slurm/samplesets.py``); Kubernetes
reconciles ``SampleSet`` / ``SampleJob`` custom resources in its operator.

Errors: :class:`SampleSetsUnavailable` (a ``BackendError``) when this cluster cannot mount at all
(no FUSE device, no juicefs binary): raised by ``ensure`` within seconds, never a hang; transient
trouble is ``BackendUnavailable`` (tried again next cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from paddlecloud.backends.errors import BackendError

__all__ = [
    "SAMPLESET_DIR_ENV",
    "NodeCache",
    "SampleSetBackend",
    "SampleSetRef",
    "SampleSetStatus",
    "SampleSetsUnavailable",
    "SampleTask",
    "SampleTaskKind",
    "SampleTaskState",
    "SampleTaskStatus",
]

#: where a worker of a job with ``--sampleset`` finds the data (read-only)
SAMPLESET_DIR_ENV = "PADDLECLOUD_SAMPLESET_DIR"


class SampleSetsUnavailable(BackendError):
    """This cluster cannot mount SampleSets (the message says what is missing and where)."""


@dataclass(frozen=True)
class SampleSetRef:
    """One SampleSet as the backend sees it."""

    #: "owner/name": unique among live SampleSets
    key: str
    owner: str
    name: str
    #: stable and path-safe ("ss-<database id>"): names the volume, its files and its mounts
    uid: str
    #: the source folder on the server's machine (the owner's PFS path, resolved and checked by the
    #: controller); the backend only reads it
    source: Path
    #: per-node cache cap, bytes
    cache_size: int
    #: the nodes to mount on and cache on (the controller resolves "all nodes" to names)
    nodes: tuple[str, ...]


class SampleTaskKind(StrEnum):
    SYNC = "sync"  # copy source -> volume (new and changed files; files gone from source are removed)
    WARMUP = "warmup"  # fill every node's cache with ``path`` (the whole volume when "")
    CLEAR = "clear"  # empty every node's cache (the volume keeps the data)
    RMR = "rmr"  # remove ``path`` (relative to the volume root) from the volume


@dataclass(frozen=True)
class SampleTask:
    #: unique per SampleSet ("sj-<database id>")
    id: str
    kind: SampleTaskKind
    #: relative to the volume root, no ".." (checked by the controller); "" for the whole volume
    path: str = ""


class SampleTaskState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class SampleTaskStatus:
    state: SampleTaskState
    #: progress in the task's own unit (bytes for sync and warmup, files for rmr; 0/0 unknown)
    done: int = 0
    total: int = 0
    message: str = ""


@dataclass(frozen=True)
class NodeCache:
    node: str
    mounted: bool
    cached_bytes: int = 0
    #: what went wrong on this node ("" none)
    message: str = ""
    #: jobs on this node read a plain node-local copy of the whole set (short-circuit reads,
    #: ``storage.nodecopy``), not the JuiceFS mount
    local_copy: bool = False


@dataclass(frozen=True)
class SampleSetStatus:
    #: what the volume holds
    files: int = 0
    bytes: int = 0
    nodes: tuple[NodeCache, ...] = field(default_factory=tuple)


class SampleSetBackend(Protocol):
    """What a backend declaring ``Capability.SAMPLESETS`` offers (``backend.samplesets``)."""

    def ensure(self, ref: SampleSetRef) -> None:
        """Format the volume if new and mount it on ``ref.nodes`` (idempotent; unmounts nodes no
        longer listed). Raises ``SampleSetsUnavailable`` when this cluster cannot mount at all."""
        ...

    def start_task(self, ref: SampleSetRef, task: SampleTask) -> None:
        """Start ``task`` in the background (one at a time per SampleSet: the controller waits for
        the previous to end). Starting an id again that is running or done changes nothing."""
        ...

    def task_status(self, ref: SampleSetRef, task_id: str) -> SampleTaskStatus:
        """Where the task is; an id this backend never started (or lost in a restart) is FAILED."""
        ...

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        """Files and bytes in the volume, and per node whether mounted and the bytes cached."""
        ...

    def delete(self, ref: SampleSetRef) -> None:
        """Stop its task, unmount it everywhere and remove the volume and caches (idempotent)."""
        ...
