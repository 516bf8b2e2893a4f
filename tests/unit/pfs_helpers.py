"""Helpers, constants and fixtures shared by the PFS service tests (test_pfs_service.py and
test_pfs_access.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.api.files import UploadView
from paddlecloud.client import Client
from paddlecloud.client.pfs import Pfs
from paddlecloud.controller import Platform
from paddlecloud.core.checksum import ChunkedHasher, chunk_digest

MiB = 1 << 20
CHUNK = MiB  # the smallest chunk the server accepts: multi-chunk files stay small
HOME = "/pfs/local/home/alice"
PUBLIC = "/pfs/local/public"
DIGEST = "X-PaddleCloud-Digest"
CHECKSUM = "X-PaddleCloud-Checksum"

ClientFor = Callable[..., Client]


# -- helpers -------------------------------------------------------------------------------------


def fs_of(client: Client, parallel: int = 4) -> Pfs:
    fs = client.pfs  # a new Pfs each time: configure the one used
    fs.chunk_size = CHUNK
    fs.parallel = parallel
    return fs


def blob(n: int, seed: int = 0) -> bytes:
    """``n`` deterministic, non-repeating bytes (every chunk distinct)."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def error_of(call: Callable[[], object]) -> PaddleCloudError:
    with pytest.raises(PaddleCloudError) as info:
        call()
    return info.value


def store_dir(platform: Platform) -> Path:
    return Path(platform.ctx.config.pfs_dir)


def staged(platform: Platform) -> list[str]:
    return sorted(p.name for p in (store_dir(platform) / "uploads").iterdir())


def tree_of(root: Path) -> dict[str, bytes | None]:
    """Relative path → bytes (files) or None (directories)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def begin(client: Client, path: str, size: int, chunk_size: int = CHUNK, **kw: Any) -> UploadView:
    body = {"path": path, "size": size, "chunk_size": chunk_size, **kw}
    return UploadView.from_json(client.request("POST", "/pfs/uploads", json=body).content)


def put_chunk(client: Client, up: UploadView, index: int, data: bytes, digest: str | None = None) -> None:
    client.request(
        "PUT", f"/pfs/uploads/{up.id}/{index}", content=data, headers={DIGEST: digest or chunk_digest(data)}
    )


def chunks_of(data: bytes, size: int = CHUNK) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def whole(data: bytes, size: int = CHUNK) -> str:
    h = ChunkedHasher(size)
    h.update(data)
    return h.checksum()


def download(client: Client, remote: str) -> bytes:
    return b"".join(client.stream_bytes("/pfs/file", params={"path": remote}))


SIZE = 3 * CHUNK + CHUNK // 2  # 4 chunks, the last one half
