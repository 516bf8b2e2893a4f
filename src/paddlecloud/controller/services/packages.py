"""Job packages: archives in PFS (``pfs:jobs/<job>/package.tar.gz``), checked at submit time.

``inspect_package`` refuses an archive that is too large, unreadable, or holds anything but plain
files and directories at safe relative paths (see ``core.archive``); ``check_entry`` tells whether the
entry command names a file the package does not have.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from paddlecloud.api.errors import ErrorCode, InvalidInput, PackageTooLarge
from paddlecloud.core.archive import ArchiveError, list_members
from paddlecloud.core.entry import entry_problem
from paddlecloud.core.quantity import human_bytes

__all__ = ["check_entry", "inspect_package"]


def inspect_package(f: BinaryIO, label: str, max_bytes: int) -> list[str]:
    """The file names of the archive open in ``f`` (opened by the caller without following links:
    a job may swap its owner's folders for links); raises InvalidInput / PackageTooLarge with a
    clear message."""
    size = os.fstat(f.fileno()).st_size
    if size > max_bytes:
        raise PackageTooLarge(
            f"package {label} is {human_bytes(size)}, over the limit of {human_bytes(max_bytes)}; leave data "
            "out of it (.paddlecloudignore) and pass it with --input instead",
            field="package",
        )
    try:
        return list_members(f)
    except ArchiveError as exc:
        raise InvalidInput(
            f"package {label}: {exc}", code=ErrorCode.INVALID_PACKAGE, field="package"
        ) from None


def check_entry(entry: str, files: list[str]) -> None:
    problem = entry_problem(entry, files)
    if problem:
        raise InvalidInput(problem, code=ErrorCode.ENTRY_NOT_FOUND, field="entry")
