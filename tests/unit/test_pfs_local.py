"""The PFS same-host fast path (controller/services/files_local.py, server/pfs_socket.py,
client/pfs_local.py): data moved as an open descriptor over the server's Unix socket, with the
guarantees of the HTTP path (verified, resumable, atomic, tenancy) and nothing more for a hostile
client than HTTP gives it."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pfs_helpers import (
    CHUNK,
    HOME,
    PUBLIC,
    SIZE,
    begin,
    blob,
    chunks_of,
    fs_of,
    put_chunk,
    staged,
    store_dir,
    whole,
    write,
)

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.api.files import LocalGrant
from paddlecloud.client import Client
from paddlecloud.client.pfs_local import ENV_SWITCH
from paddlecloud.controller import Platform
from paddlecloud.core.fdpass import recv_msg, send_msg
from paddlecloud.server import pfs_socket
from paddlecloud.server.pfs_socket import PfsSocket

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sock(platform: Platform) -> Iterator[PfsSocket]:
    s = PfsSocket(platform.pfs_local)
    s.start()
    yield s
    s.stop()


def requests_of(client: Client) -> list[tuple[str, str]]:
    """Record (method, path) of every request the client's PFS session makes from now on."""
    seen: list[tuple[str, str]] = []
    orig = client.pfs.session.request

    def spy(method: str, path: str, **kw: Any) -> Any:
        seen.append((method, path))
        return orig(method, path, **kw)

    client.pfs.session.request = spy  # type: ignore[method-assign]
    return seen


def grant(client: Client, **target: str) -> LocalGrant:
    return LocalGrant.from_json(client.request("POST", "/pfs/local", json=target).content)


def redeem(g: LocalGrant, msg: dict[str, Any], fds: list[int] | None = None) -> list[dict[str, Any]]:
    """Send one request on the server's socket; every answer until it closes."""
    out: list[dict[str, Any]] = []
    with socket.socket(socket.AF_UNIX) as s:
        s.connect("\0" + g.address.removeprefix("@"))
        send_msg(s, {"grant": g.grant, **msg}, fds=fds)
        while True:
            try:
                m, got = recv_msg(s)
            except Exception:
                return out
            for fd in got:
                os.close(fd)
            out.append(m)


def test_round_trip_moves_no_data_over_http(
    sock: PfsSocket, alice: Client, platform: Platform, tmp_path: Path
) -> None:
    data = blob(SIZE, seed=1)
    src = write(tmp_path / "big.bin", data)
    fs = fs_of(alice)
    seen = requests_of(alice)
    stats = fs.upload_file(src, f"{HOME}/big.bin")
    assert stats.bytes_sent == SIZE and stats.bytes_skipped == 0
    assert not [r for r in seen if r[0] == "PUT"], seen  # no chunk went over HTTP
    assert (store_dir(platform) / "files/home/alice/big.bin").read_bytes() == data
    out = tmp_path / "back.bin"
    fs.download_file(f"{HOME}/big.bin", out)
    assert out.read_bytes() == data
    assert not list(tmp_path.glob("*.pfspart*"))


def test_resumed_upload_copies_only_missing_chunks(
    sock: PfsSocket, alice: Client, platform: Platform, tmp_path: Path
) -> None:
    data = blob(SIZE, seed=2)
    src = write(tmp_path / "r.bin", data)
    up = begin(alice, f"{HOME}/r.bin", SIZE)
    for i in (0, 2):
        put_chunk(alice, up, i, chunks_of(data)[i])
    stats = fs_of(alice).upload_file(src, f"{HOME}/r.bin")
    assert stats.bytes_skipped == 2 * CHUNK and stats.bytes_sent == SIZE - 2 * CHUNK
    assert fs_of(alice).stat(f"{HOME}/r.bin").size == SIZE
    assert staged(platform) == []


def test_switched_off_uses_http(
    sock: PfsSocket, alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SWITCH, "0")
    src = write(tmp_path / "h.bin", blob(SIZE, seed=3))
    fs = fs_of(alice)
    seen = requests_of(alice)
    fs.upload_file(src, f"{HOME}/h.bin")
    assert ("POST", "/pfs/local") not in seen and sum(m == "PUT" for m, _ in seen) == 4


def test_a_full_socket_sends_the_transfer_over_http_instead_of_failing(
    platform: Platform, alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection slot taken (here: none at all): the socket answers "busy" and the client
    moves the same bytes over HTTP, both ways, instead of failing the copy."""
    monkeypatch.setattr(pfs_socket, "MAX_CONNECTIONS", 0)
    full = PfsSocket(platform.pfs_local)
    full.start()
    try:
        data = blob(SIZE, seed=5)
        fs = fs_of(alice)
        seen = requests_of(alice)
        stats = fs.upload_file(write(tmp_path / "b.bin", data), f"{HOME}/b.bin")
        assert stats.bytes_sent == SIZE
        assert ("POST", "/pfs/local") in seen  # the fast path was tried ...
        assert sum(m == "PUT" for m, _ in seen) == 4  # ... and every chunk went over HTTP
        out = tmp_path / "back.bin"
        fs.download_file(f"{HOME}/b.bin", out)
        assert out.read_bytes() == data
        assert sum(p == "/pfs/local" for _, p in seen) == 2
    finally:
        full.stop()


def test_grant_is_one_time_and_for_one_operation(sock: PfsSocket, alice: Client, tmp_path: Path) -> None:
    fs_of(alice).upload_file(write(tmp_path / "f.bin", blob(SIZE)), f"{HOME}/f.bin")
    g = grant(alice, path=f"{HOME}/f.bin")
    first = redeem(g, {"op": "download"})
    assert first[0]["ok"] is True and first[0]["size"] == SIZE
    again = redeem(g, {"op": "download"})
    assert again[0]["error"]["code"] == "forbidden" and again[0]["status"] == 403
    g2 = grant(alice, path=f"{HOME}/f.bin")  # a download grant does not fill an upload
    with open(tmp_path / "f.bin", "rb") as f:
        wrong = redeem(g2, {"op": "upload", "chunks": [0]}, fds=[f.fileno()])
    assert wrong[0]["error"]["code"] == "forbidden"


def test_grants_follow_tenancy(
    sock: PfsSocket, alice: Client, client_for: Callable[..., Client], tmp_path: Path
) -> None:
    fs_of(alice).upload_file(write(tmp_path / "s.bin", blob(SIZE)), f"{HOME}/s.bin")
    up = begin(alice, f"{HOME}/t.bin", SIZE)
    bob = client_for("bob")
    for target, code in (
        ({"path": f"{HOME}/s.bin"}, "forbidden"),
        ({"upload_id": up.id}, "upload_not_found"),
    ):
        with pytest.raises(PaddleCloudError) as info:
            grant(bob, **target)
        assert info.value.code == code


def test_upload_refuses_a_descriptor_that_is_not_the_file(
    sock: PfsSocket, alice: Client, tmp_path: Path
) -> None:
    up = begin(alice, f"{HOME}/u.bin", SIZE)
    r, w = os.pipe()
    try:
        ans = redeem(grant(alice, upload_id=up.id), {"op": "upload", "chunks": [0]}, fds=[r])
    finally:
        os.close(r)
        os.close(w)
    assert ans[0]["error"]["code"] == "invalid_request" and "regular file" in ans[0]["error"]["message"]
    short = write(tmp_path / "short.bin", blob(CHUNK))
    with open(short, "rb") as f:
        ans = redeem(grant(alice, upload_id=up.id), {"op": "upload", "chunks": [0]}, fds=[f.fileno()])
    assert ans[0]["error"]["code"] == "invalid_request"
    with open(write(tmp_path / "ok.bin", blob(SIZE)), "ab") as f:  # write-only
        ans = redeem(grant(alice, upload_id=up.id), {"op": "upload", "chunks": [0]}, fds=[f.fileno()])
    assert ans[0]["error"]["code"] == "invalid_request" and ans[0]["status"] == 422
    with open(tmp_path / "ok.bin", "rb") as f:
        ans = redeem(grant(alice, upload_id=up.id), {"op": "upload", "chunks": [9]}, fds=[f.fileno()])
    assert ans[0]["error"]["code"] == "invalid_request"
    assert begin(alice, f"{HOME}/u.bin", SIZE).received == {}  # nothing was marked


def test_download_grant_does_not_follow_a_link_planted_after_it(
    sock: PfsSocket, alice: Client, platform: Platform, tmp_path: Path
) -> None:
    fs_of(alice).upload_file(write(tmp_path / "v.bin", blob(SIZE)), f"{HOME}/v.bin")
    g = grant(alice, path=f"{HOME}/v.bin")
    target = store_dir(platform) / "files/home/alice/v.bin"
    target.unlink()
    target.symlink_to("/etc/passwd")
    ans = redeem(g, {"op": "download"})
    assert "error" in ans[0] and "ok" not in ans[0]


def test_socket_refuses_extra_descriptors_and_garbage(sock: PfsSocket, alice: Client, tmp_path: Path) -> None:
    g = grant(alice, upload_id=begin(alice, f"{HOME}/w.bin", SIZE).id)
    f1 = os.open(write(tmp_path / "a", b"x"), os.O_RDONLY)
    f2 = os.open(tmp_path / "a", os.O_RDONLY)
    try:
        ans = redeem(g, {"op": "upload", "chunks": [0]}, fds=[f1, f2])
    finally:
        os.close(f1)
        os.close(f2)
    assert ans[0]["error"]["code"] == "invalid_request"
    with socket.socket(socket.AF_UNIX) as s:
        s.connect("\0" + g.address.removeprefix("@"))
        s.sendall(b"\xff\xff\xff\xffjunk")
        m, _ = recv_msg(s)
    assert m["error"]["code"] == "invalid_request"


def test_recorded_checksum_is_dropped_when_the_file_changes(
    sock: PfsSocket, alice: Client, platform: Platform, tmp_path: Path
) -> None:
    data = blob(SIZE, seed=5)
    fs_of(alice).upload_file(write(tmp_path / "c.bin", data), f"{HOME}/c.bin")
    got = alice.request("GET", "/pfs/checksum", params={"path": f"{HOME}/c.bin", "chunk_size": CHUNK}).json()
    assert got["checksum"] == whole(data)
    changed = bytearray(data)
    changed[5] ^= 1
    (store_dir(platform) / "files/home/alice/c.bin").write_bytes(bytes(changed))  # a job rewrites it
    got = alice.request("GET", "/pfs/checksum", params={"path": f"{HOME}/c.bin", "chunk_size": CHUNK}).json()
    assert got["checksum"] == whole(bytes(changed))


def test_many_chunks_go_in_batches_of_grants(
    sock: PfsSocket, alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import paddlecloud.client.pfs as client_pfs

    monkeypatch.setattr(client_pfs, "BATCH", 3)
    data = blob(SIZE, seed=7)
    fs = fs_of(alice)
    seen = requests_of(alice)
    stats = fs.upload_file(write(tmp_path / "m.bin", data), f"{HOME}/m.bin")
    assert stats.bytes_sent == SIZE
    assert seen.count(("POST", "/pfs/local")) == 2  # 4 chunks: 3 + 1
    out = tmp_path / "m.out"
    fs.download_file(f"{HOME}/m.bin", out)
    assert out.read_bytes() == data


def test_hash_read_survives_a_file_shrinking_and_says_so(tmp_path: Path) -> None:
    """The server's whole-file checksum reads with pread: a job truncating its owner's file while it
    is hashed gives an error, not SIGBUS (a shared mapping of a shrinking file kills the process)."""
    from paddlecloud.core.fileio import hash_range, hash_read

    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(3 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        assert hash_read(fd, 4096, 2 << 20, piece=1 << 16) == hash_range(fd, 4096, 2 << 20)
        os.truncate(f, 1 << 20)
        with pytest.raises(ValueError, match="file ends before"):
            hash_read(fd, 0, 2 << 20)
    finally:
        os.close(fd)


def test_a_file_the_caller_may_not_write_downloads_over_http(
    sock: PfsSocket, root: Client, alice: Client, tmp_path: Path
) -> None:
    """A descriptor handed over the socket can be reopened for writing (/proc/self/fd): a public file,
    readable but not writable by alice, gets no grant; the download still works, over HTTP."""
    data = blob(SIZE, seed=9)
    fs_of(root).mkdir(f"{PUBLIC}/d", parents=True)
    fs_of(root).upload_file(write(tmp_path / "pub.bin", data), f"{PUBLIC}/d/pub.bin")
    with pytest.raises(PaddleCloudError) as err:
        grant(alice, path=f"{PUBLIC}/d/pub.bin")
    assert err.value.code == "not_supported"
    out = tmp_path / "got.bin"
    fs_of(alice).download_file(f"{PUBLIC}/d/pub.bin", out)  # refused the socket: over HTTP
    assert out.read_bytes() == data
