"""Helpers for tests against real JuiceFS mounts: a data tree with known digests, a guard that
unmounts whatever a test left mounted under its folder (a leaked FUSE mount breaks later runs), and
a job package whose workers read their SampleSet (``READER``; ``tar_package`` for any other)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from paddlecloud.backends.base import Backend, JobLaunch, JobStatus
from paddlecloud.core.phases import WorkerState
from paddlecloud.storage.juicefs import Volume, mounts_under

__all__ = [
    "READER",
    "digests",
    "make_tree",
    "reader_package",
    "run_to_success",
    "tar_package",
    "unmounted_after",
]

#: a worker that reads every file of its SampleSet, tries to write there, and writes what it saw to
#: ``<output>/<worker>.json``: the mount, the files' sha256, the write's errno, its Slurm node, and
#: whether the path in $OTHER (another SampleSet's mount) exists in its sandbox
READER = """\
import errno, hashlib, json, os, pathlib
root = pathlib.Path(os.environ["PADDLECLOUD_SAMPLESET_DIR"])
seen = {}
for dirpath, _, files in os.walk(root):
    for f in files:
        p = pathlib.Path(dirpath) / f
        seen[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
try:
    (root / "mine").write_text("x")
    write = "written"
except OSError as exc:
    write = errno.errorcode[exc.errno]
me = os.environ["PADDLECLOUD_WORKER"]
out = pathlib.Path(os.environ["PADDLECLOUD_OUTPUT_DIR"]) / (me + ".json")
other = os.environ.get("OTHER")
out.write_text(json.dumps({"root": str(root), "files": seen, "write": write,
                           "node": os.environ.get("SLURMD_NODENAME"),
                           "other": os.path.exists(other) if other else None}))
"""


def tar_package(path: Path, files: dict[str, str]) -> Path:
    """A job package (``.tar.gz`` at ``path``) holding ``files`` (name -> text)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def run_to_success(backend: Backend, launch: JobLaunch, timeout: float = 180) -> JobStatus:
    """Start ``launch`` on ``backend`` and sync it until it ends (bounded); fails the test, with the
    workers' logs, unless every worker succeeded."""
    backend.start(launch)
    deadline = time.monotonic() + timeout
    while not (status := backend.sync(launch.key)).finished:
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    logs = {w.name: Path(w.log_path).read_text(errors="replace") for w in status.workers if w.log_path}
    assert status.failure is None, (status.failure, logs)
    assert all(w.state == WorkerState.SUCCEEDED for w in status.workers), logs
    return status


def reader_package(path: Path) -> Path:
    """A package whose entry ``python read.py`` is :data:`READER`."""
    return tar_package(path, {"read.py": READER})


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
