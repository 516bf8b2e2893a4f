"""A job's own folders on a backend's disk: what they hold, and what goes when the job ends.

The local and Slurm backends keep every job under ``<root>/jobs/<user>/<name>/`` (the workers'
copies of the package, their /tmp, logs, statuses; docs/pfs.md "What counts"). Two things are
done to that folder here, the same for both:

    disk_usage(key) ──walk_bytes(job dir)──▶ running totals ──▶ the controller's disk watch
                                                               (controller/loop/diskwatch.py: the owner's
                                                               storage use, the quota)
    the job ends ──drop_scratch(job dir, SCRATCH)──▶ renamed into .trash/ at once, removed there by a
                                                     thread (a tree of a million files takes
                                                     seconds: never in the reconcile loop)

``walk_bytes`` counts the space each entry takes (a file at least its size and at least its blocks,
so neither a sparse file nor a million one-byte files hide; a folder its blocks). It never follows a
link: every folder is opened relative to its parent's descriptor with ``O_NOFOLLOW``, so a job that
swaps a folder for a link to ``/`` while it is walked gets the link counted, not ``/``. It yields a
running total every ``every`` entries, so its caller can pause it (a time budget) and resume it
later. A folder nested deeper than ``max_depth`` (each level holds one descriptor while the walk is
paused) or one it may not enter is a :class:`DiskWalkError`: bytes that cannot be counted are never
counted as none.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["SCRATCH", "TRASH", "DiskWalkError", "drop_scratch", "sweep_trash", "walk_bytes"]

log = logging.getLogger("paddlecloud.backends")

#: the folders of a job directory that are removed as soon as the job ends: the unpacked package,
#: the workers' copies of it (their working directories) and their /tmp. A re-run after a
#: preemption gets fresh copies anyway; logs, statuses and the launch record stay
SCRATCH = ("workers", "tmp", "package")
#: where ``drop_scratch`` moves them before they are removed (inside the job dir: still counted)
TRASH = ".trash"
#: deeper than this the walk gives up (and says so): each level holds a descriptor while it is paused
MAX_DEPTH = 128

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_names = itertools.count()


class DiskWalkError(Exception):
    """What a job's folders hold cannot be told (too deep, a folder the server may not read)."""


def _charge(s: os.stat_result) -> int:
    """The bytes an entry takes: its blocks, and a regular file at least its size."""
    taken = s.st_blocks * 512
    return max(taken, s.st_size) if stat.S_ISREG(s.st_mode) else taken


def walk_bytes(top: Path, every: int = 512, max_depth: int = MAX_DEPTH) -> Iterator[int]:
    """The bytes below ``top`` (0 if it is missing) as running totals, one every ``every`` entries;
    the last one is the total. Raises DiskWalkError (above)."""
    try:
        fd = os.open(top, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        yield 0
        return
    except OSError as exc:
        raise DiskWalkError(f"{top}: {exc.strerror}") from None
    total, seen = _charge(os.fstat(fd)), 0
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((fd, iter(_listing(fd, top))))
        while stack:
            parent, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(stack.pop()[0])
                continue
            try:
                s = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
            total += _charge(s)
            seen += 1
            if seen % every == 0:
                yield total
            if not stat.S_ISDIR(s.st_mode):
                continue
            if len(stack) >= max_depth:
                raise DiskWalkError(f"{top}: folders nested more than {max_depth} deep")
            try:
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    continue  # removed, or swapped for a link, since it was listed: not followed
                raise DiskWalkError(f"{top}: {entry.name}: {exc.strerror}") from None
            stack.append((sub, iter(_listing(sub, top))))
        yield total
    finally:
        for held, _ in stack:
            os.close(held)


def _listing(fd: int, top: Path) -> list[os.DirEntry[str]]:
    """The entries of the open folder ``fd`` (read at once: the descriptor stays the walk's)."""
    try:
        with os.scandir(fd) as it:
            return list(it)
    except OSError as exc:
        raise DiskWalkError(f"{top}: {exc.strerror}") from None


def drop_scratch(job_dir: Path, names: Iterable[str] = SCRATCH) -> None:
    """Remove the folders ``names`` of ``job_dir``: each is renamed into ``job_dir/.trash`` now (the
    job's next run or a reader sees it gone) and removed by a thread of its own. Idempotent."""
    trash = job_dir / TRASH
    moved = []
    for name in names:
        src = job_dir / name
        if not src.is_dir() or src.is_symlink():
            continue
        trash.mkdir(exist_ok=True)
        dst = trash / f"{name}.{os.getpid()}.{next(_names)}"
        try:
            src.rename(dst)
        except OSError as exc:  # gone meanwhile, or the disk refuses: the next end tries again
            log.warning("%s: %s not removed: %s", job_dir, name, exc)
            continue
        moved.append(dst)
    if moved:
        _remove_in_background(trash, f"scratch-{job_dir.name}")


def sweep_trash(jobs_root: Path) -> None:
    """Remove what an earlier server left in the jobs' ``.trash`` folders (``<root>/<user>/<job>``)."""
    for trash in jobs_root.glob(f"*/*/{TRASH}"):
        _remove_in_background(trash, "scratch-sweep")


def _remove_in_background(trash: Path, name: str) -> None:
    def run() -> None:
        with contextlib.suppress(OSError):
            shutil.rmtree(trash, ignore_errors=True)

    threading.Thread(target=run, name=name, daemon=True).start()
