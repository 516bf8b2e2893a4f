"""storage.nodecopy: the node-local copy of a SampleSet (short-circuit reads)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from paddlecloud.storage.nodecopy import CopyError, copy_tree, plan


def _tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.bin").write_bytes(b"x" * 5000)
    (root / "top.txt").write_text("hello")
    (root / "empty").mkdir()
    os.chmod(root / "top.txt", 0o644)
    (root / "link").symlink_to("/etc/passwd")  # copied as a link, never followed


def test_copies_files_folders_and_links_as_links_read_only(tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    seen: list[tuple[int, int]] = []
    files, size = copy_tree(tmp_path / "src", tmp_path / "dst", lambda d, t: seen.append((d, t)))
    dst = tmp_path / "dst"
    assert (files, size) == (2, 5005)  # x.bin and top.txt; the link is not a file
    assert (dst / "a" / "b" / "x.bin").read_bytes() == b"x" * 5000
    assert (dst / "top.txt").stat().st_mode & 0o777 == 0o444
    assert (dst / "empty").is_dir()
    assert (dst / "link").is_symlink() and os.readlink(dst / "link") == "/etc/passwd"
    assert seen[-1] == (5005, 5005) and all(d <= t for d, t in seen)


def test_a_cancelled_copy_leaves_nothing(tmp_path: Path) -> None:
    _tree(tmp_path / "src")

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_tree(tmp_path / "src", tmp_path / "dst", stop)
    assert not (tmp_path / "dst").exists()


def test_a_copy_failing_midway_says_why_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path / "src")
    real = shutil.copyfile
    calls: list[str] = []

    def copyfile(src: str, dst: Path, *, follow_symlinks: bool = True) -> object:
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    with pytest.raises(CopyError, match="No space left"):
        copy_tree(tmp_path / "src", tmp_path / "dst", lambda d, t: None)
    assert len(calls) == 2 and not (tmp_path / "dst").exists()


def test_a_folder_it_did_not_make_is_never_removed(tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "keep").write_text("mine")
    with pytest.raises(CopyError, match="exists"):
        copy_tree(tmp_path / "src", tmp_path / "dst", lambda d, t: None)
    assert (tmp_path / "dst" / "keep").read_text() == "mine"


def test_plan_refuses_a_set_larger_than_the_cache_or_the_free_disk(tmp_path: Path) -> None:
    assert plan(10, 100, tmp_path / "not" / "yet") is None
    assert "larger than the node's cache" in (plan(101, 100, tmp_path) or "")
    assert "free" in (plan(1 << 62, 1 << 63, tmp_path) or "")
