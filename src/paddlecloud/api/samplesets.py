"""Wire models of SampleSets (data sets cached near the trainers) and their SampleJobs.

    POST /api/v1/samplesets            SampleSetSpec     ──▶ SampleSetView (201)
    GET  /api/v1/samplesets[?all=true]                   ──▶ SampleSetList
    GET  /api/v1/samplesets/{name}                       ──▶ SampleSetView
    DELETE /api/v1/samplesets/{name}                     ──▶ SampleSetView (202, deleting)
    POST /api/v1/samplesets/{name}/jobs SampleJobRequest ──▶ SampleJobView (202)
    GET  /api/v1/samplesets/{name}/jobs                  ──▶ SampleJobList (latest first)

A SampleSet is ``Pending`` until its volume is mounted, ``Syncing`` while a sync or warmup runs,
``Ready`` once its last sync succeeded (and nothing fills it), ``Failed`` when the last sync failed
or the cluster cannot mount at all (``message`` says why and what to do). ``cached_bytes`` is the
sum over the nodes and counts against the owner's storage quota. The controller's lifecycle is in
``controller/services/samplesets.py``; the backend contract in ``backends/samplesets.py``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from paddlecloud.api.body import Body
from paddlecloud.core.names import check_dns1123_label
from paddlecloud.core.pfspath import MAX_PATH_BYTES

__all__ = [
    "NodeCacheView",
    "SampleJobKind",
    "SampleJobList",
    "SampleJobPhase",
    "SampleJobRequest",
    "SampleJobView",
    "SampleSetList",
    "SampleSetPhase",
    "SampleSetSpec",
    "SampleSetView",
]


class SampleSetPhase(StrEnum):
    PENDING = "Pending"
    SYNCING = "Syncing"
    READY = "Ready"
    FAILED = "Failed"


class SampleJobPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class SampleJobKind(StrEnum):
    SYNC = "sync"  # copy the source into the volume again (new and changed files; gone ones removed)
    WARMUP = "warmup"  # fill every node's cache with ``path`` ("" the whole volume)
    CLEAR = "clear"  # empty every node's cache
    RMR = "rmr"  # remove ``path`` from the volume


class _View(BaseModel):
    model_config = ConfigDict(defer_build=True)


class SampleSetSpec(Body):
    """``paddlecloud sampleset create NAME --source PFS_PATH [--cache-size SIZE] [--node N ...]``."""

    name: Annotated[str, AfterValidator(check_dns1123_label)]
    source: str = Field(min_length=1, max_length=MAX_PATH_BYTES, pattern=r"^/pfs/",
                        description="a PFS folder the owner may read (/pfs/...)")  # fmt: skip
    cache_size: str | None = Field(
        None,
        max_length=32,
        description="per-node cache cap (10Gi); default the source's size x 1.1, min 64Mi",
    )
    nodes: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        None, max_length=1024, description="the nodes to cache on (default: every node)"
    )


class SampleJobRequest(Body):
    kind: SampleJobKind
    path: str = Field("", max_length=4096, description='relative to the volume root ("" the whole volume)')


class NodeCacheView(_View):
    node: str
    mounted: bool
    cached_bytes: int
    message: str = ""
    #: jobs on this node read a plain node-local copy of the set (short-circuit), not the mount
    local_copy: bool = False


class SampleJobView(_View):
    id: int
    kind: str
    path: str
    phase: SampleJobPhase
    #: progress in the job's own unit (bytes for sync and warmup, files for rmr; 0/0 unknown)
    done: int
    total: int
    message: str
    created_at: float
    finished_at: float | None


class SampleJobList(_View):
    items: list[SampleJobView]


class SampleSetView(_View):
    name: str
    owner: str
    source: str
    phase: SampleSetPhase
    message: str
    files: int
    bytes: int
    cached_bytes: int
    cache_size: int
    nodes: list[NodeCacheView]
    #: latest first, at most 20
    jobs: list[SampleJobView]
    created_at: float
    #: set while it is being deleted (unmounting; the name is taken until it is gone)
    deleting: bool = False


class SampleSetList(_View):
    items: list[SampleSetView]
