"""Job packages: receive an uploaded archive as a stream, verify it, store it by content.

    client ──PUT body (tar.gz, streamed)──▶ temp file (size limit, sha256 on the fly)
           ──▶ every member checked (no links, no .., no absolute paths)
           ──▶ renamed to ``packages/<sha256>.tar.gz`` + a row listing its files

The same content uploaded twice is stored once. ``check_entry`` tells at submit time whether the
entry command names a file that is not in the package.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.api.errors import ErrorCode, InvalidInput, NotFound, PackageTooLarge
from paddlecloud.api.models import PackageView
from paddlecloud.core.archive import ArchiveError, list_members
from paddlecloud.core.clock import Clock
from paddlecloud.core.entry import entry_problem
from paddlecloud.store.tables import JobRow, PackageRow

__all__ = ["PackageStore", "check_entry"]


class PackageStore:
    def __init__(self, root: Path, max_bytes: int, clock: Clock) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.clock = clock
        root.mkdir(parents=True, exist_ok=True)

    def path(self, package_id: str) -> Path:
        return self.root / f"{package_id}.tar.gz"

    def receive(self, session: Session, user: str, chunks: Iterable[bytes]) -> PackageView:
        digest = hashlib.sha256()
        size = 0
        fd, tmp_name = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise PackageTooLarge(
                            f"package is larger than the limit of {self.max_bytes // 2**20} MiB; leave data "
                            "out of it (.paddlecloudignore) and read it from the file store instead"
                        )
                    digest.update(chunk)
                    out.write(chunk)
            if size == 0:
                raise InvalidInput("package upload is empty", code=ErrorCode.INVALID_PACKAGE)
            try:
                files = list_members(tmp)
            except ArchiveError as exc:
                raise InvalidInput(str(exc), code=ErrorCode.INVALID_PACKAGE) from None
            package_id = digest.hexdigest()
            os.replace(tmp, self.path(package_id))
        finally:
            tmp.unlink(missing_ok=True)
        if session.get(PackageRow, package_id) is None:
            session.add(
                PackageRow(id=package_id, user=user, size=size, files=files, created_at=self.clock.now())
            )
            session.commit()
        return PackageView(id=package_id, size=size, files=len(files))

    def get(self, session: Session, package_id: str) -> PackageRow:
        row = session.get(PackageRow, package_id)
        if row is None or not self.path(package_id).exists():
            raise NotFound(
                f"package {package_id[:12]} was not uploaded (upload it with POST /api/v1/packages)",
                code=ErrorCode.PACKAGE_NOT_FOUND,
                field="package",
            )
        return row

    def collect(self, session: Session, package_id: str) -> None:
        """Remove a package that no job refers to any more."""
        used = session.scalar(select(JobRow.id).where(JobRow.package_id == package_id).limit(1))
        if used is None:
            row = session.get(PackageRow, package_id)
            if row is not None:
                session.delete(row)
            self.path(package_id).unlink(missing_ok=True)


def check_entry(entry: str, files: list[str]) -> None:
    problem = entry_problem(entry, files)
    if problem:
        raise InvalidInput(problem, code=ErrorCode.ENTRY_NOT_FOUND, field="entry")
