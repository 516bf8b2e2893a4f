"""Checkpoints inside a worker: save atomically, keep the last K, load the newest valid one.

The job's checkpoint directory is ``$PADDLECLOUD_CHECKPOINT_DIR`` (``<output>/checkpoints``, shared by
the job's workers and kept after the job). A checkpoint is two files::

    ckpt-<step>.bin    the bytes the program wrote (any format: torch.save, numpy, pickle of its own)
    ckpt-<step>.json   {"step", "size", "sha256", "time"}: written after the data, so it marks it valid

``save`` writes each to a temporary name, fsyncs, renames into place and fsyncs the directory, so a
crash at any point leaves either the old set or the new one, never a torn file that ``latest``
would return. ``latest`` walks the manifests newest first and returns the first whose data matches
its size and digest. Standard library only (this module is importable inside every job).

    from paddlecloud.runtime import checkpoint
    found = checkpoint.latest()
    if found: state = torch.load(found.path)
    ...
    checkpoint.save(step, lambda f: torch.save(state, f))
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from paddlecloud.runtime import contract as c

__all__ = ["Checkpoint", "checkpoint_dir", "latest", "save"]

_NAME = re.compile(r"^ckpt-(\d+)\.json$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path  # the data file
    size: int
    sha256: str


def checkpoint_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """``directory``, else ``$PADDLECLOUD_CHECKPOINT_DIR``, else ``./checkpoints`` (outside the platform)."""
    return Path(directory or os.environ.get(c.CHECKPOINT_DIR) or "checkpoints")


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _write_atomic(d: Path, name: str, fill: Callable[[BinaryIO], object]) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return d / name


def save(
    step: int,
    write: Callable[[BinaryIO], object],
    *,
    keep: int = 3,
    directory: str | os.PathLike[str] | None = None,
) -> Checkpoint:
    """Write checkpoint ``step`` with ``write(file)``; keep the newest ``keep`` (older ones removed)."""
    if step < 0 or keep < 1:
        raise ValueError("step must be >= 0 and keep >= 1")
    d = checkpoint_dir(directory)
    d.mkdir(parents=True, exist_ok=True)
    data = _write_atomic(d, f"ckpt-{step}.bin", write)
    size, sha = _digest(data)
    manifest = {"step": step, "size": size, "sha256": sha, "time": time.time()}
    _write_atomic(d, f"ckpt-{step}.json", lambda f: f.write(json.dumps(manifest).encode()))
    _fsync_dir(d)
    _prune(d, keep)
    return Checkpoint(step, data, size, sha)


def _steps(d: Path) -> list[int]:
    if not d.is_dir():
        return []
    return sorted((int(m.group(1)) for p in d.iterdir() if (m := _NAME.match(p.name))), reverse=True)


def _prune(d: Path, keep: int) -> None:
    for step in _steps(d)[keep:]:
        for suffix in ("json", "bin"):  # manifest first: a half-pruned step is never "valid"
            with contextlib.suppress(FileNotFoundError):
                (d / f"ckpt-{step}.{suffix}").unlink()


def _valid(d: Path, step: int) -> Checkpoint | None:
    try:
        manifest = json.loads((d / f"ckpt-{step}.json").read_text())
        data = d / f"ckpt-{step}.bin"
        size, sha = _digest(data)
    except (OSError, ValueError):
        return None
    if manifest.get("size") != size or manifest.get("sha256") != sha:
        return None
    return Checkpoint(step, data, size, sha)


def latest(directory: str | os.PathLike[str] | None = None) -> Checkpoint | None:
    """The newest checkpoint whose data matches its manifest, or None."""
    d = checkpoint_dir(directory)
    for step in _steps(d):
        found = _valid(d, step)
        if found is not None:
            return found
    return None
