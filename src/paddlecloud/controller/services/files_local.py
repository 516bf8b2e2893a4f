"""The PFS same-host fast path: one-time grants, and the copies they allow, by open descriptor.

    client ──POST /pfs/local (bearer token)──▶ grant(who, upload id | path) ──▶ {grant, address}
    client ──Unix socket: grant + its own open file──▶ fill(): copy_file_range into the upload's
           staging file (the server's own), hash what landed, mark each chunk ──▶ digests back
    client ──Unix socket: grant──▶ open(): a read-only descriptor of the file ──▶ the client copies it

The data never crosses HTTP and never passes through Python. What keeps it safe:

* The server opens nothing the client names on the socket: an upload's source is a descriptor the
  client opened itself (so only what the client may read), checked to be a regular file of the
  upload's size; a download's descriptor is opened by the server read-only, after the same access
  check as ``GET /pfs/file`` (and without following links, by the store), so the client gets read
  access to one file it may read and nothing else. The client never gets a descriptor of a staging
  file or a directory, so it cannot write into the store.
* A grant is 256 random bits, bound to the user and to one upload or path at issue, usable once, for
  ``GRANT_TTL_S`` seconds; access is checked again when it is used. Chunks are verified (the server
  hashes what it holds; the client compares with its own file's digests and the whole-file checksum
  at ``complete``), resumable (marks as with HTTP) and committed atomically by ``complete``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat as st
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from paddlecloud.api.errors import ErrorCode, Forbidden, InvalidInput
from paddlecloud.api.files import LocalGrant
from paddlecloud.controller.model.identity import Identity
from paddlecloud.controller.services.files import FileService
from paddlecloud.core.pfspath import PfsPath

__all__ = ["GRANT_TTL_S", "LocalTransfers"]

GRANT_TTL_S = 30.0
#: grants outstanding at once (unused ones expire); more are refused until some are used
MAX_GRANTS = 256


@dataclass(frozen=True)
class _Grant:
    who: Identity
    upload_id: str | None
    path: str | None
    expires: float


class LocalTransfers:
    """Grants and the transfers they allow; ``address`` is set by the server once its Unix socket
    listens (``None``: no fast path here, ``grant`` answers ``not_supported``)."""

    def __init__(self, files: FileService, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self.clock = clock
        self.address: str | None = None
        self._grants: dict[str, _Grant] = {}
        self._lock = threading.Lock()

    def grant(self, who: Identity, upload_id: str | None, path: str | None) -> LocalGrant:
        if (upload_id is None) == (path is None):
            raise InvalidInput("name exactly one of upload_id and path", code=ErrorCode.INVALID_REQUEST)
        if upload_id is not None:
            self.files.upload_state(who, upload_id)  # the caller's own upload, or upload_not_found
        else:
            self.files.stat(who, str(path))  # readable by the caller, or forbidden / path_not_found
            # A descriptor handed over can be reopened for writing through /proc/self/fd (the store's
            # files belong to the server's uid, which sandboxed jobs map to): only files the caller
            # may write anyway go this way; the rest (public, another user's shared data) over HTTP.
            try:
                self.files.resolve(who, str(path), write=True)
            except Forbidden:
                raise InvalidInput(
                    "same-host downloads are offered for files you may write; the client uses HTTP",
                    code=ErrorCode.NOT_SUPPORTED,
                ) from None
        if self.address is None:
            raise InvalidInput(
                "this server offers no same-host transfers; the client falls back to HTTP",
                code=ErrorCode.NOT_SUPPORTED,
            )
        token = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._grants = {k: g for k, g in self._grants.items() if g.expires > now}
            if len(self._grants) >= MAX_GRANTS:
                raise Forbidden(
                    f"too many same-host transfers waiting (at most {MAX_GRANTS}); try again shortly",
                    code=ErrorCode.FORBIDDEN,
                )
            self._grants[token] = _Grant(who, upload_id, path, now + GRANT_TTL_S)
        return LocalGrant(grant=token, address=self.address, expires_in=GRANT_TTL_S)

    def _take(self, token: object) -> _Grant:
        with self._lock:
            g = self._grants.pop(token, None) if isinstance(token, str) else None
        if g is None or g.expires <= self.clock():
            raise Forbidden("unknown, used or expired grant; ask for a new one", code=ErrorCode.FORBIDDEN)
        return g

    def fill(self, token: object, src_fd: int, chunks: object, on_chunk: Callable[[int, str], None]) -> None:
        """Copy the chunks ``chunks`` (indexes) of the client's open file ``src_fd`` into the granted
        upload's staging file; ``on_chunk(index, digest)`` after each is verified-held and marked."""
        g = self._take(token)
        if g.upload_id is None:
            raise Forbidden("this grant is for a download", code=ErrorCode.FORBIDDEN)
        state = self.files.upload_state(g.who, g.upload_id)
        self.files.resolve(g.who, str(PfsPath.from_key(self.files.datacenter, state.key)), write=True)
        if (
            not isinstance(chunks, list)
            or not all(isinstance(i, int) and 0 <= i < state.chunks for i in chunks)
            or len(set(chunks)) != len(chunks)
        ):
            raise InvalidInput(
                f"chunks must be distinct indexes in 0..{state.chunks - 1}", code=ErrorCode.INVALID_REQUEST
            )
        s = os.fstat(src_fd)
        readable = fcntl.fcntl(src_fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY
        if not st.S_ISREG(s.st_mode) or s.st_size != state.size or not readable:
            raise InvalidInput(
                f"the descriptor sent must be a regular file of {state.size} bytes (the upload's size), "
                "open for reading",
                code=ErrorCode.INVALID_REQUEST,
            )
        for i in chunks:
            off = i * state.chunk_size
            digest = self.files.copy_chunk_in(state, i, src_fd, off, min(state.chunk_size, state.size - off))
            on_chunk(i, digest)

    def open(self, token: object) -> tuple[int, int]:
        """A read-only descriptor of the granted file and its size (the caller closes it)."""
        g = self._take(token)
        if g.path is None:
            raise Forbidden("this grant is for an upload", code=ErrorCode.FORBIDDEN)
        return self.files.open_read(g.who, g.path)
