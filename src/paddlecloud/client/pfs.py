"""The PFS client: namespace calls and the transfer engine behind ``paddlecloud pfs cp``.

    upload   local file ──pread chunk──▶ blake3 digest ──PUT /pfs/uploads/{id}/{i}──▶ server
             (``parallel`` chunks in flight; memory = parallel x chunk size, whatever the file size;
             a restarted copy asks the server what it holds and sends only the other chunks;
             files of at most one chunk go in one PUT)
    download GET /pfs/file?offset&length per chunk ──▶ pwrite into ``<dest>.pfspart`` (+ a journal of
             finished chunks and their digests, so a restarted copy fetches only the rest) ──▶
             whole-file checksum compared with the server's ──▶ rename to ``<dest>``

Directory trees go file by file through the same paths, small files ``parallel`` at a time. Progress
is reported as bytes through a callback (the CLI draws one Rich bar for the whole copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat as st
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.api.errors import ErrorCode, InvalidInput, PaddleCloudError, ServerError
from paddlecloud.api.files import (
    HEADER_DATA_PORT,
    ChecksumView,
    FileInfo,
    FileList,
    PfsHome,
    StorageUsage,
    UploadView,
)
from paddlecloud.client.pfs_data import DataPlane, DataUnavailable
from paddlecloud.client.pfs_local import BATCH, LocalBusy, LocalPlane
from paddlecloud.client.transport import TlsFiles, Transport, no_endpoint, resolve
from paddlecloud.core.checksum import ChunkedHasher, chunk_digest, file_checksum
from paddlecloud.core.fileio import copy_range, hash_range, start_writeback, write_at
from paddlecloud.core.pfspath import expand_short, is_remote

__all__ = ["CopyPlan", "Pfs", "TransferStats"]

Progress = Callable[[int], None]
DIGEST = "X-PaddleCloud-Digest"
CHECKSUM = "X-PaddleCloud-Checksum"
PART = ".pfspart"


def _noop(_n: int) -> None:
    pass


def _proxied() -> bool:
    """Whether the environment names a proxy (``http_proxy``, ``ALL_PROXY``, ...): httpx goes
    through it, ``client.plain`` would not."""
    return any(k.lower() in ("http_proxy", "all_proxy") and v for k, v in os.environ.items())


def _body(data: bytes) -> tuple[Iterator[bytes], dict[str, str]]:
    """Send ``data`` through a one-shot generator: httpx keeps each finished request in a reference
    cycle until the garbage collector runs, and with ``content=bytes`` that pins every chunk sent
    (client memory then grows with the file). The generator lets go of the bytes once sent."""

    def once() -> Iterator[bytes]:
        yield data

    return once(), {"Content-Length": str(len(data))}


@dataclass
class CopyPlan:
    """What a ``cp`` will do: (source, target) pairs, targets already resolved (a PFS target as a
    full ``/pfs/...`` path), and the bytes it moves in all."""

    upload: bool
    items: list[tuple[str, str]] = field(default_factory=list)
    total: int = 0
    #: a download's sources as the plan found them (source text → stat answer): not asked twice
    sources: dict[str, FileInfo] = field(default_factory=dict)


@dataclass
class TransferStats:
    files: int = 0
    bytes_sent: int = 0  # over the wire
    bytes_skipped: int = 0  # already there (resumed)
    dirs: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def count(self, sent: int = 0, skipped: int = 0) -> None:
        with self._lock:
            self.bytes_sent += sent
            self.bytes_skipped += skipped

    def add(self, other: TransferStats) -> None:
        self.files += other.files
        self.bytes_sent += other.bytes_sent
        self.bytes_skipped += other.bytes_skipped
        self.dirs += other.dirs


class Pfs:
    def __init__(self, session: Transport, *, parallel: int = 4, chunk_size: int = 16 << 20) -> None:
        self.session = session
        self.parallel = parallel
        self.chunk_size = chunk_size
        self._home: str | None = None
        #: PFS directories the current copy saw exist (stat'ed or made; forgotten when the next plan
        #: starts): a ``cp`` asks about each once
        self._dirs: set[str] = set()
        self.local = LocalPlane(session)
        #: the server's PFS data port, as ``GET /pfs/home`` named it (None: not asked yet)
        self._data_port: str | None = None
        self._plane: DataPlane | None = None

    @classmethod
    def connect(
        cls,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        tls: TlsFiles = (None, None, None),
        http: Any = None,
    ) -> Pfs:
        """The file service of a new session, by default to the current datacenter of the client
        config. What ``paddlecloud pfs`` uses: it imports none of ``Client``'s job models, and to an
        ``http://`` endpoint not even httpx (``client.plain``). httpx's session (``client.session``)
        where it is needed: ``https://`` (its trust store, the TLS files), a proxy set in the
        environment (httpx honours ``*_proxy``), or ``http``, an ``httpx.Client`` to use (tests)."""
        if http is None:
            endpoint, token, tls = resolve(endpoint, token, tls)
            if not endpoint:
                raise no_endpoint()
            if endpoint.lower().startswith("http://") and not any(tls) and not _proxied():
                from paddlecloud.client.plain import PlainSession

                return cls(PlainSession(endpoint, token, timeout=timeout))
        from paddlecloud.client.session import connect

        return cls(connect(endpoint, token, http=http, timeout=timeout, tls=tls))

    # -- paths ----------------------------------------------------------------------------------

    def home(self) -> str:
        """``/pfs/<datacenter>/home/<me>``: one ``GET /pfs/home`` (a server without it: ``/version``
        for the datacenter and ``/whoami`` for my name, as before it existed)."""
        if self._home is None:
            try:
                r = self._get("/pfs/home")
                self._home = PfsHome.from_json(r.content).path
                self._data_port = r.headers.get(HEADER_DATA_PORT, "")
            except PaddleCloudError as exc:  # an older server's "no such route" (404, invalid_request)
                if exc.code != ErrorCode.INVALID_REQUEST:
                    raise
                dc = self.session.request("GET", "/version").json()["datacenter"]
                user = self.session.request("GET", "/whoami").json()["name"]
                self._home = f"/pfs/{dc}/home/{user}"
                self._data_port = ""
        return self._home

    def data_plane(self) -> DataPlane | None:
        """The server's PFS data port (``client.pfs_data``: chunks off the API's event loop), or None
        (a server without one, ``PADDLECLOUD_PFS_DATA=0``, or not reachable from here)."""
        if self._data_port is None:
            self.home()
        if self._plane is None and self._data_port:
            self._plane = DataPlane.of(self.session, self._data_port)
            self._data_port = ""  # made once
        return self._plane if self._plane is not None and self._plane.reachable else None

    def full(self, text: str) -> str:
        """``pfs:REL`` → ``/pfs/<dc>/home/<me>/REL``; full paths unchanged."""
        if text.startswith("pfs:"):
            _, _pfs, dc, _home, user = self.home().split("/")
            return expand_short(text, dc, user)
        return text

    # -- namespace ------------------------------------------------------------------------------

    def _get(self, endpoint: str, **params: Any) -> Any:
        return self.session.request("GET", endpoint, params=params)

    def stat(self, path: str) -> FileInfo:
        return FileInfo.from_json(self._get("/pfs/stat", path=self.full(path)).content)

    def exists(self, path: str) -> FileInfo | None:
        try:
            return self.stat(path)
        except PaddleCloudError as exc:
            if exc.code == ErrorCode.PATH_NOT_FOUND:
                return None
            raise

    def ls(self, path: str | None = None, recursive: bool = False) -> list[FileInfo]:
        r = self._get("/pfs/list", path=self.full(path or self.home()), recursive=str(recursive).lower())
        return FileList.from_json(r.content).items

    def mkdir(self, path: str, parents: bool = False) -> FileInfo:
        """One directory (``parents``: and the missing ones above it; an existing one is fine)."""
        r = self.session.request("POST", "/pfs/mkdir", json={"path": self.full(path), "parents": parents})
        return FileInfo.from_json(r.content)

    def makedirs(self, path: str, exist_ok: bool = False) -> FileInfo:
        """As ``os.makedirs``: ``path`` and any missing parents; an existing ``path`` is an error
        (``path_exists``) unless ``exist_ok``. ``paddlecloud pfs mkdir [-p]``."""
        if exist_ok:
            return self.mkdir(path, parents=True)
        try:
            return self.mkdir(path)
        except PaddleCloudError as exc:
            if exc.code != ErrorCode.PATH_NOT_FOUND:  # missing parents: made below
                raise
        return self.mkdir(path, parents=True)

    def rm(self, path: str, recursive: bool = False) -> None:
        self.session.request("POST", "/pfs/remove", json={"path": self.full(path), "recursive": recursive})

    def mv(self, src: str, dst: str) -> FileInfo:
        r = self.session.request("POST", "/pfs/move", json={"src": self.full(src), "dst": self.full(dst)})
        return FileInfo.from_json(r.content)

    def usage(self) -> StorageUsage:
        return StorageUsage.from_json(self._get("/pfs/usage").content)

    # -- single files ---------------------------------------------------------------------------

    def upload_file(
        self, local: Path, remote: str, *, overwrite: bool = False, progress: Progress = _noop
    ) -> TransferStats:
        remote = self.full(remote)
        size = local.stat().st_size
        if size <= self.chunk_size:
            data = local.read_bytes()
            h = ChunkedHasher(max(len(data), 1))
            h.update(data)
            params = {"path": remote, "overwrite": str(overwrite).lower()}
            body, length = _body(data)
            self.session.request(
                "PUT", "/pfs/file", params=params, content=body, headers={CHECKSUM: h.checksum(), **length}
            )
            progress(size)
            return TransferStats(files=1, bytes_sent=size)
        begin = {"path": remote, "size": size, "chunk_size": self.chunk_size, "overwrite": overwrite}
        r = self.session.request("POST", "/pfs/uploads", json=begin)
        up = UploadView.from_json(r.content)
        digests: list[str] = [""] * up.chunks
        fd = os.open(local, os.O_RDONLY)
        try:
            conn = self.local.connect(upload_id=up.id)
            stats: TransferStats | None = None
            if conn is not None:
                with contextlib.suppress(LocalBusy):  # the server's socket is full: over HTTP
                    stats = self._upload_local(conn, fd, up, digests, progress)
            if stats is None:  # not on the server's host, or busy
                stats = self._upload_http(fd, up, digests, progress)
        finally:
            os.close(fd)
        self.session.request(
            "POST",
            f"/pfs/uploads/{up.id}/complete",
            params={"overwrite": str(overwrite).lower()},
            json={"checksum": file_checksum(up.chunk_size, digests)},
        )
        return stats

    def _upload_local(
        self, conn: tuple[socket.socket, str], fd: int, up: UploadView, digests: list[str], progress: Progress
    ) -> TransferStats:
        """The same-host fast path: the server copies the chunks it lacks from my open file (no
        HTTP); meanwhile I hash mine, and compare with the digests of what it holds."""
        stats = TransferStats(files=1)

        def mine(i: int) -> None:
            off = i * up.chunk_size
            digests[i] = hash_range(fd, off, min(up.chunk_size, up.size - off))

        def n(i: int) -> int:
            return min(up.chunk_size, up.size - i * up.chunk_size)

        for i in up.received:  # held already (resumed): kept where my file still has the same bytes
            mine(i)
        need = [i for i in range(up.chunks) if up.received.get(i) != digests[i]]
        held: dict[int, str] = {}

        def on_chunk(i: int, digest: str) -> None:
            held[i] = digest
            stats.count(sent=n(i))
            progress(n(i))

        with ThreadPoolExecutor(1) as pool:
            hashing = pool.map(mine, [i for i in need if i not in up.received])
            for start in range(0, len(need), BATCH):  # a grant per batch of chunk indexes
                batch_conn = self.local.connect(upload_id=up.id) if start else conn
                if batch_conn is None:
                    raise ServerError("the server's socket went away mid-upload; copy again")
                try:
                    self.local.upload(batch_conn, fd, need[start : start + BATCH], on_chunk)
                except LocalBusy:  # before any chunk: the caller goes over HTTP; later: resume it
                    if start or held:
                        raise ServerError("the server's socket got busy mid-upload; copy again") from None
                    raise
            list(hashing)
        for i in set(range(up.chunks)) - set(need):  # counted once the socket took the upload
            stats.count(skipped=n(i))
            progress(n(i))
        bad = [i for i in need if held.get(i) != digests[i]]
        if bad:
            raise InvalidInput(
                f"chunk {bad[0]} differs from the local file (changed while it was copied?); copy it again",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        return stats

    def _upload_http(self, fd: int, up: UploadView, digests: list[str], progress: Progress) -> TransferStats:
        """Chunks the server lacks as ``PUT /pfs/uploads/{id}/{i}``, ``parallel`` at a time: on the
        data port when there is one (any chunk it cannot take goes through the API)."""
        stats = TransferStats(files=1)
        plane = self.data_plane()
        # one chunk's buffer per thread, read into again for each chunk: a fresh 16 MiB for every
        # chunk costs its first touch of every page (~0.5 ms a MiB here), more than the hashing
        buffers = threading.local()

        def send(i: int) -> None:
            if not hasattr(buffers, "view"):
                buffers.view = memoryview(bytearray(up.chunk_size))
            off = i * up.chunk_size
            data = _read_fully(fd, buffers.view[: min(up.chunk_size, up.size - off)], off)
            digest = chunk_digest(data)
            digests[i] = digest
            if up.received.get(i) == digest:
                stats.count(skipped=len(data))
            else:
                if plane is None or not _sent_on(plane, up.id, i, data, digest):
                    body, length = _body(bytes(data))
                    self.session.request(
                        "PUT", f"/pfs/uploads/{up.id}/{i}", content=body, headers={DIGEST: digest, **length}
                    )
                stats.count(sent=len(data))
            progress(len(data))

        with ThreadPoolExecutor(self.parallel) as pool:
            list(pool.map(send, range(up.chunks)))
        return stats

    def download_file(
        self, remote: str, local: Path, *, size: int | None = None, progress: Progress = _noop
    ) -> TransferStats:
        remote = self.full(remote)
        if size is None:
            info = self.stat(remote)
            if info.type == "dir":
                raise InvalidInput(f"{remote} is a directory (use -r)", code=ErrorCode.IS_A_DIRECTORY)
            size = info.size
        part = local.with_name(local.name + PART)
        journal_path = local.with_name(local.name + PART + ".json")
        journal = _Journal.open(journal_path, size, self.chunk_size)
        chunks = max((size + self.chunk_size - 1) // self.chunk_size, 1)
        stats = TransferStats(files=1)
        fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
        src: int | None = None
        side = ThreadPoolExecutor(1)  # the server's checksum, asked for while the chunks come
        try:
            if size:  # allocate the blocks at once (a sparse file makes every chunk write slower);
                with contextlib.suppress(OSError):  # without fallocate, the truncate below makes it sparse
                    os.posix_fallocate(fd, 0, size)
            os.ftruncate(fd, size)
            src = self._open_local(remote, size) if size > self.chunk_size else None
            theirs_later = side.submit(self._checksum, remote) if size else None
            plane = self.data_plane() if src is None and size else None

            def fetch(i: int) -> None:
                off = i * self.chunk_size
                n = min(self.chunk_size, size - off)
                if i in journal.done:
                    stats.count(skipped=n)
                    progress(n)
                    return
                if src is not None:  # same host: copied in the kernel, hashed where it landed
                    copy_range(src, fd, off, n)
                    h_digest = hash_range(fd, off, n)
                    start_writeback(fd, off, n)
                    progress(n)
                else:
                    h_digest = self._fetch_chunk(remote, fd, (off, n), progress, plane)
                    start_writeback(fd, off, n)  # the fsync at the end then has little left
                journal.record(i, h_digest)
                stats.count(sent=n)

            with ThreadPoolExecutor(self.parallel) as pool:
                list(pool.map(fetch, range(chunks)))
            os.fsync(fd)
            theirs = theirs_later.result() if theirs_later is not None else self._checksum(remote)
        finally:
            side.shutdown()
            os.close(fd)
            if src is not None:
                os.close(src)
            journal.close()
        digests = [journal.done[i] for i in range(chunks)] if size else []
        mine = file_checksum(self.chunk_size, digests)
        if mine != theirs:
            part.unlink(missing_ok=True)
            journal_path.unlink(missing_ok=True)
            raise InvalidInput(
                f"{remote}: download damaged (checksum mismatch); copy it again",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        os.replace(part, local)
        journal_path.unlink(missing_ok=True)
        return stats

    def _checksum(self, remote: str) -> str:
        answer = self._get("/pfs/checksum", path=remote, chunk_size=self.chunk_size)
        return ChecksumView.from_json(answer.content).checksum

    def _open_local(self, remote: str, size: int) -> int | None:
        """A read-only descriptor of ``remote`` from the server (same-host fast path), else None."""
        conn = self.local.connect(path=remote)
        if conn is None:
            return None
        try:
            fd, got = self.local.open(conn)
        except LocalBusy:  # the server's socket is full: this download goes over HTTP
            return None
        if got != size:
            os.close(fd)
            raise InvalidInput(
                f"{remote} changed size while the copy began ({size} -> {got} bytes); copy it again",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        return fd

    def _fetch_chunk(
        self, remote: str, fd: int, where: tuple[int, int], progress: Progress, plane: DataPlane | None
    ) -> str:
        """Bytes ``where`` = (offset, length) of ``remote`` written there in ``fd``; their digest. On
        the data port when there is one and it takes the request, else through the API."""
        off, n = where
        if n == 0:
            return chunk_digest(b"")
        if plane is not None:
            with contextlib.suppress(DataUnavailable):
                return plane.fetch(remote, fd, off, n, progress)
        import blake3

        h = blake3.blake3()
        pos = off
        for piece in self.session.stream_bytes(
            "/pfs/file", params={"path": remote, "offset": off, "length": n}
        ):
            h.update(piece)
            pos += write_at(fd, [piece], pos)
            progress(len(piece))
        if pos - off != n:
            raise InvalidInput(f"{remote}: short read at offset {off}", code=ErrorCode.CHECKSUM_MISMATCH)
        return h.hexdigest()

    # -- cp -------------------------------------------------------------------------------------

    def plan(self, srcs: list[str], dst: str, recursive: bool) -> CopyPlan:
        """Where each of ``srcs`` goes and how many bytes the copy moves, every source checked first
        (so nothing is drawn or moved before a mistake is reported). ``cp`` semantics, on either
        side: into ``dst`` as ``dst/<name>`` when ``dst`` is an existing directory or ends in ``/``,
        else as ``dst`` itself (its missing parents are created, as ``mkdir -p`` would)."""
        upload = is_remote(dst)
        self._dirs.clear()
        for src in srcs:
            if is_remote(src) == upload:
                raise InvalidInput(
                    f"copy between a local path and a PFS path (/pfs/... or pfs:...): {src} -> {dst}"
                )
        into = dst.endswith("/") or self._is_dir(dst, upload)
        if len(srcs) > 1 and not into:
            raise InvalidInput(
                f"copying several sources needs a directory as destination: {dst} is none; "
                f"write {dst}/ to create it"
            )
        base = self.full(dst).rstrip("/") if upload else dst
        plan = CopyPlan(upload=upload)
        for src in srcs:
            name, size = (
                self._local_source(src, recursive) if upload else self._remote_source(src, recursive, plan)
            )
            if upload:
                plan.items.append((src, f"{base}/{name}" if into else base))
            else:
                plan.items.append((src, str(Path(base) / name if into else Path(base))))
            plan.total += size
        return plan

    def _local_source(self, src: str, recursive: bool) -> tuple[str, int]:
        p = Path(src)
        if not p.exists():
            raise InvalidInput(f"{src}: no such file or directory", code=ErrorCode.PATH_NOT_FOUND)
        if not p.is_dir():
            return p.resolve().name, p.stat().st_size
        if not recursive:
            raise InvalidInput(f"{src} is a directory (use -r)", code=ErrorCode.IS_A_DIRECTORY)
        return p.resolve().name, sum(f.stat().st_size for f, _ in _walk_local(p)[0])

    def _remote_source(self, src: str, recursive: bool, plan: CopyPlan) -> tuple[str, int]:
        info = plan.sources[src] = self.stat(src)
        name = info.path.rstrip("/").rsplit("/", 1)[-1]
        if info.type != "dir":
            return name, info.size
        if not recursive:
            raise InvalidInput(f"{src} is a directory (use -r)", code=ErrorCode.IS_A_DIRECTORY)
        return name, sum(f.size for f in self.ls(src, recursive=True) if f.type == "file")

    def cp(
        self,
        srcs: list[str],
        dst: str,
        *,
        recursive: bool = False,
        overwrite: bool = False,
        progress: Progress = _noop,
        plan: CopyPlan | None = None,
    ) -> TransferStats:
        """``cp [-r] SRC... DST`` between local paths and PFS paths (one side must be PFS); where
        things go: :meth:`plan` (pass the plan made for a progress bar to skip checking twice)."""
        plan = plan or self.plan(srcs, dst, recursive)
        stats = TransferStats()
        for src, target in plan.items:
            if plan.upload:
                stats.add(self._put(Path(src), target, overwrite, progress))
            else:
                info = plan.sources.get(src) or self.stat(src)
                stats.add(self._fetch(info, Path(target), overwrite, progress))
        return stats

    def _is_dir(self, path: str, remote: bool) -> bool:
        if remote:
            info = self.exists(path)
            if info is not None and info.type == "dir":
                self._dirs.add(self.full(path).rstrip("/"))
                return True
            return False
        return Path(path).is_dir()

    def _known_dir(self, path: str) -> bool:
        """``path`` (a full PFS path) is a directory this copy saw, or a home: the server makes a
        home on the first write into it, so an upload there needs no stat first."""
        parts = path.split("/")
        return path in self._dirs or (len(parts) == 5 and parts[:2] == ["", "pfs"] and parts[3] == "home")

    def _put(self, src: Path, dst: str, overwrite: bool, progress: Progress) -> TransferStats:
        if not src.is_dir():
            parent = dst.rsplit("/", 1)[0]
            if not self._known_dir(parent) and self.exists(parent) is None:
                self.mkdir(parent, parents=True)
            self._dirs.add(parent)
            return self.upload_file(src, dst, overwrite=overwrite, progress=progress)
        files, dirs = _walk_local(src)
        stats = TransferStats(dirs=len(dirs) + 1)
        self.mkdir(dst, parents=True)
        for d in dirs:
            self.mkdir(f"{dst}/{d}", parents=True)
        small = [(f, rel) for f, rel in files if f.stat().st_size <= self.chunk_size]
        large = [(f, rel) for f, rel in files if f.stat().st_size > self.chunk_size]

        def one(item: tuple[Path, str]) -> TransferStats:
            return self.upload_file(item[0], f"{dst}/{item[1]}", overwrite=overwrite, progress=progress)

        with ThreadPoolExecutor(self.parallel * 2) as pool:
            for s in pool.map(one, small):
                stats.add(s)
        for item in large:
            stats.add(one(item))
        return stats

    def _fetch(self, info: FileInfo, dst: Path, overwrite: bool, progress: Progress) -> TransferStats:
        src = info.path
        if info.type == "file":
            if dst.exists() and not overwrite:
                raise InvalidInput(f"{dst} exists (use --force to overwrite)", code=ErrorCode.PATH_EXISTS)
            dst.parent.mkdir(parents=True, exist_ok=True)
            return self.download_file(src, dst, size=info.size, progress=progress)
        entries = self.ls(src, recursive=True)
        stats = TransferStats(dirs=1)
        dst.mkdir(parents=True, exist_ok=True)
        base = info.path.rstrip("/") + "/"
        for e in entries:
            if e.type == "dir":
                (dst / e.path[len(base) :]).mkdir(parents=True, exist_ok=True)
                stats.dirs += 1
        files = [e for e in entries if e.type == "file"]

        def one(e: FileInfo) -> TransferStats:
            target = dst / e.path[len(base) :]
            if target.exists() and not overwrite:
                raise InvalidInput(f"{target} exists (use --force to overwrite)", code=ErrorCode.PATH_EXISTS)
            return self.download_file(e.path, target, size=e.size, progress=progress)

        small = [e for e in files if e.size <= self.chunk_size]
        with ThreadPoolExecutor(self.parallel * 2) as pool:
            for s in pool.map(one, small):
                stats.add(s)
        for e in files:
            if e.size > self.chunk_size:
                stats.add(one(e))
        return stats


def _read_fully(fd: int, view: memoryview, off: int) -> memoryview:
    """``view`` filled from ``fd`` at ``off`` (the part read: shorter only at the end of the file)."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], off + got)
        if n == 0:
            break
        got += n
    return view[:got]


def _sent_on(plane: DataPlane, upload_id: str, index: int, data: memoryview, digest: str) -> bool:
    """Chunk ``index`` sent on the data port; False when the port could not take it."""
    try:
        plane.put_chunk(upload_id, index, data, digest)
    except DataUnavailable:
        return False
    return True


def _walk_local(root: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """Regular files (path, relative name) and directories (relative) under ``root``; links skipped."""
    files: list[tuple[Path, str]] = []
    dirs: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        rel = base.relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
        dirs.extend(prefix + d for d in dirnames)
        for fn in sorted(filenames):
            p = base / fn
            if st.S_ISREG(os.lstat(p).st_mode):
                files.append((p, prefix + fn))
    return files, dirs


class _Journal:
    """Finished chunks of a download (index → digest), appended to a side file as they complete.

    The first line names the file's size and chunk size; a journal for another size is discarded
    with its partial file. A torn last line (the copy was killed mid-write) is ignored: that chunk is
    fetched again.
    """

    def __init__(self, path: Path, done: dict[int, str], fresh_header: dict[str, int] | None) -> None:
        self.path = path
        self.done = done
        self._lock = threading.Lock()
        self._f = open(path, "w" if fresh_header else "a")  # noqa: SIM115 - closed by close()
        if fresh_header:
            self._f.write(json.dumps(fresh_header) + "\n")
            self._f.flush()

    @classmethod
    def open(cls, path: Path, size: int, chunk_size: int) -> _Journal:
        header = {"size": size, "chunk_size": chunk_size}
        done: dict[int, str] = {}
        try:
            lines = path.read_text().splitlines()
        except OSError:
            lines = []
        try:
            valid = bool(lines) and json.loads(lines[0]) == header
        except ValueError:
            valid = False
        if not valid:
            path.with_name(path.name.removesuffix(".json")).unlink(missing_ok=True)  # its partial file
            return cls(path, {}, header)
        for line in lines[1:]:
            try:
                rec = json.loads(line)
                done[int(rec["i"])] = str(rec["d"])
            except (ValueError, KeyError, TypeError):
                break
        return cls(path, done, None)

    def record(self, i: int, digest: str) -> None:
        with self._lock:
            self.done[i] = digest
            self._f.write(json.dumps({"i": i, "d": digest}) + "\n")
            self._f.flush()

    def close(self) -> None:
        self._f.close()
