"""Helpers for tests against real JuiceFS mounts: a data tree with known digests, and a guard that
unmounts whatever a test left mounted under its folder (a leaked FUSE mount breaks later runs)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from paddlecloud.storage.juicefs import Volume, mounts_under

__all__ = ["digests", "make_tree", "unmounted_after"]


def make_tree(root: Path, small: int = 40, big: int = 3 << 20) -> dict[str, str]:
    """A source folder: nested small files, one bigger file, an empty folder; returns their sha256
    digests by relative path."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(small):
        d = root / f"part-{i % 4}" / "shard"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"sample-{i}.bin").write_bytes(os.urandom(4096 + i))
    (root / "big.bin").write_bytes(os.urandom(big))
    (root / "empty").mkdir(exist_ok=True)
    return digests(root)


def digests(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@contextmanager
def unmounted_after(top: Path) -> Iterator[None]:
    """Unmount every JuiceFS mount below ``top`` when the block ends, however it ends, and fail the
    test if one would not go."""
    try:
        yield
    finally:
        for mp in mounts_under(top):
            Volume(top, "cleanup").umount(mp)
        assert mounts_under(top) == [], "a JuiceFS mount leaked"
