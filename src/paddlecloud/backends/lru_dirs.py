"""The bookkeeping of a cache of folders that jobs use: who uses each (pins), when it was last used,
and the least recently used ones that no job uses evicted past a size cap. The job environments
(``local/envs.py``) and the pulled images (``images.py``) are such caches.

Files next to each folder (``<root>/``)::

    <name>/<mark>             the folder is complete (its mtime: last use)
    <name>.pins/<holder>      one empty file per job using it
    <name>.size               its size in bytes, measured once
    .cache.lock               held briefly while pins, last use and evictions change

Eviction renames a folder away under ``.cache.lock`` (atomic: a job that pins it at the same moment
either pinned first, and it is not evicted, or finds it gone and makes it again) and then deletes it.
A pin lives on disk, so a job keeps what it uses across a server restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LruDirs", "dir_size", "flock"]

_TRASH = ".evicted-"


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    """``path`` locked exclusively (made if missing) for the block: across threads and processes."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def dir_size(path: Path) -> int:
    """Bytes used by the files under ``path`` (links not followed, each inode counted once)."""
    total, seen = 0, set()
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


class LruDirs:
    """The folders under ``root`` whose ``mark`` file says they are complete, capped at
    ``max_bytes`` (None: no cap). Methods named ``_locked`` expect :meth:`lock` held."""

    def __init__(self, root: Path, mark: str, max_bytes: int | None) -> None:
        self.root = root
        self.mark = mark
        self.max_bytes = max_bytes
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(f"{_TRASH}*"):  # an eviction interrupted by a crash
            shutil.rmtree(leftover, ignore_errors=True)

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return flock(self.root / ".cache.lock")

    def ready(self, target: Path) -> bool:
        return (target / self.mark).exists()

    def _pins(self, target: Path) -> Path:
        return target.parent / f"{target.name}.pins"

    def _pin_file(self, target: Path, holder: str) -> Path:
        return self._pins(target) / holder.replace("/", ":")

    def _size_file(self, target: Path) -> Path:
        return target.parent / f"{target.name}.size"

    def pin_locked(self, target: Path, holder: str) -> None:
        self._pins(target).mkdir(exist_ok=True)
        self._pin_file(target, holder).touch()

    def unpin_locked(self, target: Path, holder: str) -> None:
        self._pin_file(target, holder).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._pins(target).rmdir()  # only when no other job holds it

    def touch_locked(self, target: Path) -> None:
        with contextlib.suppress(OSError):
            os.utime(target / self.mark)

    def measured(self, target: Path) -> None:
        """Record the size of ``target``, just made (measured once)."""
        self._size_file(target).write_text(str(dir_size(target)))

    def _size(self, target: Path) -> int:
        try:
            return int(self._size_file(target).read_text())
        except (OSError, ValueError):
            size = dir_size(target)
            with contextlib.suppress(OSError):
                self._size_file(target).write_text(str(size))
            return size

    def entries(self) -> list[tuple[Path, int, float, bool]]:
        """Every complete folder: (path, size, last use, in use), least recently used first."""
        out = []
        for marker in self.root.glob(f"*/{self.mark}"):
            target = marker.parent
            with contextlib.suppress(OSError):
                pins = self._pins(target)
                in_use = any(pins.iterdir()) if pins.exists() else False
                out.append((target, self._size(target), marker.stat().st_mtime, in_use))
        return sorted(out, key=lambda e: e[2])

    def evict(self, keep: Path) -> int:
        """Touch ``keep`` (just used) and evict least recently used, unpinned folders (never
        ``keep``) while the total passes the cap; returns how far over the cap the cache still is
        (0: within). The folders are renamed away under the lock and deleted after it (gigabytes of
        an image: a job's release waits on the lock meanwhile)."""
        with self.lock():
            self.touch_locked(keep)
            over, trash = self._evict_locked(keep)
        for folder in trash:
            shutil.rmtree(folder, ignore_errors=True)
        return over

    def _evict_locked(self, keep: Path) -> tuple[int, list[Path]]:
        if self.max_bytes is None:
            return 0, []
        entries = self.entries()
        total = sum(size for _, size, _, _ in entries)
        trash: list[Path] = []
        for target, size, _, in_use in entries:
            if total <= self.max_bytes:
                break
            if in_use or target == keep:
                continue
            trash.append(self.root / f"{_TRASH}{target.name}-{uuid.uuid4().hex[:8]}")
            (target / self.mark).unlink(missing_ok=True)
            target.rename(trash[-1])
            self._size_file(target).unlink(missing_ok=True)
            total -= size
        return max(total - self.max_bytes, 0), trash
