"""Pack a job package directory into a temporary tar.gz for upload (see ``core.archive``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO

from paddlecloud.api.errors import ErrorCode, InvalidInput, PackageTooLarge
from paddlecloud.core.entry import entry_problem

__all__ = ["check_package_dir", "pack_directory"]


def check_package_dir(root: Path) -> None:
    if not root.exists():
        raise InvalidInput(f"package directory {str(root)!r} does not exist", field="package")
    if not root.is_dir():
        raise InvalidInput(f"package {str(root)!r} is not a directory", field="package")


def pack_directory(root: Path, entry: str | None, max_bytes: int) -> tuple[IO[bytes], int]:
    """Return an open temp file holding the archive (caller closes it) and the number of files."""
    # imported here: tarfile + pathspec cost ~10 ms that only `submit` needs
    from paddlecloud.core.archive import ArchiveError, build_archive

    check_package_dir(root)
    out = tempfile.NamedTemporaryFile(suffix=".tar.gz")  # noqa: SIM115 - the caller closes it
    try:
        count = build_archive(root, out, max_bytes)
        files = _names(root) if entry else []
    except ArchiveError as exc:
        out.close()
        raise PackageTooLarge(
            f"{exc}; leave large files out with a .paddlecloudignore in {root}",
            code=ErrorCode.PACKAGE_TOO_LARGE,
        ) from None
    except BaseException:
        out.close()
        raise
    if entry:
        problem = entry_problem(entry, files)
        if problem:
            out.close()
            raise InvalidInput(problem, code=ErrorCode.ENTRY_NOT_FOUND, field="entry")
    out.seek(0)
    return out, count


def _names(root: Path) -> list[str]:
    from paddlecloud.core.archive import IgnoreRules, walk_files

    return [rel for _, rel in walk_files(root, IgnoreRules.for_dir(root))]
