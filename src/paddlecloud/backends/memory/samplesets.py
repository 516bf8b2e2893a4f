"""The memory backend's SampleSets: the ``SampleSetBackend`` contract over records, strict as a real one.

    MemoryEngine.volumes: uid -> _Volume (outlives a backend, like a volume on disk)
        files: relative path -> size (what a sync copied from the source folder)
        mounted: nodes it is mounted on now; cached: node -> bytes in that node's cache
    MemorySampleSets (one per backend; task states live here and are lost in a restart)

Refuses what a real engine would (``JobRejected``): a task, status or job launch on a SampleSet
never ``ensure``d (a job's nodes outside ``ref.nodes`` are mounted for it, as the local backend
does), a second task while one runs, an unknown
node, a source that is not a folder, a task path that is absolute or holds "..". ``unavailable``
(a message) makes ``ensure`` raise ``SampleSetsUnavailable``, as a machine without FUSE does.
Tasks end on the first ``task_status`` after they start, unless ``hold`` is set: the test then
ends them with ``finish``. ``close`` unmounts everything (the next ``ensure`` mounts again).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.errors import BackendUnavailable, JobRejected
from paddlecloud.backends.samplesets import (
    NodeCache,
    SampleSetRef,
    SampleSetStatus,
    SampleSetsUnavailable,
    SampleTask,
    SampleTaskKind,
    SampleTaskState,
    SampleTaskStatus,
)

__all__ = ["MemorySampleSets", "MemoryVolumes"]


@dataclass
class _Volume:
    ref: SampleSetRef
    files: dict[str, int] = field(default_factory=dict)
    mounted: set[str] = field(default_factory=set)
    cached: dict[str, int] = field(default_factory=dict)
    #: nodes mounted for a job outside ``ref.nodes`` (kept mounted, as the local backend pins them)
    attached: set[str] = field(default_factory=set)

    def size(self, path: str) -> int:
        if not path:
            return sum(self.files.values())
        return sum(n for p, n in self.files.items() if p == path or p.startswith(path + "/"))


@dataclass
class MemoryVolumes:
    """The volumes of one memory engine (what survives a restart of the backend)."""

    volumes: dict[str, _Volume] = field(default_factory=dict)
    #: set: ``ensure`` raises SampleSetsUnavailable with it (a machine without FUSE)
    unavailable: str | None = None
    #: set: ``ensure`` raises BackendUnavailable with it (a mount that failed for now)
    trouble: str | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)


def _check_path(path: str) -> None:
    if path.startswith("/") or ".." in path.split("/"):
        raise JobRejected(f"task path {path!r} must be relative to the volume root, without '..'")


class MemorySampleSets:
    """``backend.samplesets`` of the memory backend."""

    def __init__(self, volumes: MemoryVolumes, nodes: tuple[str, ...]) -> None:
        self.store = volumes
        self.nodes = nodes
        #: uid -> task id -> status (lost with the backend, as in-memory task states are)
        self.tasks: dict[str, dict[str, SampleTaskStatus]] = {}
        #: uid -> the task running now, if any
        self._running: dict[str, SampleTask] = {}
        #: keep tasks running until ``finish`` (False: they end at the next ``task_status``)
        self.hold = False
        #: calls made, in order, as (method, uid[, task id]) for tests
        self.calls: list[tuple[str, ...]] = []

    # -- what a test does ------------------------------------------------------------------------

    def finish(self, uid: str, task_id: str, ok: bool = True, message: str = "") -> None:
        with self.store.lock:
            vol, task = self._volume(uid), self._running[uid]
            assert task.id == task_id, f"{task_id} is not the running task ({task.id})"
            self._end(vol, task, ok, message)

    # -- contract --------------------------------------------------------------------------------

    def _volume(self, uid: str) -> _Volume:
        vol = self.store.volumes.get(uid)
        if vol is None:
            raise JobRejected(f"SampleSet volume {uid} was never ensured (formatted and mounted)")
        return vol

    def ensure(self, ref: SampleSetRef) -> None:
        with self.store.lock:
            self.calls.append(("ensure", ref.uid))
            if self.store.unavailable is not None:
                raise SampleSetsUnavailable(self.store.unavailable)
            if self.store.trouble is not None:
                raise BackendUnavailable(self.store.trouble)
            unknown = sorted(set(ref.nodes) - set(self.nodes))
            if unknown:
                raise JobRejected(f"no such node(s): {', '.join(unknown)}")
            if not ref.source.is_dir():
                raise JobRejected(f"source {ref.source} is not a folder")
            vol = self.store.volumes.setdefault(ref.uid, _Volume(ref))
            vol.ref = ref
            for gone in vol.mounted - set(ref.nodes) - vol.attached:
                vol.cached.pop(gone, None)
            vol.mounted = set(ref.nodes) | vol.attached

    def start_task(self, ref: SampleSetRef, task: SampleTask) -> None:
        with self.store.lock:
            self.calls.append(("start_task", ref.uid, task.id))
            vol = self._volume(ref.uid)
            if not vol.mounted:
                raise JobRejected(f"SampleSet {ref.key} is not mounted (ensure it first)")
            tasks = self.tasks.setdefault(ref.uid, {})
            if task.id in tasks:
                return  # running or done: nothing changes
            running = self._running.get(ref.uid)
            if running is not None:
                raise JobRejected(f"task {running.id} of {ref.key} still runs: one task at a time")
            _check_path(task.path)
            tasks[task.id] = SampleTaskStatus(SampleTaskState.RUNNING, 0, vol.size(task.path))
            self._running[ref.uid] = task

    def task_status(self, ref: SampleSetRef, task_id: str) -> SampleTaskStatus:
        with self.store.lock:
            vol = self._volume(ref.uid)
            found = self.tasks.get(ref.uid, {}).get(task_id)
            if found is None:
                return SampleTaskStatus(SampleTaskState.FAILED, message=f"unknown task {task_id}")
            running = self._running.get(ref.uid)
            if found.state == SampleTaskState.RUNNING and not self.hold and running is not None:
                self._end(vol, running, True, "")
            return self.tasks[ref.uid][task_id]

    def _end(self, vol: _Volume, task: SampleTask, ok: bool, message: str) -> None:
        uid = vol.ref.uid
        if ok:
            try:
                done = self._run(vol, task)
            except JobRejected as exc:
                ok, message, done = False, str(exc), 0
        else:
            done = 0
        state = SampleTaskState.SUCCEEDED if ok else SampleTaskState.FAILED
        self.tasks[uid][task.id] = SampleTaskStatus(state, done, done, message)
        self._running.pop(uid, None)

    def _run(self, vol: _Volume, task: SampleTask) -> int:
        """What the task does to the records; the progress it ends at."""
        if task.kind == SampleTaskKind.SYNC:
            src = vol.ref.source
            if not src.is_dir():
                raise JobRejected(f"source {src} is gone")
            vol.files = {
                str(p.relative_to(src)): p.stat().st_size for p in sorted(src.rglob("*")) if p.is_file()
            }
            return sum(vol.files.values())
        if task.kind == SampleTaskKind.WARMUP:
            want = min(vol.size(task.path), vol.ref.cache_size)
            for node in vol.mounted:
                vol.cached[node] = min(max(vol.cached.get(node, 0), want), vol.ref.cache_size)
            return want
        if task.kind == SampleTaskKind.CLEAR:
            vol.cached.clear()
            return 0
        gone = [p for p in vol.files if p == task.path or p.startswith(task.path + "/")]
        if not gone:
            raise JobRejected(f"rmr: {task.path} does not exist in the SampleSet")
        for p in gone:
            del vol.files[p]
        for node, n in vol.cached.items():  # its cached blocks go with it
            vol.cached[node] = min(n, sum(vol.files.values()))
        return len(gone)

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        with self.store.lock:
            vol = self._volume(ref.uid)
            return SampleSetStatus(
                files=len(vol.files),
                bytes=sum(vol.files.values()),
                nodes=tuple(NodeCache(n, n in vol.mounted, vol.cached.get(n, 0)) for n in ref.nodes),
            )

    def delete(self, ref: SampleSetRef) -> None:
        with self.store.lock:
            self.calls.append(("delete", ref.uid))
            self.store.volumes.pop(ref.uid, None)
            self.tasks.pop(ref.uid, None)
            self._running.pop(ref.uid, None)

    # -- for the backend -------------------------------------------------------------------------

    def check_launch(self, launch: JobLaunch) -> Path | None:
        """Where the job's workers would see the data: refuses a SampleSet never ensured or another
        user's; mounts it (without cache) on the job's nodes outside ``ref.nodes``, as local does."""
        ref = launch.sampleset
        if ref is None:
            return None
        with self.store.lock:
            vol = self._volume(ref.uid)
            if self.store.unavailable is not None:
                raise JobRejected(self.store.unavailable)
            extra = {p.node for p in launch.placement} - vol.mounted
            vol.attached |= extra
            vol.mounted |= extra
            if ref.owner != launch.user:
                raise JobRejected(f"job of {launch.user} names {ref.owner}'s SampleSet {ref.name}")
        return Path("/memory/samplesets") / ref.uid

    def close(self) -> None:
        with self.store.lock:
            for vol in self.store.volumes.values():
                vol.mounted.clear()
                vol.attached.clear()
