"""Node-local copies of a read-only tree: the SampleSet "short-circuit" read path.

A warmed JuiceFS mount still costs every file about five FUSE round trips (lookup, open, read,
flush, release) and a metadata lookup: on a data set of small files that is 5-10x the local disk
(bench/README.md). When a whole SampleSet fits a node's cache, the backend instead keeps a plain
copy of it on the node's disk and shows jobs that folder (read-only), as Alluxio's and Fluid's
short-circuit reads and SkyPilot's ``COPY`` storage mode do; the JuiceFS mount stays the path for
sets larger than the cache and for nodes not warmed yet. Flow::

    backend ──plan(files, bytes, cap, where)──▶ None (copy it) | why not (too big, no room)
            ──copy_tree(volume mount, tmp, progress)──▶ files and links copied, modes read-only;
              the backend then renames tmp into place (a copy is whole or absent)

The copy walks the source without following links (a link is copied as a link, never its target:
inside a job's sandbox it resolves as it would on the mount), copies the files by several threads,
reports bytes done against the total after every file (the callback may raise to cancel), and
removes what it wrote when it fails.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.storage.base import StorageError, StorageErrorKind

__all__ = ["CopyError", "copy_tree", "plan"]

#: files copied at once (reads through FUSE overlap; 8: what ``juicefs warmup`` uses by default)
THREADS = 8
#: disk kept free beside a copy (of the file system's size), so a copy never fills a node's disk
FREE_MARGIN = 0.05


class CopyError(StorageError):
    """A node-local copy could not be made (the message says why); the mount still serves."""

    def __init__(self, message: str) -> None:
        super().__init__(StorageErrorKind.ENGINE, (), message)


def plan(size: int, cap: int, where: Path) -> str | None:
    """``None`` when a copy of ``size`` bytes may be made under ``where`` (a folder on the node's
    disk) within the node's cache ``cap``; otherwise why not, in words."""
    if size > cap:
        return f"the set ({size} bytes) is larger than the node's cache ({cap} bytes)"
    probe = where
    while not probe.exists():
        probe = probe.parent
    du = shutil.disk_usage(probe)
    if size > du.free - int(du.total * FREE_MARGIN):
        return f"the node's disk has {du.free} bytes free, too few for {size} bytes"
    return None


@dataclass(frozen=True)
class _File:
    src: str
    dst: Path
    size: int
    mode: int


def _skeleton(src: Path, dst: Path) -> list[_File]:
    """Make ``dst``'s folders and links as in ``src``; return the regular files still to copy."""
    files: list[_File] = []
    stack = [(src, dst)]
    while stack:
        s, d = stack.pop()
        with os.scandir(s) as it:
            entries = list(it)
        for e in entries:
            target = d / e.name
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                target.mkdir()
                stack.append((Path(e.path), target))
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(e.path), target)
            elif stat.S_ISREG(st.st_mode):
                files.append(_File(e.path, target, st.st_size, stat.S_IMODE(st.st_mode) & 0o555))
    return files


def copy_tree(
    src: Path, dst: Path, progress: Callable[[int, int], None], threads: int = THREADS
) -> tuple[int, int]:
    """Copy the tree ``src`` into the new folder ``dst`` (files read-only); returns (files, bytes).
    Files are copied by ``threads`` at once (each read from a FUSE mount waits for its round trips:
    in parallel they overlap). ``progress(done, total)`` runs after every file (from any of those
    threads, one call at a time) and may raise to stop; on any error ``dst`` is removed and a
    :class:`CopyError` (or what ``progress`` raised) propagates."""
    try:
        dst.mkdir(parents=True)
    except OSError as exc:  # dst is not ours to remove
        raise CopyError(f"copying {src} to {dst}: {exc}") from None
    lock, stop = threading.Lock(), threading.Event()
    done = 0

    def one(f: _File) -> None:
        nonlocal done
        if stop.is_set():
            return
        shutil.copyfile(f.src, f.dst, follow_symlinks=False)
        os.chmod(f.dst, f.mode)
        with lock:
            done += f.size
            progress(min(done, total), total)

    try:
        files = _skeleton(src, dst)
        total = sum(f.size for f in files)
        with ThreadPoolExecutor(max(1, threads), thread_name_prefix="nodecopy") as pool:
            try:
                for _ in pool.map(one, files):
                    pass
            finally:
                stop.set()  # the first failure stops the files not started yet
        progress(done, max(done, total))
        return len(files), done
    except OSError as exc:
        shutil.rmtree(dst, ignore_errors=True)
        raise CopyError(f"copying {src} to {dst}: {exc}") from None
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        raise
