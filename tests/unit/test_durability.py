"""Durability ordering of everything that puts a file into place: PFS small puts and upload commits
(``storage.local``) and checkpoint saves (``runtime.checkpoint``).

A crash after ``rename`` must leave either the old file or the whole new one, and a rename that was
acknowledged must survive a power loss. That needs, in this order: the file's data fsynced, the
rename (or link) into place, then the directory holding the new name fsynced. The tests record every
``os.fsync`` (by the inode of the file descriptor) and every rename / link (by destination, also when
named relative to a directory's descriptor), run the real operation, and check that order against
the inodes of the final file and of its directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.runtime import checkpoint
from paddlecloud.storage import LocalDirStore, UploadState

pytestmark = pytest.mark.timeout(30)

Inode = tuple[int, int]


@dataclass(frozen=True)
class Op:
    what: str  # "fsync" or "place"
    inode: Inode | None = None  # fsync: the file or directory synced
    dest: str = ""  # place: where a name was put


class FsOps:
    """Records fsyncs and renames / links (monkeypatched ``os`` functions that still do the real thing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ops: list[Op] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            s = os.fstat(fd)
            self.ops.append(Op("fsync", inode=(s.st_dev, s.st_ino)))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        for name in ("replace", "rename", "link"):
            monkeypatch.setattr(os, name, self._placing(getattr(os, name)))

    def _placing(self, real: Callable[..., None]) -> Callable[..., None]:
        def place(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            real(src, dst, *args, **kwargs)
            at = kwargs.get("dst_dir_fd")  # a name relative to a directory's descriptor (the PFS store)
            where = os.path.join(os.readlink(f"/proc/self/fd/{at}"), dst) if at is not None else dst
            self.ops.append(Op("place", dest=os.path.abspath(where)))

        return place

    def assert_durably_placed(self, dest: Path) -> None:
        """``dest``'s data was fsynced before it was put in place, and its directory after."""
        where = os.path.abspath(dest)
        placed = [i for i, op in enumerate(self.ops) if op.what == "place" and op.dest == where]
        assert placed, f"{dest} was never renamed or linked into place: {self.ops}"
        at = placed[-1]
        data, parent = _inode(dest), _inode(dest.parent)
        before = [op.inode for op in self.ops[:at] if op.what == "fsync"]
        after = [op.inode for op in self.ops[at + 1 :] if op.what == "fsync"]
        assert data in before, f"the data of {dest.name} was not fsynced before it was put in place"
        assert parent in after, f"{dest.parent} was not fsynced after {dest.name} was put in place"


def _inode(p: Path) -> Inode:
    s = os.stat(p)
    return (s.st_dev, s.st_ino)


@pytest.fixture
def fs_ops(monkeypatch: pytest.MonkeyPatch) -> FsOps:
    return FsOps(monkeypatch)


@pytest.fixture
def store(tmp_path: Path) -> LocalDirStore:
    s = LocalDirStore(tmp_path / "pfs")
    s.mkdir(("home", "alice", "d"), parents=True)
    return s


KEY = ("home", "alice", "d", "f")


@pytest.mark.parametrize("overwrite", [False, True], ids=["link", "replace"])
def test_a_small_put_is_durable_before_it_is_acknowledged(
    store: LocalDirStore, fs_ops: FsOps, overwrite: bool
) -> None:
    if overwrite:
        store.put_small(KEY, [b"old"], overwrite=False)
        fs_ops.ops.clear()
    store.put_small(KEY, [b"new ", b"bytes"], overwrite=overwrite)
    dest = store.local_path(KEY)
    assert dest is not None and dest.read_bytes() == b"new bytes"
    fs_ops.assert_durably_placed(dest)


@pytest.mark.parametrize("overwrite", [False, True], ids=["link", "replace"])
def test_an_upload_commit_is_durable_before_it_is_acknowledged(
    store: LocalDirStore, fs_ops: FsOps, overwrite: bool
) -> None:
    data = b"0123456789"
    store.upload_begin(UploadState(id="u1", key=KEY, size=len(data), chunk_size=4, owner="alice"))
    for i in range(0, len(data), 4):
        store.upload_write("u1", i, [data[i : i + 4]], lambda _: None)
    fs_ops.ops.clear()  # only what the commit does counts: it alone makes the file visible
    store.upload_commit("u1", overwrite=overwrite)
    dest = store.local_path(KEY)
    assert dest is not None and dest.read_bytes() == data
    fs_ops.assert_durably_placed(dest)


def test_a_checkpoint_is_durable_before_save_returns(tmp_path: Path, fs_ops: FsOps) -> None:
    saved = checkpoint.save(3, lambda f: f.write(b"weights"), directory=tmp_path)
    assert saved.path == tmp_path / "ckpt-3.bin"
    fs_ops.assert_durably_placed(tmp_path / "ckpt-3.bin")
    fs_ops.assert_durably_placed(tmp_path / "ckpt-3.json")  # the manifest that marks it valid


def test_the_manifest_is_put_in_place_only_after_the_data(tmp_path: Path, fs_ops: FsOps) -> None:
    checkpoint.save(1, lambda f: f.write(b"weights"), directory=tmp_path)
    order = [Path(op.dest).name for op in fs_ops.ops if op.what == "place"]
    assert order == ["ckpt-1.bin", "ckpt-1.json"]
