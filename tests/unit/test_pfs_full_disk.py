"""A full disk under PFS: every write that does not fit is answered 507 ``insufficient_storage`` (never
a 404 or a 500), leaves no partial data behind, and leaves the quota accounting as it was.

The platform's PFS directory is a real 512 KiB tmpfs (mounted by the test; root only, as in CI), so
the errors are the kernel's own ENOSPC from ``posix_fallocate``, ``write`` and file creation. The
store-level tests at the end inject ENOSPC instead and run anywhere.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pfs_helpers import (
    CHUNK,
    HOME,
    begin,
    blob,
    download,
    error_of,
    fs_of,
    put_chunk,
    staged,
    store_dir,
    whole,
    write,
)

from paddlecloud.api.errors import ErrorCode
from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.storage import LocalDirStore, StorageError, UploadState
from paddlecloud.storage.base import StorageErrorKind

pytestmark = pytest.mark.timeout(60)

DISK = 512 << 10


@pytest.fixture
def platform(platform_factory: Callable[..., Platform], tmp_path: Path) -> Iterator[Platform]:
    """A platform whose PFS lives on a 512 KiB tmpfs (overrides conftest's ``platform``)."""
    data = tmp_path / "data"
    pfs = data / "pfs"
    pfs.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0755", "tmpfs", str(pfs)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {mounted.stderr.strip()}")
    try:
        yield platform_factory(data_dir=data)
    finally:
        subprocess.run(["umount", "-l", str(pfs)], check=True)


def free_bytes(platform: Platform) -> int:
    s = os.statvfs(store_dir(platform))
    return s.f_bavail * s.f_frsize


def leftovers(platform: Platform) -> list[str]:
    """Staged uploads, temporaries of small puts, and any file in the namespace."""
    files = [p.name for p in (store_dir(platform) / "files").rglob("*") if p.is_file()]
    return staged(platform) + files


def assert_refused_for_space(call: Callable[[], Any]) -> None:
    err = error_of(call)
    assert (err.code, err.http_status) == (ErrorCode.INSUFFICIENT_STORAGE, 507), err
    assert "out of space" in str(err)


def put_file(client: Client, name: str, data: bytes) -> None:
    client.request(
        "PUT",
        "/pfs/file",
        params={"path": f"{HOME}/{name}"},
        content=data,
        headers={"X-PaddleCloud-Checksum": whole(data, max(len(data), 1))},
    )


def test_a_small_put_that_does_not_fit_is_507_and_leaves_nothing(alice: Client, platform: Platform) -> None:
    empty = free_bytes(platform)
    before = alice.pfs.usage()
    assert_refused_for_space(lambda: put_file(alice, "big.bin", blob(DISK + CHUNK // 4)))
    assert leftovers(platform) == []
    assert free_bytes(platform) == empty  # every block written before ENOSPC was given back
    after = alice.pfs.usage()
    assert (after.used, after.reserved) == (before.used, before.reserved) == (0, 0)


def test_an_upload_that_does_not_fit_is_507_before_any_chunk_and_leaves_nothing(
    alice: Client, platform: Platform
) -> None:
    empty = free_bytes(platform)
    body = {"path": f"{HOME}/big.bin", "size": 3 * CHUNK, "chunk_size": CHUNK}
    assert_refused_for_space(lambda: alice.request("POST", "/pfs/uploads", json=body))
    assert leftovers(platform) == []
    assert free_bytes(platform) == empty
    usage = alice.pfs.usage()
    assert (usage.used, usage.reserved) == (0, 0)


def test_an_upload_that_fills_the_disk_exactly_is_507_and_leaves_nothing(
    alice: Client, platform: Platform
) -> None:
    """The data file fits, its metadata does not: no orphaned staging area keeps the blocks."""
    empty = free_bytes(platform)
    body = {"path": f"{HOME}/exact.bin", "size": empty, "chunk_size": CHUNK}
    assert_refused_for_space(lambda: alice.request("POST", "/pfs/uploads", json=body))
    assert leftovers(platform) == []
    assert free_bytes(platform) == empty
    assert alice.pfs.usage().reserved == 0


def test_a_chunk_whose_mark_does_not_fit_is_507_and_the_upload_resumes_when_there_is_room(
    alice: Client, platform: Platform
) -> None:
    """The data file holds its blocks from the start; the chunk's mark (a small file) is what runs out."""
    filler = CHUNK // 16
    put_file(alice, "filler.bin", blob(filler))
    page = os.statvfs(store_dir(platform)).f_frsize
    size = free_bytes(platform) - page  # the data file and its meta.json fill the disk exactly
    data = blob(size, seed=2)
    up = begin(alice, f"{HOME}/exact.bin", size)
    assert free_bytes(platform) == 0
    assert_refused_for_space(lambda: put_chunk(alice, up, 0, data))
    assert staged(platform) == [up.id] and begin(alice, f"{HOME}/exact.bin", size).received == {}
    fs_of(alice).rm("pfs:filler.bin")  # room again: the same upload goes on where it was
    put_chunk(alice, up, 0, data)
    alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    assert download(alice, f"{HOME}/exact.bin") == data
    assert leftovers(platform) == ["exact.bin"]
    usage = alice.pfs.usage()
    assert (usage.used, usage.reserved) == (size, 0)


def test_cp_says_out_of_space_and_what_fits_still_goes_in(
    alice: Client, platform: Platform, tmp_path: Path
) -> None:
    fs = fs_of(alice)
    small = write(tmp_path / "small.bin", blob(CHUNK))  # one chunk: a single PUT
    large = write(tmp_path / "large.bin", blob(3 * CHUNK + 5))  # a chunked upload
    for src in (small, large):
        assert_refused_for_space(lambda src=src: fs.cp([str(src)], "pfs:"))
    assert leftovers(platform) == []
    fits = write(tmp_path / "fits.bin", blob(100_000, seed=1))
    fs.cp([str(fits)], "pfs:fits.bin")
    usage = alice.pfs.usage()
    assert (usage.used, usage.reserved) == (100_000, 0)
    assert [i.path for i in fs.ls("pfs:")] == [f"{HOME}/fits.bin"]


# -- the store alone, with ENOSPC injected (runs without root) ------------------------------------

KEY = ("home", "alice", "f")
E_NO_SPACE = StorageErrorKind.NO_SPACE


@pytest.fixture
def store(tmp_path: Path) -> LocalDirStore:
    s = LocalDirStore(tmp_path / "pfs")
    s.mkdir(("home", "alice"), parents=True)
    return s


def no_space(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def kind_of(call: Callable[[], Any]) -> StorageErrorKind:
    with pytest.raises(StorageError) as info:
        call()
    return info.value.kind


def test_store_small_put_on_a_full_disk_is_no_space(store: LocalDirStore) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"first"
        no_space()

    assert kind_of(lambda: store.put_small(KEY, pieces(), overwrite=False)) == StorageErrorKind.NO_SPACE
    assert store.stat(KEY) is None and list(store.uploads.iterdir()) == []


@pytest.mark.parametrize("seam", ["posix_fallocate", "write_text"])
def test_store_upload_begin_on_a_full_disk_is_no_space(
    store: LocalDirStore, monkeypatch: pytest.MonkeyPatch, seam: str
) -> None:
    if seam == "posix_fallocate":
        monkeypatch.setattr(os, "posix_fallocate", no_space)
    else:  # the data file fits, the metadata written after it does not
        monkeypatch.setattr(Path, "write_text", no_space)
    state = UploadState(id="u1", key=KEY, size=10, chunk_size=4, owner="alice")
    assert kind_of(lambda: store.upload_begin(state)) == StorageErrorKind.NO_SPACE
    assert list(store.uploads.iterdir()) == []


def test_store_chunk_write_and_mark_on_a_full_disk_are_no_space(
    store: LocalDirStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.upload_begin(UploadState(id="u1", key=KEY, size=10, chunk_size=4, owner="alice"))
    with monkeypatch.context() as m:  # a sparse data file (no fallocate): the write itself runs out
        m.setattr(os, "pwrite", no_space)
        assert kind_of(lambda: store.upload_write("u1", 0, [b"0123"], lambda _: None)) == E_NO_SPACE
    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", no_space)
        assert kind_of(lambda: store.upload_mark("u1", 0, "digest")) == E_NO_SPACE
    state = store.upload_get("u1")
    assert state is not None and state.received == {}  # the upload is still there, to resume
