"""Job package archives: build one from a directory (client) and unpack one safely (server).

A package is a gzip'd tar of the package directory, leaving out ``.git``, ``__pycache__``, ``*.pyc``
and whatever ``.paddlecloudignore`` lists (the same syntax as ``.gitignore``). Unpacking refuses
absolute paths, ``..``, links, devices and anything else that could land outside the target directory.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pathspec

__all__ = ["ArchiveError", "IgnoreRules", "build_archive", "list_members", "safe_extract", "walk_files"]

ALWAYS_IGNORED = (".git/", "__pycache__/", "*.pyc", ".paddlecloud/", ".venv/")
IGNORE_FILE = ".paddlecloudignore"


class ArchiveError(ValueError):
    """The package archive is unreadable or unsafe."""


class IgnoreRules:
    """gitignore semantics (via ``pathspec``): ``/x`` is anchored at the package root, ``*`` does not
    cross ``/``, ``**`` does, a trailing ``/`` matches directories only, ``!`` re-includes. Lines are
    stripped of surrounding whitespace."""

    def __init__(self, patterns: list[str]) -> None:
        self.spec = pathspec.GitIgnoreSpec.from_lines(p.strip() for p in patterns)

    @classmethod
    def for_dir(cls, root: Path) -> IgnoreRules:
        extra: list[str] = []
        f = root / IGNORE_FILE
        if f.is_file():
            extra = f.read_text(encoding="utf-8", errors="replace").splitlines()
        return cls([*ALWAYS_IGNORED, *extra])

    def ignored(self, rel: str, is_dir: bool) -> bool:
        return bool(self.spec.match_file(rel + "/" if is_dir else rel))


def walk_files(root: Path, rules: IgnoreRules) -> Iterator[tuple[Path, str]]:
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        rel_base = base.relative_to(root).as_posix()
        rel_base = "" if rel_base == "." else rel_base + "/"
        dirnames[:] = sorted(d for d in dirnames if not rules.ignored(rel_base + d, True))
        for fn in sorted(filenames):
            rel = rel_base + fn
            if not rules.ignored(rel, False):
                yield base / fn, rel


def build_archive(root: Path, out: IO[bytes], max_bytes: int | None = None) -> int:
    """Write the package at ``root`` to ``out`` as tar.gz; returns the number of files.

    Raises :class:`ArchiveError` once the compressed size passes ``max_bytes``.
    """
    count = 0
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
        for path, rel in walk_files(root, IgnoreRules.for_dir(root)):
            if path.is_symlink() or not path.is_file():
                continue
            tar.add(str(path), arcname=rel, recursive=False)
            count += 1
            if max_bytes is not None and out.tell() > max_bytes:
                raise ArchiveError(f"package is larger than the server's limit of {max_bytes} bytes")
    return count


def _check(member: tarfile.TarInfo) -> None:
    name = member.name
    if name.startswith("/") or "\x00" in name or ".." in Path(name).parts:
        raise ArchiveError(f"unsafe path in package: {name!r}")
    if not (member.isfile() or member.isdir()):
        raise ArchiveError(f"package may hold only files and directories, not {name!r}")


def list_members(source: Path | IO[bytes]) -> list[str]:
    """Validate every member of the archive (a path, or a file already opened safely by the
    caller) and return the file names."""
    try:
        path, fileobj = (source, None) if isinstance(source, Path) else (None, source)
        with tarfile.open(path, mode="r:gz", fileobj=fileobj) as tar:
            files = []
            for m in tar:
                _check(m)
                if m.isfile():
                    files.append(m.name)
            return files
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"package is not a readable tar.gz archive: {exc}") from None


def safe_extract(source: Path | IO[bytes], dest: Path) -> None:
    """Unpack a package (a path, or a file already opened safely by the caller) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        path, fileobj = (source, None) if isinstance(source, Path) else (None, source)
        with tarfile.open(path, mode="r:gz", fileobj=fileobj) as tar:
            members = list(tar)
            for m in members:
                _check(m)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"package is not a readable tar.gz archive: {exc}") from None
