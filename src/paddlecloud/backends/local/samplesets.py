"""SampleSets on the local backend: one JuiceFS volume per SampleSet, mounted once per emulated node.

Layout under ``<cluster>/samplesets/<uid>/`` (the volume's root, ``storage.juicefs.Volume``)::

    meta.db, objects/, logs/     the volume (SQLite metadata, file objects) and its mount logs
    admin/                       the writable mount: syncs and rmr go through it (no block cache)
    nodes/<node>/mnt             each node's read-only mount: what that node's workers see at
    nodes/<node>/cache           PADDLECLOUD_SAMPLESET_DIR, and its block cache (capped at
                                 ``ref.cache_size``)
    nodes/<node>/copy            a plain copy of the whole volume (short-circuit reads,
    nodes/<node>/copy.json       ``storage.nodecopy``) and its record {generation, files, bytes}
    generation                   bumped by every sync, rmr and clear: a copy of an older one is stale

Short-circuit reads: a whole-set warmup copies the volume (from the admin mount) onto each node
whose cache cap and disk hold it, instead of filling that node's JuiceFS cache; jobs starting there
then read the copy, read-only, at local-disk speed (no FUSE round trip per file). A sync, rmr or
clear makes every copy stale at once (new jobs get the mount); a stale copy is removed once no job
on its node uses it, and the next warmup copies again. Sets larger than the cache, partial warmups
and nodes not warmed yet use the mount.

Flow (``backends.samplesets`` has the contract)::

    controller ──ensure(ref)──▶ format once, mount admin + ref.nodes (unmount nodes dropped, unless
                                a job uses them)
               ──start_task──▶ a worker thread per task, one at a time per SampleSet (its lock):
                                sync (admin), warmup / clear (every node mount), rmr (admin); after
                                a sync or rmr, idle node mounts are remounted to see the new tree
               ──task_status / status──▶ from memory / from the volume and the cache dirs
               ──delete──▶ cancel the task, unmount everything below the folder, remove it
    LocalBackend.start ──attach(ref, job, nodes)──▶ {node: mount} (mounted if missing, pinned
                                until ``detach(job)``);  LocalBackend.close ──close()──▶ unmount all

Task status lives in memory: after a server restart an unknown id is FAILED and the controller
issues the task again. Mounting is refused at once (``SampleSetsUnavailable``) where there is no
FUSE device or no juicefs binary; a mount that fails is ``BackendUnavailable`` (tried again).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from paddlecloud.backends.errors import BackendUnavailable
from paddlecloud.backends.sampleset_state import Cancelled, SetRecord, TaskRecord
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
from paddlecloud.storage.juicefs import (
    FuseUnavailable,
    JuiceFSError,
    Volume,
    cached_bytes,
    check_fuse,
    find_juicefs,
    mounts_under,
)
from paddlecloud.storage.nodecopy import CopyError, copy_tree, plan

__all__ = ["LocalSampleSets"]

log = logging.getLogger("paddlecloud.backends.local.samplesets")

#: how long delete and close wait for a cancelled task's thread
_JOIN = 30.0


class LocalSampleSets:
    """``SampleSetBackend`` of the local backend (``nodes``: the emulated nodes' names)."""

    def __init__(self, root: Path, nodes: Iterable[str], local_copies: bool = True) -> None:
        self.root = root
        self.nodes = tuple(nodes)
        #: make node-local copies of sets that fit (short-circuit reads); False: mounts only
        self.local_copies = local_copies
        self._sets: dict[str, SetRecord] = {}
        self._pins: dict[str, tuple[str, frozenset[str]]] = {}  # job key -> (uid, nodes)
        self._lock = threading.Lock()

    # -- paths -----------------------------------------------------------------------------------

    def folder(self, uid: str) -> Path:
        return self.root / uid

    def admin(self, uid: str) -> Path:
        return self.folder(uid) / "admin"

    def mountpoint(self, uid: str, node: str) -> Path:
        """Where ``node``'s workers see the SampleSet (its read-only mount)."""
        return self.folder(uid) / "nodes" / node / "mnt"

    def cache_dir(self, uid: str, node: str) -> Path:
        return self.folder(uid) / "nodes" / node / "cache"

    def copy_dir(self, uid: str, node: str) -> Path:
        """Where ``node``'s plain copy of the whole volume lives (short-circuit reads)."""
        return self.folder(uid) / "nodes" / node / "copy"

    def view(self, uid: str, node: str) -> Path:
        """What a job starting on ``node`` now is shown: its current copy, else its mount."""
        return self.copy_dir(uid, node) if self._copy(uid, node) is not None else self.mountpoint(uid, node)

    # -- the contract ----------------------------------------------------------------------------

    def ensure(self, ref: SampleSetRef) -> None:
        s = self._set(ref)
        with s.mounting:
            self._format(s)
            self._mount_admin(s)
            for node in self._known(ref.nodes):
                self._mount_node(s, node)
            for node in self._mounted_nodes(ref.uid) - set(ref.nodes) - self._pinned(ref.uid):
                self._umount(s.volume, self.mountpoint(ref.uid, node))
        self._reap(s)

    def start_task(self, ref: SampleSetRef, task: SampleTask) -> None:
        s = self._set(ref)
        with self._lock:
            if task.id in s.tasks:
                return
            t = s.tasks[task.id] = TaskRecord(task)
        t.thread = threading.Thread(target=self._run, args=(s, t), name=f"sampleset-{ref.uid}-{task.id}")
        t.thread.daemon = True
        t.thread.start()

    def task_status(self, ref: SampleSetRef, task_id: str) -> SampleTaskStatus:
        with self._lock:
            s = self._sets.get(ref.uid)
            t = s.tasks.get(task_id) if s is not None else None
            if t is None:
                return SampleTaskStatus(
                    SampleTaskState.FAILED, message="this task is unknown here (the server restarted?)"
                )
            return t.view()

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        """Raises ``BackendUnavailable`` while the volume exists but no mount of it answers (after
        a restart, before ``ensure``): the caller keeps what it knew rather than zeros."""
        s = self._set(ref)
        usage = s.usage  # the volume changes only in a sync or rmr (which forget the count)
        nodes_up = sorted(self._mounted_nodes(ref.uid))
        for mp in [self.admin(ref.uid)] + [self.mountpoint(ref.uid, n) for n in nodes_up]:
            if usage is None and s.volume.is_mounted(mp):
                with contextlib.suppress(JuiceFSError):
                    usage = s.volume.usage(mp)
        if not s.work.locked():  # no task running: the count holds until the next one
            s.usage = usage
        if usage is None and (self.folder(ref.uid) / "meta.db").exists():
            raise BackendUnavailable(f"SampleSet {ref.key} is not mounted here yet (ensure mounts it)")
        files, size = usage or (0, 0)
        nodes = []
        for node in ref.nodes:
            known = node in self.nodes
            copy = self._copy_record(ref.uid, node)
            nodes.append(
                NodeCache(
                    node=node,
                    mounted=known and s.volume.is_mounted(self.mountpoint(ref.uid, node)),
                    cached_bytes=cached_bytes(self.cache_dir(ref.uid, node)) + (copy or {}).get("bytes", 0),
                    message="" if known else f"no node {node} in this cluster",
                    local_copy=self._copy(ref.uid, node) is not None,
                )
            )
        return SampleSetStatus(files=files, bytes=size, nodes=tuple(nodes))

    def delete(self, ref: SampleSetRef) -> None:
        s = self._set(ref)
        s.cancel.set()
        for t in list(s.tasks.values()):
            if t.thread is not None:
                t.thread.join(_JOIN)
        with s.mounting:
            for mp in mounts_under(self.folder(ref.uid)):
                self._umount(s.volume, mp)
            try:
                s.volume.destroy()
            except JuiceFSError as exc:
                raise BackendUnavailable(str(exc)) from None
            shutil.rmtree(self.folder(ref.uid), ignore_errors=True)
        with self._lock:
            self._sets.pop(ref.uid, None)
            for key in [k for k, (uid, _) in self._pins.items() if uid == ref.uid]:
                del self._pins[key]

    # -- jobs and shutdown -----------------------------------------------------------------------

    def attach(self, ref: SampleSetRef, job: str, nodes: Iterable[str]) -> dict[str, Path]:
        """The mount each of ``nodes`` shows ``job``'s workers (mounted where missing), kept
        mounted until :meth:`detach`. Raises ``SampleSetsUnavailable`` / ``BackendUnavailable``."""
        wanted = frozenset(nodes)
        with self._lock:
            self._pins[job] = (ref.uid, wanted)
        s = self._set(ref)
        with s.mounting:
            self._format(s)
            for node in sorted(wanted):
                self._mount_node(s, node)
        return {node: self.view(ref.uid, node) for node in wanted}

    def detach(self, job: str) -> None:
        with self._lock:
            self._pins.pop(job, None)

    def close(self) -> list[Path]:
        """Stop the running tasks and unmount every SampleSet mount no running job uses (``ensure``
        mounts them again). A running job's mounts stay, since its workers outlive the server and
        read through them: returned (``down`` names them; the next server takes them over)."""
        with self._lock:
            sets = list(self._sets.values())
            in_use = {  # as mountinfo names them (resolved)
                Path(os.path.realpath(self.mountpoint(uid, n)))
                for uid, nodes in self._pins.values()
                for n in nodes
            }
        for s in sets:
            s.cancel.set()
        for s in sets:
            for t in list(s.tasks.values()):
                if t.thread is not None:
                    t.thread.join(_JOIN)
        kept = []
        for mp in mounts_under(self.root):
            if mp in in_use:
                kept.append(mp)
                continue
            with contextlib.suppress(JuiceFSError):
                Volume(self.root, "close").umount(mp)
        if kept:
            log.info("SampleSet mounts left for running jobs: %s", ", ".join(map(str, kept)))
        return kept

    # -- internals -------------------------------------------------------------------------------

    def _set(self, ref: SampleSetRef) -> SetRecord:
        with self._lock:
            s = self._sets.get(ref.uid)
            if s is None:
                s = self._sets[ref.uid] = SetRecord(ref, Volume(self.folder(ref.uid), ref.uid))
            s.ref = ref
            return s

    def _known(self, nodes: Iterable[str]) -> list[str]:
        return [n for n in nodes if n in self.nodes]

    def _pinned(self, uid: str) -> set[str]:
        with self._lock:
            return {n for u, nodes in self._pins.values() if u == uid for n in nodes}

    def _mounted_nodes(self, uid: str) -> set[str]:
        base = self.folder(uid) / "nodes"
        return {mp.parent.name for mp in mounts_under(base) if mp.name == "mnt" and mp.parent.parent == base}

    @staticmethod
    def _format(s: SetRecord) -> None:
        if s.formatted:
            return
        try:
            check_fuse()
            find_juicefs()
        except FuseUnavailable as exc:
            raise SampleSetsUnavailable(str(exc)) from None
        try:
            s.volume.format()
        except JuiceFSError as exc:
            raise BackendUnavailable(f"SampleSet {s.ref.key}: {exc}") from None
        s.formatted = True

    def _mount(self, s: SetRecord, mountpoint: Path, cache: Path, size: int, read_only: bool) -> None:
        try:
            s.volume.mount(mountpoint, cache, size, read_only=read_only)
        except FuseUnavailable as exc:
            raise SampleSetsUnavailable(str(exc)) from None
        except JuiceFSError as exc:
            raise BackendUnavailable(f"SampleSet {s.ref.key}: {exc}") from None

    def _mount_admin(self, s: SetRecord) -> None:
        uid = s.ref.uid
        self._mount(s, self.admin(uid), self.folder(uid) / "admin-cache", 0, read_only=False)

    def _mount_node(self, s: SetRecord, node: str) -> None:
        uid = s.ref.uid
        self._mount(
            s, self.mountpoint(uid, node), self.cache_dir(uid, node), s.ref.cache_size, read_only=True
        )

    @staticmethod
    def _umount(volume: Volume, mountpoint: Path) -> None:
        try:
            volume.umount(mountpoint)
        except JuiceFSError as exc:
            raise BackendUnavailable(str(exc)) from None

    # -- tasks -----------------------------------------------------------------------------------

    def _run(self, s: SetRecord, t: TaskRecord) -> None:
        with s.work:
            try:
                if s.cancel.is_set():
                    raise Cancelled
                s.usage = None
                self._do(s, t)
                t.state = SampleTaskState.SUCCEEDED
            except Cancelled:
                t.state, t.message = SampleTaskState.FAILED, "cancelled (the SampleSet is being deleted)"
            except (JuiceFSError, BackendUnavailable, SampleSetsUnavailable, OSError) as exc:
                t.state, t.message = SampleTaskState.FAILED, str(exc)
            except Exception as exc:  # never leave a task running forever: fail it with the cause
                log.exception("SampleSet task %s of %s failed", t.task.id, s.ref.key)
                t.state, t.message = SampleTaskState.FAILED, f"{type(exc).__name__}: {exc}"
            finally:
                s.usage = None  # what it changed is counted afresh

    @staticmethod
    def _progress(s: SetRecord, t: TaskRecord, index: int = 0, count: int = 1) -> Callable[[int, int], None]:
        """A progress callback that stops the command once the SampleSet is being deleted;
        ``index`` of ``count``: this step's place among equal ones (the same warmup per node)."""

        def report(done: int, total: int) -> None:
            if s.cancel.is_set():
                raise Cancelled
            t.done, t.total = index * total + done, total * count

        return report

    def _do(self, s: SetRecord, t: TaskRecord) -> None:
        ref, kind, vol = s.ref, t.task.kind, s.volume
        if kind in (SampleTaskKind.SYNC, SampleTaskKind.RMR, SampleTaskKind.CLEAR):
            self._bump(ref.uid)  # every copy is stale from now on: new jobs get the mount
            self._reap(s, busy_ok=True)
        if kind in (SampleTaskKind.SYNC, SampleTaskKind.RMR):
            with s.mounting:
                self._format(s)
                self._mount_admin(s)
            if kind == SampleTaskKind.SYNC:
                if not ref.source.is_dir():
                    raise JuiceFSError(f"the source {ref.source} is not a folder")
                vol.sync(ref.source, self.admin(ref.uid), self._progress(s, t))
            else:
                t.total = 1
                vol.rmr(self.admin(ref.uid), t.task.path)
                t.done = 1
            self._refresh_nodes(s)
            return
        nodes = self._known(ref.nodes)
        with s.mounting:
            self._format(s)
            for node in nodes:
                self._mount_node(s, node)
        for i, node in enumerate(nodes):
            mnt = self.mountpoint(ref.uid, node)
            if kind == SampleTaskKind.WARMUP:
                report = self._progress(s, t, index=i, count=len(nodes))
                if t.task.path or not self._make_copy(s, node, report):
                    vol.warmup(mnt, t.task.path, report)
            else:
                if s.cancel.is_set():
                    raise Cancelled
                self._clear(s, node, t.task.path)
                t.done, t.total = i + 1, len(nodes)

    def _clear(self, s: SetRecord, node: str, path: str) -> None:
        """Drop ``path`` ("" all) from ``node``'s cache: evict what the volume holds there; for the
        whole cache, where blocks of files no longer in the volume remain and no job uses the
        mount, wipe the cache dir under a fresh mount."""
        uid = s.ref.uid
        s.volume.evict(self.mountpoint(uid, node), path)
        if path or cached_bytes(self.cache_dir(uid, node)) == 0 or node in self._pinned(uid):
            return
        with s.mounting:
            self._umount(s.volume, self.mountpoint(uid, node))
            shutil.rmtree(self.cache_dir(uid, node), ignore_errors=True)
            self._mount_node(s, node)

    # -- node-local copies (short-circuit reads) -------------------------------------------------

    def _generation(self, uid: str) -> int:
        try:
            return int((self.folder(uid) / "generation").read_text())
        except (OSError, ValueError):
            return 0

    def _bump(self, uid: str) -> None:
        path = self.folder(uid) / "generation"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name("generation.tmp")
        tmp.write_text(str(self._generation(uid) + 1))
        tmp.replace(path)

    def _copy_record(self, uid: str, node: str) -> dict[str, int] | None:
        """The record of ``node``'s copy ({generation, files, bytes}), current or stale; None: none."""
        try:
            rec = json.loads((self.copy_dir(uid, node).with_name("copy.json")).read_text())
            return {k: int(rec[k]) for k in ("generation", "files", "bytes")}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _copy(self, uid: str, node: str) -> dict[str, int] | None:
        """The record of ``node``'s copy when it is current (a whole copy of the volume as it is)."""
        rec = self._copy_record(uid, node)
        if rec is None or rec["generation"] != self._generation(uid) or not self.copy_dir(uid, node).is_dir():
            return None
        return rec

    def _make_copy(self, s: SetRecord, node: str, report: Callable[[int, int], None]) -> bool:
        """Copy the whole volume onto ``node`` (True), unless it is there already (True) or it does
        not fit the node's cache cap or disk, or the node's stale copy is still read by a job (False:
        the caller warms the mount's cache instead)."""
        uid = s.ref.uid
        if not self.local_copies:
            return False
        if self._copy(uid, node) is not None:
            return True
        copy = self.copy_dir(uid, node)
        if copy.exists() and node in self._pinned(uid):
            return False
        with s.mounting:
            self._mount_admin(s)
        size = (s.usage or s.volume.usage(self.admin(uid)))[1]
        why = plan(size, s.ref.cache_size, copy.parent)
        if why is not None:
            log.info("SampleSet %s on %s: no local copy: %s", s.ref.key, node, why)
            return False
        generation = self._generation(uid)
        self._drop_copy(uid, node)
        tmp = copy.with_name("copy.tmp")
        try:
            files, size = copy_tree(self.admin(uid), tmp, report)
        except CopyError as exc:
            log.warning("SampleSet %s on %s: no local copy: %s", s.ref.key, node, exc)
            return False
        record = copy.with_name("copy.json.tmp")
        record.write_text(json.dumps({"generation": generation, "files": files, "bytes": size}))
        tmp.replace(copy)
        record.replace(copy.with_name("copy.json"))
        s.volume.evict(self.mountpoint(uid, node), "")  # the copy supersedes the node's block cache
        return True

    def _reap(self, s: SetRecord, busy_ok: bool = False) -> None:
        """Remove the stale copies no job reads (``busy_ok``: the caller holds the task lock)."""
        uid = s.ref.uid
        if not busy_ok and not s.work.acquire(blocking=False):
            return  # a task runs: it reaps itself
        try:
            base = self.folder(uid) / "nodes"
            nodes = {p.parent.name for p in base.glob("*/copy*")} - self._pinned(uid)
            for node in sorted(nodes):
                if self._copy(uid, node) is None:
                    self._drop_copy(uid, node)
        finally:
            if not busy_ok:
                s.work.release()

    def _drop_copy(self, uid: str, node: str) -> None:
        """Remove ``node``'s copy, a half-made one and its record."""
        copy = self.copy_dir(uid, node)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(copy.with_name("copy.tmp"), ignore_errors=True)
        copy.with_name("copy.json").unlink(missing_ok=True)

    def _refresh_nodes(self, s: SetRecord) -> None:
        """Remount the idle node mounts (their metadata caches would show the old tree for an hour);
        a mount a job uses keeps its view until the job ends."""
        uid = s.ref.uid
        with s.mounting:
            for node in sorted(self._mounted_nodes(uid) - self._pinned(uid)):
                started = time.monotonic()
                self._umount(s.volume, self.mountpoint(uid, node))
                self._mount_node(s, node)
                log.debug("remounted %s on %s in %.1f s", uid, node, time.monotonic() - started)
