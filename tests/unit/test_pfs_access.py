"""The file service's quota, the public area and other users' homes, in one process (SDK → app)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pfs_helpers import (  # noqa: F401 - the shared helpers
    CHECKSUM,
    CHUNK,
    DIGEST,
    HOME,
    PUBLIC,
    SIZE,
    ClientFor,
    MiB,
    begin,
    blob,
    chunks_of,
    download,
    error_of,
    fs_of,
    put_chunk,
    staged,
    store_dir,
    tree_of,
    whole,
    write,
)

from paddlecloud.api.errors import ErrorCode
from paddlecloud.client import Client
from paddlecloud.client.pfs import Pfs
from paddlecloud.controller import Platform
from paddlecloud.controller.services.quotas import set_storage_quota
from paddlecloud.core.checksum import chunk_digest

pytestmark = pytest.mark.timeout(60)


# -- quota ---------------------------------------------------------------------------------------

QUOTA = 3 * MiB


@pytest.fixture
def limited(platform_factory: Callable[..., Platform]) -> Platform:
    return platform_factory(storage_quota=QUOTA)


@pytest.fixture
def carol(limited: Platform, asgi: Callable[[Platform], httpx.Client]) -> Client:
    return Client(endpoint="http://testserver", token=limited.ensure_user("carol"), http=asgi(limited))


CAROL = "/pfs/local/home/carol"


def test_usage_and_limit(carol: Client, tmp_path: Path) -> None:
    fs = fs_of(carol)
    u = fs.usage()
    assert (u.user, u.used, u.reserved, u.limit) == ("carol", 0, 0, QUOTA)
    fs.upload_file(write(tmp_path / "f", blob(MiB)), "pfs:f")
    assert fs.usage().used == MiB
    fs.rm("pfs:f")
    assert fs.usage().used == 0


@pytest.mark.parametrize("size", [QUOTA + 1, 2 * QUOTA], ids=["just-over", "double"])
def test_upload_beyond_quota_fails_before_writing(
    carol: Client, limited: Platform, tmp_path: Path, size: int
) -> None:
    fs = fs_of(carol)
    sent: list[int] = []
    err = error_of(
        lambda: fs.upload_file(write(tmp_path / "big", blob(size)), "pfs:big", progress=sent.append)
    )
    assert err.code == ErrorCode.QUOTA_EXCEEDED
    assert sum(sent) == 0  # refused at begin: no chunk was sent
    u = fs.usage()
    assert (u.used, u.reserved) == (0, 0)
    assert staged(limited) == []
    assert fs.exists("pfs:big") is None


def test_small_put_beyond_quota_is_refused(carol: Client, limited: Platform, tmp_path: Path) -> None:
    fs = fs_of(carol)
    fs.chunk_size = 4 * MiB  # 3 MiB + 1 goes as one PUT
    fs.upload_file(write(tmp_path / "a", blob(2 * MiB)), "pfs:a")
    err = error_of(lambda: fs.upload_file(write(tmp_path / "b", blob(MiB + 1)), "pfs:b"))
    assert err.code == ErrorCode.QUOTA_EXCEEDED
    assert fs.usage().used == 2 * MiB
    assert staged(limited) == []
    assert fs.exists("pfs:b") is None
    fs.upload_file(write(tmp_path / "c", blob(MiB)), "pfs:c")  # exactly up to the limit is fine
    assert fs.usage().used == QUOTA


def test_reserved_bytes_of_an_upload_in_progress_count(carol: Client, tmp_path: Path) -> None:
    fs = fs_of(carol)
    fs.upload_file(write(tmp_path / "a", blob(MiB)), "pfs:a")
    up = begin(carol, f"{CAROL}/pending", 3 * MiB // 2)  # 1 MiB used + 1.5 MiB reserved
    put_chunk(carol, up, 0, blob(MiB))
    u = fs.usage()
    assert (u.used, u.reserved) == (MiB, 3 * MiB // 2)
    small = write(tmp_path / "s", blob(MiB))  # 1 + 1.5 + 1 > 3: refused only because of the reservation
    assert error_of(lambda: fs.upload_file(small, "pfs:s")).code == ErrorCode.QUOTA_EXCEEDED
    bigger = write(tmp_path / "b", blob(MiB + MiB // 2 + 1))
    assert error_of(lambda: fs.upload_file(bigger, "pfs:b")).code == ErrorCode.QUOTA_EXCEEDED
    # resuming the same upload does not count it twice
    assert begin(carol, f"{CAROL}/pending", 3 * MiB // 2).received == {0: chunk_digest(blob(MiB))}
    carol.request("DELETE", f"/pfs/uploads/{up.id}")
    assert fs.usage().reserved == 0
    fs.upload_file(small, "pfs:s")
    assert fs.usage().used == 2 * MiB


def test_per_user_quota_overrides_the_default(
    limited: Platform, carol: Client, asgi: Callable[[Platform], httpx.Client], tmp_path: Path
) -> None:
    admin = Client(
        endpoint="http://testserver", token=limited.ensure_user("boss", admin=True), http=asgi(limited)
    )
    dave = Client(endpoint="http://testserver", token=limited.ensure_user("dave"), http=asgi(limited))
    # only admins set quotas; a user cannot raise their own
    assert error_of(lambda: dave.set_storage_quota("dave", "1Ti")).code == ErrorCode.FORBIDDEN
    assert fs_of(dave).usage().limit == QUOTA
    admin.set_storage_quota("dave", "8Mi")
    assert fs_of(dave).usage().limit == 8 * MiB
    assert fs_of(carol).usage().limit == QUOTA
    fs_of(dave).upload_file(write(tmp_path / "big", blob(5 * MiB)), "pfs:big")
    assert fs_of(dave).usage().used == 5 * MiB
    admin.set_storage_quota("dave", None)  # back to the default: over it now, so new files are refused
    assert fs_of(dave).usage().limit == QUOTA
    err = error_of(lambda: fs_of(dave).upload_file(write(tmp_path / "one", b"1"), "pfs:one"))
    assert err.code == ErrorCode.QUOTA_EXCEEDED
    assert error_of(lambda: admin.set_storage_quota("nobody", "1Gi")).code == ErrorCode.USER_NOT_FOUND
    assert error_of(lambda: admin.set_storage_quota("dave", "lots")).code == ErrorCode.INVALID_SPEC
    with limited.ctx.session() as s:  # the controller call the route uses
        set_storage_quota(s, "dave", 16 * MiB)
    assert fs_of(dave).usage().limit == 16 * MiB


def test_unlimited_quota(platform_factory: Callable[..., Platform], asgi: Callable[..., Any]) -> None:
    p = platform_factory(storage_quota=None)
    c = Client(endpoint="http://testserver", token=p.ensure_user("erin"), http=asgi(p))
    assert fs_of(c).usage().limit is None
    # staged files are allocated whole on disk: keep it small
    begin(c, "/pfs/local/home/erin/big", 64 * MiB)
    assert fs_of(c).usage().reserved == 64 * MiB


# -- public area ---------------------------------------------------------------------------------


@pytest.fixture
def published(root: Client, tmp_path: Path) -> Pfs:
    fs = fs_of(root)
    fs.mkdir(f"{PUBLIC}/mnist", parents=True)
    fs.upload_file(write(tmp_path / "pub" / "train.csv", b"1,2\n"), f"{PUBLIC}/mnist/train.csv")
    fs.upload_file(write(tmp_path / "pub" / "big.bin", blob(2 * CHUNK + 1)), f"{PUBLIC}/mnist/big.bin")
    return fs


def test_users_read_public(published: Pfs, alice: Client, bob: Client, tmp_path: Path) -> None:
    for who in (alice, bob):
        fs = fs_of(who)
        assert [f.path for f in fs.ls(PUBLIC, recursive=True)] == [
            f"{PUBLIC}/mnist",
            f"{PUBLIC}/mnist/big.bin",
            f"{PUBLIC}/mnist/train.csv",
        ]
        assert fs.stat(f"{PUBLIC}/mnist/train.csv").size == 4
        out = tmp_path / f"copy-{who.whoami().name}"
        fs.cp([f"{PUBLIC}/mnist"], str(out), recursive=True)
        assert (out / "train.csv").read_bytes() == b"1,2\n"
        assert (out / "big.bin").read_bytes() == blob(2 * CHUNK + 1)


def test_users_cannot_write_public(published: Pfs, alice: Client, tmp_path: Path, platform: Platform) -> None:
    fs = fs_of(alice)
    small = write(tmp_path / "s.txt", b"mine")
    big = write(tmp_path / "b.bin", blob(2 * CHUNK))
    attempts: dict[str, Callable[[], object]] = {
        "cp small": lambda: fs.cp([str(small)], f"{PUBLIC}/s.txt"),
        "cp big": lambda: fs.cp([str(big)], f"{PUBLIC}/b.bin"),
        "cp over": lambda: fs.cp([str(small)], f"{PUBLIC}/mnist/train.csv", overwrite=True),
        "mkdir": lambda: fs.mkdir(f"{PUBLIC}/mine"),
        "rm": lambda: fs.rm(f"{PUBLIC}/mnist/train.csv"),
        "rm -r": lambda: fs.rm(f"{PUBLIC}/mnist", recursive=True),
        "mv": lambda: fs.mv(f"{PUBLIC}/mnist/train.csv", f"{PUBLIC}/t.csv"),
        "mv out": lambda: fs.mv(f"{PUBLIC}/mnist/train.csv", "pfs:t.csv"),
    }
    for what, call in attempts.items():
        err = error_of(call)
        assert err.code == ErrorCode.FORBIDDEN, what
    assert [f.path for f in fs.ls(PUBLIC, recursive=True)] == [
        f"{PUBLIC}/mnist",
        f"{PUBLIC}/mnist/big.bin",
        f"{PUBLIC}/mnist/train.csv",
    ]
    assert download(alice, f"{PUBLIC}/mnist/train.csv") == b"1,2\n"
    assert staged(platform) == []


def test_admin_writes_public_and_any_home(
    published: Pfs, root: Client, alice: Client, tmp_path: Path
) -> None:
    published.mv(f"{PUBLIC}/mnist/train.csv", f"{PUBLIC}/train.csv")
    published.rm(f"{PUBLIC}/mnist", recursive=True)
    assert [f.path for f in published.ls(PUBLIC)] == [f"{PUBLIC}/train.csv"]
    published.upload_file(write(tmp_path / "gift", b"for alice"), f"{HOME}/gift")
    assert download(alice, f"{HOME}/gift") == b"for alice"


def test_users_cannot_touch_other_homes(alice: Client, bob: Client, tmp_path: Path) -> None:
    fs_of(alice).upload_file(write(tmp_path / "secret", b"alice only"), "pfs:secret")
    fb = fs_of(bob)
    for call in (
        lambda: fb.stat(f"{HOME}/secret"),
        lambda: fb.ls(HOME),
        lambda: download(bob, f"{HOME}/secret"),
        lambda: fb.cp([f"{HOME}/secret"], str(tmp_path / "stolen")),
        lambda: fb.cp([str(tmp_path / "secret")], f"{HOME}/planted"),
        lambda: fb.rm(f"{HOME}/secret"),
        lambda: fb.mkdir(f"{HOME}/x"),
    ):
        assert error_of(call).code == ErrorCode.FORBIDDEN
    assert not (tmp_path / "stolen").exists()
    assert [f.path for f in fs_of(alice).ls()] == [f"{HOME}/secret"]


# -- parameter validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"size": 0}, "size"),
        ({"size": -1}, "size"),
        ({"size": 1 << 45}, "size"),
        ({"chunk_size": MiB - 1}, "chunk_size"),
        ({"chunk_size": (64 << 20) + 1}, "chunk_size"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_begin_upload_validation(alice: Client, body: dict[str, Any], field: str) -> None:
    full = {"path": f"{HOME}/x", "size": 10, **body}
    err = error_of(lambda: alice.request("POST", "/pfs/uploads", json=full))
    assert err.code == ErrorCode.INVALID_REQUEST and err.field == field


@pytest.mark.parametrize("chunk_size", [0, -1])
def test_checksum_chunk_size_is_validated(alice: Client, tmp_path: Path, chunk_size: int) -> None:
    fs_of(alice).upload_file(write(tmp_path / "empty", b""), "pfs:empty")
    err = error_of(
        lambda: alice.request(
            "GET", "/pfs/checksum", params={"path": f"{HOME}/empty", "chunk_size": chunk_size}
        )
    )
    assert err.code == ErrorCode.INVALID_REQUEST


def test_checksum_matches_the_client_hasher(alice: Client, tmp_path: Path) -> None:
    data = blob(SIZE, 14)
    fs_of(alice).upload_file(write(tmp_path / "f", data), "pfs:f")
    for cs in (CHUNK, 2 * CHUNK, 8 * CHUNK):
        got = alice.request("GET", "/pfs/checksum", params={"path": f"{HOME}/f", "chunk_size": cs}).json()
        assert got == {"path": f"{HOME}/f", "size": SIZE, "checksum": whole(data, cs)}
    assert (
        error_of(lambda: alice.request("GET", "/pfs/checksum", params={"path": f"{HOME}/nope"})).code
        == ErrorCode.PATH_NOT_FOUND
    )
