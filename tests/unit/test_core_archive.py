"""core.archive: build package archives (ignore rules) and unpack them safely."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from paddlecloud.core.archive import ArchiveError, IgnoreRules, build_archive, list_members, safe_extract


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def archive_names(root: Path) -> tuple[int, list[str]]:
    buf = io.BytesIO()
    count = build_archive(root, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:gz") as tar:
        return count, sorted(m.name for m in tar if m.isfile())


BASE = {
    "train.py": "print(1)\n",
    "lib/util.py": "X = 1\n",
    ".git/config": "[core]\n",
    ".git/objects/ab/cd": "blob",
    "__pycache__/train.cpython-311.pyc": "",
    "lib/__pycache__/util.cpython-311.pyc": "",
    "lib/old.pyc": "",
    ".venv/bin/python": "",
    ".paddlecloud/state": "",
}


def test_always_ignored(tmp_path: Path) -> None:
    count, names = archive_names(make_tree(tmp_path, BASE))
    assert names == ["lib/util.py", "train.py"]
    assert count == 2


@pytest.mark.parametrize(
    ("ignore", "extra", "kept"),
    [
        pytest.param(
            "# a comment\n\n*.csv\n",
            {"data/a.csv": "1", "b.csv": "2", "#keep.txt": "x"},
            ["#keep.txt", "lib/util.py", "train.py"],
            id="glob-and-comment",
        ),
        pytest.param(
            "data/\n",
            {"data/a.bin": "1", "lib/data/b.bin": "2", "notes/data": "a file named data"},
            ["lib/util.py", "notes/data", "train.py"],
            id="dir-only-pattern-keeps-files",
        ),
        pytest.param(
            "data\n",
            {"data/a.bin": "1", "notes/data": "a file named data"},
            ["lib/util.py", "train.py"],
            id="plain-name-matches-files-and-dirs",
        ),
        pytest.param(
            "lib/*.py\n",
            {"other/lib/x.py": "2"},
            ["other/lib/x.py", "train.py"],
            id="pattern-with-slash-is-relative-to-root",
        ),
        pytest.param(
            "  *.log  \n",
            {"out.log": "x", "logs/a.log": "y"},
            ["lib/util.py", "train.py"],
            id="surrounding-whitespace",
        ),
    ],
)
def test_paddlecloudignore(tmp_path: Path, ignore: str, extra: dict[str, str], kept: list[str]) -> None:
    root = make_tree(tmp_path, {**BASE, **extra, ".paddlecloudignore": ignore})
    _count, names = archive_names(root)
    assert [n for n in names if n != ".paddlecloudignore"] == kept


@pytest.mark.parametrize(
    ("pattern", "ignored", "kept"),
    [("/build", "build", "src/build"), ("lib/*.py", "lib/a.py", "lib/sub/deep.py")],
)
def test_gitignore_anchoring_and_star(pattern: str, ignored: str, kept: str) -> None:
    rules = IgnoreRules([pattern])
    assert rules.ignored(ignored, False)
    assert not rules.ignored(kept, False)


def test_symlinks_are_left_out(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "pkg", {"train.py": "x"})
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", root / "link.txt")
    os.symlink(tmp_path, root / "linkdir")
    _count, names = archive_names(root)
    assert names == ["train.py"]


def test_size_limit_raises_archive_error(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"a.txt": "x"})
    (root / "big.bin").write_bytes(os.urandom(256 * 1024))
    with pytest.raises(ArchiveError, match="limit of 1000 bytes"):
        build_archive(root, io.BytesIO(), max_bytes=1000)


def test_under_size_limit_is_fine(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"a.txt": "x"})
    assert build_archive(root, io.BytesIO(), max_bytes=10_000) == 1


# -- unpacking ---------------------------------------------------------------------------------


def tar_with(path: Path, members: list[tarfile.TarInfo], data: bytes = b"payload") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            if m.isfile():
                m.size = len(data)
                tar.addfile(m, io.BytesIO(data))
            else:
                tar.addfile(m)
    return path


def info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return ti


def test_good_archive_round_trip(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src", {"train.py": "print(1)\n", "lib/util.py": "X = 1\n"})
    pkg = tmp_path / "pkg.tar.gz"
    with open(pkg, "wb") as f:
        build_archive(root, f)
    assert sorted(list_members(pkg)) == ["lib/util.py", "train.py"]
    safe_extract(pkg, tmp_path / "out")
    assert (tmp_path / "out" / "lib" / "util.py").read_text() == "X = 1\n"


@pytest.mark.parametrize(
    ("member", "match"),
    [
        pytest.param(info("../evil.py"), "unsafe path", id="dotdot"),
        pytest.param(info("a/../../evil.py"), "unsafe path", id="nested-dotdot"),
        pytest.param(info("/etc/evil"), "unsafe path", id="absolute"),
        pytest.param(
            info("link", tarfile.SYMTYPE, "/etc/passwd"), "only files and directories", id="symlink"
        ),
        pytest.param(
            info("rel", tarfile.SYMTYPE, "train.py"), "only files and directories", id="rel-symlink"
        ),
        pytest.param(info("hard", tarfile.LNKTYPE, "train.py"), "only files and directories", id="hardlink"),
        pytest.param(info("fifo", tarfile.FIFOTYPE), "only files and directories", id="fifo"),
        pytest.param(info("dev", tarfile.CHRTYPE), "only files and directories", id="device"),
    ],
)
def test_malicious_archives_are_rejected(tmp_path: Path, member: tarfile.TarInfo, match: str) -> None:
    pkg = tar_with(tmp_path / "bad.tar.gz", [info("train.py"), member])
    with pytest.raises(ArchiveError, match=match):
        list_members(pkg)
    out = tmp_path / "out"
    with pytest.raises(ArchiveError, match=match):
        safe_extract(pkg, out)
    assert not (tmp_path / "evil.py").exists()
    assert list(out.rglob("*")) == []  # nothing extracted before the check failed


def test_directories_are_allowed_but_not_listed(tmp_path: Path) -> None:
    pkg = tar_with(tmp_path / "ok.tar.gz", [info("lib", tarfile.DIRTYPE), info("lib/a.py")])
    assert list_members(pkg) == ["lib/a.py"]


@pytest.mark.parametrize("content", [b"", b"not a tar at all", b"\x1f\x8b\x08\x00garbage"])
def test_unreadable_archive_listing_raises_archive_error(tmp_path: Path, content: bytes) -> None:
    pkg = tmp_path / "junk.tar.gz"
    pkg.write_bytes(content)
    with pytest.raises(ArchiveError, match="not a readable"):
        list_members(pkg)


def test_unreadable_archive_extract_raises_archive_error(tmp_path: Path) -> None:
    pkg = tmp_path / "junk.tar.gz"
    pkg.write_bytes(b"not a tar at all")
    with pytest.raises(ArchiveError):
        safe_extract(pkg, tmp_path / "out")
