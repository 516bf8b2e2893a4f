"""The node side of SampleSets on Slurm: what runs ON a compute node, started there by Slurm.

The server (``samplesets.py``) does only what needs the shared file system (format the volume,
its writable admin mount for sync and rmr); everything that touches a node's own disk runs in a
Slurm job on that node, as ``PYTHON -I -m paddlecloud.backends.slurm.samplenode COMMAND ...``::

    warmup  (sbatch -w NODE)  mount read-only with the node's cache dir, ``juicefs warmup``, unmount
    clear   (sbatch -w NODE)  the whole cache: delete the node's cache dir; a path: mount, evict it
    purge   (sbatch -w NODE)  the SampleSet is deleted: remove its caches and runs on this node
    run     (a worker's batch script, before the worker): mount the volume read-only for this run,
            start the worker (its launcher, or its sandbox which binds the mount read-only), wait,
            put the blocks it read into the node's cache, unmount

Node-local layout (``SlurmSettings.node_cache``, ``--slurm-node-cache``)::

    <node_cache>/nodes/<node>/<uid>/cache     the node's block cache of one SampleSet (kept
                                              between jobs: what warmup fills and clear empties)
    <node_cache>/nodes/<node>/<uid>/task.lock flock: one warmup / clear at a time there
    <node_cache>/runs/<run>/mnt               one mount per worker run or node job, read-only
    <node_cache>/runs/<run>/cache             that mount's own cache dir: hard links to the node's
                                              cached blocks (made at start; new blocks are linked
                                              back into the node's cache at the end)
    <node_cache>/runs/<run>.owner             flock held while the run lives

No mount outlives the job that made it: the JuiceFS client is the job's own child (not a daemon;
``Volume.serve``), is sent SIGTERM if the job's process dies however it dies, and Slurm's process
tracking (cgroups on a real cluster) ends it with the job. A node failure can still leave a dead
mount and a run folder: every command here first sweeps the runs whose owner is gone (its flock is
free), under ``runs/.sweep``'s flock.

Why each mount has a cache dir of its own: JuiceFS clients do not coordinate over a shared cache
dir (each keeps its own index and size count from a scan at start, so the cap is per client and
one client's eviction deletes blocks another indexed; the maintainers advise one cache dir per
client). A run's cache dir is made of hard links to the node's cached blocks (same disk, no data
copied; JuiceFS writes blocks once, by rename, and never changes them), so the run reads the warm
cache, owns what it evicts, and what it adds is linked back for the next job.

Reports go to the volume's folder on the shared file system (``reports/``, what the server reads, JSON):
``reports/<node>.json`` (this node's cached bytes, after every change) and, per node job,
``reports/tasks/<task>.<node>.json`` (progress, then the outcome). Exit statuses: 0, or
:data:`CANNOT_MOUNT` (no FUSE here, no juicefs binary, the mount failed) with the reason on stderr
(the job's log) and, for a worker run, in its launcher's status file.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.backends.slurm.jail import fail_run
from paddlecloud.runtime.launcher import write_json_atomic
from paddlecloud.storage.juicefs import (
    FuseUnavailable,
    JuiceFSError,
    Volume,
    cached_bytes,
    link_cache,
    mounts_under,
    stop_client,
)

__all__ = ["CANNOT_MOUNT", "NodePaths", "main", "node_name", "task_report"]

#: the exit status of a worker run or node job whose SampleSet could not be mounted on its node
CANNOT_MOUNT = 125
#: after a warmup, how long to wait for the client to write what it fetched (seconds): at most, and
#: without growth (a cache cap smaller than the data), polled this often
_SETTLE_MAX, _SETTLE_QUIET, _SETTLE_POLL = 120.0, 3.0, 0.2


def task_report(reports: Path, task: str, node: str) -> Path:
    """Where a node job writes its progress and outcome (``reports``: the volume's ``reports/``)."""
    return reports / "tasks" / f"{task}.{node}.json"


def node_name() -> str:
    """This node's Slurm name (``SLURMD_NODENAME``; the host name outside Slurm)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


@dataclass(frozen=True)
class NodePaths:
    """Where things are under a node's ``node_cache`` folder (the same path on every node)."""

    root: Path

    def cache(self, node: str, uid: str) -> Path:
        return self.root / "nodes" / node / uid / "cache"

    def run(self, run: str) -> Path:
        return self.root / "runs" / run

    def mountpoint(self, run: str) -> Path:
        """Where a run sees the SampleSet (``PADDLECLOUD_SAMPLESET_DIR`` of a worker run)."""
        return self.run(run) / "mnt"


@contextlib.contextmanager
def _flock(path: Path, *, wait: bool = True) -> Iterator[int | None]:
    """An exclusive flock on ``path`` (created); None when ``wait`` is False and it is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def _sweep(paths: NodePaths, volume: Volume) -> None:
    """Remove the runs whose owner is gone (a killed job, a failed node): their dead mounts
    detached, their folders removed. Call with ``runs/.sweep`` held."""
    runs = paths.root / "runs"
    for owner in sorted(runs.glob("*.owner")):
        with _flock(owner, wait=False) as fd:
            if fd is None:
                continue  # alive
            run = owner.with_suffix("")
            for mp in mounts_under(run):
                with contextlib.suppress(JuiceFSError):
                    volume.umount(mp)
            if not mounts_under(run):
                shutil.rmtree(run, ignore_errors=True)
                owner.unlink(missing_ok=True)


@contextlib.contextmanager
def _own_run(paths: NodePaths, volume: Volume, run: str) -> Iterator[Path]:
    """Sweep the stale runs, then hold this run's folder (created empty) until the block ends;
    then unmount what is left below it and remove it."""
    runs = paths.root / "runs"
    owner = runs / f"{run}.owner"
    with _flock(runs / ".sweep"):
        _sweep(paths, volume)
        stack = contextlib.ExitStack()
        stack.enter_context(_flock(owner))
        folder = paths.run(run)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    with stack:
        try:
            yield folder
        finally:
            for mp in mounts_under(folder):
                with contextlib.suppress(JuiceFSError):
                    volume.umount(mp)
            shutil.rmtree(folder, ignore_errors=True)
            owner.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Args:
    volume: Volume
    paths: NodePaths
    node: str
    cache_size: int
    reports: Path
    task: str
    path: str


def _report(a: _Args) -> None:
    """This node's cached bytes of the SampleSet, for the server's status."""
    held = cached_bytes(a.paths.cache(a.node, a.volume.name))
    data = {"node": a.node, "cached_bytes": held, "at": time.time()}
    a.reports.mkdir(parents=True, exist_ok=True)
    write_json_atomic(str(a.reports / f"{a.node}.json"), data)


def _task_report(a: _Args, **fields: object) -> None:
    """This node job's progress and, at the end, its outcome (kept: the last progress)."""
    path = task_report(a.reports, a.task, a.node)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.update(node=a.node, task=a.task, **fields)
    write_json_atomic(str(path), data)


@contextlib.contextmanager
def _mounted(a: _Args, folder: Path, cache: Path) -> Iterator[Path]:
    """The volume mounted read-only at ``folder/mnt`` with ``cache`` as its cache dir, for the block."""
    mnt = folder / "mnt"
    client = a.volume.serve(mnt, cache, a.cache_size)
    try:
        yield mnt
    finally:
        with contextlib.suppress(JuiceFSError):
            a.volume.umount(mnt)
        stop_client(client)


def _warmup(a: _Args) -> None:
    wanted = [0]

    def progress(done: int, total: int) -> None:
        wanted[0] = total
        _task_report(a, done=done, total=total, finished=False)

    # the node's own cache dir: this job is the one client that writes it directly (one node job
    # at a time per SampleSet and node: a server restarted mid-task submits it again)
    cache = a.paths.cache(a.node, a.volume.name)
    with (
        _flock(cache.parent / "task.lock"),
        _own_run(a.paths, a.volume, f"{a.volume.name}.{a.task}.{a.node}") as folder,
        _mounted(a, folder, cache) as mnt,
    ):
        a.volume.warmup(mnt, a.path, progress)
        _written(cache, wanted[0])


def _written(cache: Path, total: int) -> None:
    """Wait (bounded) until the client has written what it fetched into ``cache``: ``juicefs
    warmup`` returns once the blocks are fetched, and the client writes them to disk behind it;
    unmounted before that, they would be lost. Done when the cache holds ``total`` bytes, or has
    not grown for a while (a cap smaller than the data)."""
    deadline, last, still = time.monotonic() + _SETTLE_MAX, -1, 0.0
    while time.monotonic() < deadline:
        held = cached_bytes(cache)
        if held >= total:
            return
        if held == last:
            still += _SETTLE_POLL
            if still >= _SETTLE_QUIET:
                return
        else:
            last, still = held, 0.0
        time.sleep(_SETTLE_POLL)


def _clear(a: _Args) -> None:
    cache = a.paths.cache(a.node, a.volume.name)
    if not a.path.strip("/"):  # everything: the runs keep their own links until they end
        with _flock(cache.parent / "task.lock"):
            shutil.rmtree(cache, ignore_errors=True)
        return
    with (
        _flock(cache.parent / "task.lock"),
        _own_run(a.paths, a.volume, f"{a.volume.name}.{a.task}.{a.node}") as folder,
        _mounted(a, folder, cache) as mnt,
    ):
        a.volume.evict(mnt, a.path)


def _purge(a: _Args) -> None:
    with _flock(a.paths.root / "runs" / ".sweep"):
        _sweep(a.paths, a.volume)
    shutil.rmtree(a.paths.cache(a.node, a.volume.name).parent, ignore_errors=True)


def _node_job(a: _Args, work: Callable[[_Args], None], *, report: bool = True) -> int:
    """A warmup / clear / purge job: its outcome in its task report, this node's cache in the
    node report (not for a purge: the volume's folder is gone)."""
    try:
        work(a)
    except (JuiceFSError, OSError) as exc:
        where = f"on {a.node}: {exc}"
        print(f"paddlecloud: SampleSet {a.task} failed {where}", file=sys.stderr, flush=True)
        if report:
            _task_report(a, finished=True, ok=False, message=where)
            with contextlib.suppress(OSError):
                _report(a)
        return CANNOT_MOUNT if isinstance(exc, FuseUnavailable) else 1
    if report:
        _report(a)
        _task_report(a, finished=True, ok=True, message="")
    return 0


def _cannot_mount(status: str, message: str) -> int:
    return fail_run(
        os.path.dirname(status) if status else "",
        CANNOT_MOUNT,
        f"the SampleSet cannot be mounted here: {message}",
    )


def _run(a: _Args, run: str, status: str, argv: list[str]) -> int:
    """A worker's run: mount, run ``argv`` (its launcher or sandbox) with the mount in place, then
    keep what it read in the node's cache and unmount. A stop's SIGTERM goes to every process of
    the Slurm job (``scancel --full``): this one waits for the worker instead."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    node_cache = a.paths.cache(a.node, a.volume.name)
    code: int | None = None
    try:
        with _own_run(a.paths, a.volume, run) as folder:
            own = folder / "cache"
            link_cache(node_cache, own)
            try:
                with _mounted(a, folder, own):
                    worker = subprocess.Popen(argv, restore_signals=True, preexec_fn=_default_signals)
                    code = worker.wait()
            finally:
                with contextlib.suppress(OSError):
                    link_cache(own, node_cache)  # what this run read: there for the next job
                    _report(a)
    except (JuiceFSError, OSError) as exc:
        if code is None:
            return _cannot_mount(status, f"{a.volume.name} on {a.node}: {exc}")
        print(f"paddlecloud: after the run, on {a.node}: {exc}", file=sys.stderr, flush=True)
    assert code is not None
    return code if code >= 0 else 128 - code


def _default_signals() -> None:  # pragma: no cover - runs in the child between fork and exec
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m paddlecloud.backends.slurm.samplenode")
    p.add_argument("command", choices=("warmup", "clear", "purge", "run"))
    p.add_argument("--volume", required=True, type=Path, help="the volume's folder (shared file system)")
    p.add_argument("--name", required=True, help="the volume's name (the SampleSet's uid)")
    p.add_argument("--node-cache", required=True, type=Path, help="the node-local folder")
    p.add_argument("--cache-size", type=int, default=0, help="the cache cap, bytes")
    p.add_argument("--task", default="", help="the task's id (its report's name)")
    p.add_argument("--path", default="", help="warmup / clear: a path inside the volume")
    p.add_argument("--run", default="", help="run: this run's name (its folder under runs/)")
    p.add_argument("--status", default="", help="run: the launcher's status file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cut = args.index("--") if "--" in args else len(args)
    ns = _parser().parse_args(args[:cut])
    command = args[cut + 1 :]  # run: the worker's command
    volume = Volume(ns.volume, ns.name)
    paths = NodePaths(ns.node_cache)
    a = _Args(volume, paths, node_name(), ns.cache_size, ns.volume / "reports", ns.task, ns.path)
    if ns.command == "run":
        if not ns.run or not command:
            print("run needs --run and the worker's command after --", file=sys.stderr)
            return 2
        return _run(a, ns.run, ns.status, command)
    work = {"warmup": _warmup, "clear": _clear, "purge": _purge}[ns.command]
    return _node_job(a, work, report=ns.command != "purge")


if __name__ == "__main__":
    sys.exit(main())
