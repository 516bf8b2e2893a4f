"""A user's registry credentials, encrypted at rest, and the one read of them a job's pull makes.

    services.registries ──put(user, registry, username, password)──▶ RegistryLoginRow
                          (the password sealed by the SecretBox: Fernet, AES-128-CBC + HMAC-SHA256)
    Context.launch ──auth_for(s, box, owner, registry)──▶ RegistryAuth (backends.images), opened
                          for the job's own owner only, handed to the backend's pull

The key is one file of the server's data dir (``secrets/registry.key``, 0600, made on first use),
which no job sees (the sandbox binds nothing of the data dir). A database copied without it holds
no usable password. ``cryptography``'s Fernet rather than hand-written crypto.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select
from sqlalchemy.orm import Session

from paddlecloud.backends.images import RegistryAuth
from paddlecloud.store.tables import RegistryLoginRow

__all__ = ["SecretBox", "auth_for", "login_row"]


class SecretBox:
    """Seal and open secrets with the key in ``path`` (made, 0600, when it does not exist)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fernet: Fernet | None = None
        self._lock = threading.Lock()

    def _key(self) -> Fernet:
        with self._lock:
            if self._fernet is None:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.chmod(self.path.parent, 0o700)
                if not self.path.exists():  # written aside and linked into place: never seen half-written
                    part = self.path.with_name(f".{self.path.name}.{os.getpid()}.part")
                    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(Fernet.generate_key())
                    with contextlib.suppress(FileExistsError):  # another server made it first: its wins
                        os.link(part, self.path)
                    os.unlink(part)
                os.chmod(self.path, 0o600)
                self._fernet = Fernet(self.path.read_bytes().strip())
            return self._fernet

    def seal(self, secret: str) -> bytes:
        return self._key().encrypt(secret.encode())

    def open(self, sealed: bytes) -> str | None:
        """The secret, or None when it was sealed with another key (a lost or replaced key file)."""
        try:
            return self._key().decrypt(sealed).decode()
        except InvalidToken:
            return None


def login_row(s: Session, user: str, registry: str) -> RegistryLoginRow | None:
    where = (RegistryLoginRow.user == user, RegistryLoginRow.registry_name == registry)
    return s.scalar(select(RegistryLoginRow).where(*where))


def auth_for(s: Session, box: SecretBox, owner: str, registry: str) -> RegistryAuth | None:
    """``owner``'s credentials for ``registry`` (None: they gave none, or they cannot be opened)."""
    row = login_row(s, owner, registry)
    if row is None:
        return None
    password = box.open(row.secret)
    return None if password is None else RegistryAuth(registry, row.username, password)
