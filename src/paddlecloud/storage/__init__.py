"""File storage behind the PFS service: a documented interface and the local-directory store.

An object store can be added by implementing :class:`FileStore`; the routes and the FileService do
not change.
"""

from __future__ import annotations

from paddlecloud.storage.base import Entry, FileStore, StorageError, UploadState
from paddlecloud.storage.local import LocalDirStore

__all__ = ["Entry", "FileStore", "LocalDirStore", "StorageError", "UploadState"]
