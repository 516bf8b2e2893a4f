"""The file service end to end in one process: SDK (``client.pfs``) → ASGI app → FileService →
LocalDirStore. Copies both ways (small, multi-chunk, trees), resumable and verified uploads and
downloads, listings, moves, removal, quota and the public area."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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

from paddlecloud.api.errors import ErrorCode, PaddleCloudError
from paddlecloud.client import Client
from paddlecloud.client.pfs import Pfs
from paddlecloud.client.session import Session
from paddlecloud.controller import Platform
from paddlecloud.core.checksum import chunk_digest, file_checksum

pytestmark = pytest.mark.timeout(60)


# -- copies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size",
    [0, 1, 1000, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + CHUNK // 2],
    ids=["empty", "1B", "1000B", "chunk-1", "chunk", "chunk+1", "3.5MiB"],
)
def test_cp_file_up_and_down(alice: Client, platform: Platform, tmp_path: Path, size: int) -> None:
    data = blob(size)
    src = write(tmp_path / "src.bin", data)
    fs = fs_of(alice)
    up = fs.cp([str(src)], "pfs:file.bin")
    assert (up.files, up.bytes_sent, up.bytes_skipped) == (1, size, 0)
    info = fs.stat("pfs:file.bin")
    assert (info.path, info.type, info.size) == (f"{HOME}/file.bin", "file", size)
    # the server's stored bytes and checksum are the file's
    assert download(alice, f"{HOME}/file.bin") == data
    assert (store_dir(platform) / "files/home/alice/file.bin").read_bytes() == data
    theirs = alice.request("GET", "/pfs/checksum", params={"path": f"{HOME}/file.bin", "chunk_size": CHUNK})
    assert theirs.json()["checksum"] == whole(data)
    assert staged(platform) == []

    down = fs.cp(["pfs:file.bin"], str(tmp_path / "back.bin"))
    assert (down.files, down.bytes_sent, down.bytes_skipped) == (1, size, 0)
    assert (tmp_path / "back.bin").read_bytes() == data
    assert [p.name for p in tmp_path.iterdir() if ".pfspart" in p.name] == []  # no partial or journal


def test_cp_into_existing_remote_and_local_dirs(alice: Client, tmp_path: Path) -> None:
    src = write(tmp_path / "in" / "a.txt", b"hello")
    fs = fs_of(alice)
    fs.mkdir("pfs:dir")
    fs.cp([str(src)], "pfs:dir")  # into the directory, under the source's name
    assert fs.stat("pfs:dir/a.txt").size == 5
    out = tmp_path / "out"
    out.mkdir()
    fs.cp(["pfs:dir/a.txt"], str(out))
    assert (out / "a.txt").read_bytes() == b"hello"


def requests_of(client: Client) -> list[str]:
    """Every API call ``client`` makes from now on, as ``METHOD /path`` (below /api/v1)."""
    seen: list[str] = []
    http = client._session.http
    http.event_hooks["request"] = [lambda r: seen.append(f"{r.method} {r.url.path.removeprefix('/api/v1')}")]
    return seen


@pytest.mark.parametrize("size", [1000, 2 * CHUNK + 5], ids=["one-PUT", "chunked"])
def test_cp_asks_for_home_and_each_stat_once(alice: Client, tmp_path: Path, size: int) -> None:
    """Before the data moves: one ``GET /pfs/home`` (not /version + /whoami) and one stat of the
    destination (an upload into a home or a directory just found stats no parent); a download
    stats its source once, in the plan."""
    src = write(tmp_path / "src.bin", blob(size))
    fs_of(alice).mkdir("pfs:dir")
    seen = requests_of(alice)
    fs = fs_of(alice)  # a new one: it asks for the home again
    fs.cp([str(src)], "pfs:up.bin")
    fs.cp([str(src)], "pfs:dir")  # into an existing directory
    fs.cp(["pfs:up.bin"], str(tmp_path / "down.bin"))
    control = [r for r in seen if r.startswith("GET") and not r.startswith("GET /pfs/file")]
    assert control == [
        "GET /pfs/home",
        "GET /pfs/stat",
        "GET /pfs/stat",
        "GET /pfs/stat",
        "GET /pfs/checksum",
    ]
    assert fs.stat("pfs:dir/src.bin").size == size
    assert (tmp_path / "down.bin").read_bytes() == blob(size)


def test_cp_into_a_new_directory_stats_its_parent_once(alice: Client, tmp_path: Path) -> None:
    srcs = [str(write(tmp_path / n, blob(100, i))) for i, n in enumerate(("a", "b", "c"))]
    fs = fs_of(alice)
    seen = requests_of(alice)
    fs.cp(srcs, "pfs:new/sub/")  # a missing directory: made once, not stat'ed per file
    assert seen.count("GET /pfs/stat") == 1  # "new/sub/" is a directory: stat'ed (missing) and made once
    assert seen.count("POST /pfs/mkdir") == 1
    assert sorted(f.path.rsplit("/", 1)[1] for f in fs.ls("pfs:new/sub")) == ["a", "b", "c"]


class _WithoutPfsHome(httpx.BaseTransport):
    """A server from before ``GET /pfs/home``: that route is unknown (404, ``invalid_request``)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/pfs/home"):
            return httpx.Response(404, json={"error": {"code": "invalid_request", "message": "Not Found"}})
        return self.inner.handle_request(request)


def test_home_from_a_server_without_pfs_home(alice: Client) -> None:
    http = alice._session.http
    http._transport = _WithoutPfsHome(http._transport)
    seen = requests_of(alice)
    fs = fs_of(alice)
    assert fs.home() == HOME
    assert fs.full("pfs:x/y") == f"{HOME}/x/y"
    assert seen == ["GET /pfs/home", "GET /version", "GET /whoami"]  # asked once, then remembered


def test_cp_refuses_to_clobber_without_force(alice: Client, tmp_path: Path) -> None:
    fs = fs_of(alice)
    for size in (10, 2 * CHUNK + 5):  # the one-PUT path and the chunked path
        a = write(tmp_path / f"a{size}", blob(size, 1))
        b = write(tmp_path / f"b{size}", blob(size, 2))
        fs.cp([str(a)], f"pfs:f{size}")
        assert error_of(lambda b=b, size=size: fs.cp([str(b)], f"pfs:f{size}")).code == ErrorCode.PATH_EXISTS
        assert download(alice, f"{HOME}/f{size}") == a.read_bytes()
        fs.cp([str(b)], f"pfs:f{size}", overwrite=True)
        assert download(alice, f"{HOME}/f{size}") == b.read_bytes()
        # and locally
        assert error_of(lambda a=a, size=size: fs.cp([f"pfs:f{size}"], str(a))).code == ErrorCode.PATH_EXISTS
        assert a.read_bytes() == blob(size, 1)


TREE = {
    "top.txt": b"top",
    "empty.bin": b"",
    "a/one.csv": b"1,2,3\n",
    "a/b/two.csv": b"4,5\n",
    "a/b/c/deep.bin": blob(2 * CHUNK + 123, 7),  # multi-chunk inside a tree
    "z/last": blob(5000, 8),
}


def make_tree(root: Path) -> Path:
    for rel, data in TREE.items():
        write(root / rel, data)
    (root / "emptydir").mkdir()
    return root


def test_cp_r_tree_both_ways(alice: Client, platform: Platform, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "proj")
    fs = fs_of(alice)
    stats = fs.cp([str(src)], "pfs:proj", recursive=True)
    assert stats.files == len(TREE)
    assert stats.bytes_sent == sum(map(len, TREE.values()))
    remote = {f.path.removeprefix(f"{HOME}/proj/"): f for f in fs.ls("pfs:proj", recursive=True)}
    assert set(remote) == set(TREE) | {"a", "a/b", "a/b/c", "z", "emptydir"}
    for rel, data in TREE.items():
        assert remote[rel].type == "file" and remote[rel].size == len(data)
        assert download(alice, f"{HOME}/proj/{rel}") == data
    assert remote["emptydir"].type == "dir"

    back = tmp_path / "back"
    stats = fs.cp(["pfs:proj"], str(back), recursive=True)
    assert stats.files == len(TREE)
    assert tree_of(back) == tree_of(src)
    assert staged(platform) == []
    # no partial files or journals left behind
    assert not [p for p in back.rglob("*") if ".pfspart" in p.name]


def test_cp_r_into_existing_remote_dir_nests(alice: Client, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "proj")
    fs = fs_of(alice)
    fs.mkdir("pfs:dest")
    fs.cp([str(src)], "pfs:dest", recursive=True)
    assert fs.stat("pfs:dest/proj/a/b/two.csv").size == len(TREE["a/b/two.csv"])


def test_cp_dir_without_r_is_refused_both_ways(alice: Client, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "proj")
    fs = fs_of(alice)
    assert error_of(lambda: fs.cp([str(src)], "pfs:proj")).code == ErrorCode.IS_A_DIRECTORY
    assert fs.exists("pfs:proj") is None
    fs.mkdir("pfs:rdir")
    assert error_of(lambda: fs.cp(["pfs:rdir"], str(tmp_path / "x"))).code == ErrorCode.IS_A_DIRECTORY
    assert not (tmp_path / "x").exists()


def test_cp_needs_one_remote_side(alice: Client, tmp_path: Path) -> None:
    fs = fs_of(alice)
    assert "copy between a local path and a PFS path" in str(
        error_of(lambda: fs.cp([str(tmp_path)], str(tmp_path / "x")))
    )
    assert "copy between a local path and a PFS path" in str(error_of(lambda: fs.cp(["pfs:a"], "pfs:b")))


# -- resumable, verified uploads -----------------------------------------------------------------


def test_upload_resumes_sending_only_missing_chunks(
    alice: Client, platform: Platform, tmp_path: Path
) -> None:
    data = blob(SIZE, 3)
    src = write(tmp_path / "big.bin", data)
    parts = chunks_of(data)
    up = begin(alice, f"{HOME}/big.bin", SIZE)
    assert (up.chunks, up.received) == (4, {})
    put_chunk(alice, up, 0, parts[0])
    put_chunk(alice, up, 3, parts[3])

    again = begin(alice, f"{HOME}/big.bin", SIZE)  # same user, path, size, chunk size: same upload
    assert again.id == up.id
    assert again.received == {0: chunk_digest(parts[0]), 3: chunk_digest(parts[3])}

    stats = fs_of(alice).upload_file(src, "pfs:big.bin")
    assert stats.bytes_skipped == len(parts[0]) + len(parts[3])
    assert stats.bytes_sent == len(parts[1]) + len(parts[2])
    assert download(alice, f"{HOME}/big.bin") == data
    assert staged(platform) == []


def test_different_size_or_chunk_size_is_a_different_upload(alice: Client) -> None:
    a = begin(alice, f"{HOME}/x", SIZE)
    assert begin(alice, f"{HOME}/x", SIZE + 1).id != a.id
    assert begin(alice, f"{HOME}/x", SIZE, chunk_size=2 * CHUNK).id != a.id
    assert begin(alice, f"{HOME}/y", SIZE).id != a.id


def test_damaged_chunk_is_refused_and_not_marked(alice: Client, tmp_path: Path) -> None:
    data = blob(SIZE, 4)
    parts = chunks_of(data)
    up = begin(alice, f"{HOME}/big.bin", SIZE)
    err = error_of(lambda: put_chunk(alice, up, 1, parts[1], digest=chunk_digest(b"something else")))
    assert err.code == ErrorCode.CHECKSUM_MISMATCH
    # flipped bit in transit: same header, different bytes
    bad = bytes([parts[2][0] ^ 1]) + parts[2][1:]
    err = error_of(lambda: put_chunk(alice, up, 2, bad, digest=chunk_digest(parts[2])))
    assert err.code == ErrorCode.CHECKSUM_MISMATCH
    assert begin(alice, f"{HOME}/big.bin", SIZE).received == {}
    # completing now is refused: chunks are missing
    err = error_of(
        lambda: alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    )
    assert err.code == ErrorCode.INVALID_REQUEST and "missing" in str(err)
    # a later full copy sends those chunks again and the file is right
    stats = fs_of(alice).upload_file(write(tmp_path / "big.bin", data), "pfs:big.bin")
    assert stats.bytes_sent == SIZE
    assert download(alice, f"{HOME}/big.bin") == data


@pytest.mark.parametrize(
    ("index", "body", "digest", "code"),
    [
        (4, b"x", None, ErrorCode.INVALID_REQUEST),  # index out of range
        (-1, b"x", None, ErrorCode.INVALID_REQUEST),
        (0, b"x" * 10, "", ErrorCode.INVALID_REQUEST),  # no digest header
        (0, b"x" * 10, "abc", ErrorCode.INVALID_REQUEST),  # malformed digest
        (0, b"x" * 10, None, ErrorCode.INVALID_REQUEST),  # short chunk
        (3, b"x" * (CHUNK // 2 + 1), None, ErrorCode.INVALID_REQUEST),  # last chunk too long
        (0, b"x" * (CHUNK + 1), None, ErrorCode.INVALID_REQUEST),  # chunk too long
    ],
)
def test_bad_chunks(alice: Client, index: int, body: bytes, digest: str | None, code: ErrorCode) -> None:
    up = begin(alice, f"{HOME}/big.bin", SIZE)
    d = chunk_digest(body) if digest is None else digest
    err = error_of(
        lambda: alice.request("PUT", f"/pfs/uploads/{up.id}/{index}", content=body, headers={DIGEST: d})
    )
    assert err.code == code
    assert begin(alice, f"{HOME}/big.bin", SIZE).received == {}


def test_wrong_whole_file_checksum_discards_the_upload(alice: Client, platform: Platform) -> None:
    data = blob(SIZE, 5)
    up = begin(alice, f"{HOME}/big.bin", SIZE)
    for i, part in enumerate(chunks_of(data)):
        put_chunk(alice, up, i, part)
    wrong = file_checksum(CHUNK, [chunk_digest(p) for p in reversed(chunks_of(data))])
    err = error_of(lambda: alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": wrong}))
    assert err.code == ErrorCode.CHECKSUM_MISMATCH
    assert fs_of(alice).exists("pfs:big.bin") is None
    assert staged(platform) == []  # discarded
    err = error_of(
        lambda: alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    )
    assert err.code == ErrorCode.UPLOAD_NOT_FOUND


def test_partial_upload_is_never_visible(alice: Client, platform: Platform) -> None:
    data = blob(SIZE, 6)
    fs = fs_of(alice)
    fs.mkdir("pfs:d")
    up = begin(alice, f"{HOME}/d/big.bin", SIZE)
    for i, part in enumerate(chunks_of(data)):
        put_chunk(alice, up, i, part)
        assert fs.ls("pfs:d") == []
        assert [f.path for f in fs.ls(recursive=True)] == [f"{HOME}/d"]
        assert fs.exists("pfs:d/big.bin") is None
        assert error_of(lambda: download(alice, f"{HOME}/d/big.bin")).code == ErrorCode.PATH_NOT_FOUND
    alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    assert [f.path for f in fs.ls("pfs:d")] == [f"{HOME}/d/big.bin"]


def test_abort_upload(alice: Client, platform: Platform) -> None:
    up = begin(alice, f"{HOME}/big.bin", SIZE)
    put_chunk(alice, up, 0, blob(CHUNK))
    assert fs_of(alice).usage().reserved == SIZE
    alice.request("DELETE", f"/pfs/uploads/{up.id}")
    assert staged(platform) == []
    assert fs_of(alice).usage().reserved == 0
    err = error_of(lambda: alice.request("DELETE", f"/pfs/uploads/{up.id}"))
    assert err.code == ErrorCode.UPLOAD_NOT_FOUND


def test_small_put_checksum_is_verified(alice: Client, platform: Platform) -> None:
    data = b"small file"
    params = {"path": f"{HOME}/s.txt"}
    for bad in ("", "blake3c:1:" + "0" * 64, whole(data, CHUNK), whole(b"other file", len(data))):
        err = error_of(
            lambda bad=bad: alice.request(
                "PUT", "/pfs/file", params=params, content=data, headers={CHECKSUM: bad}
            )
        )
        assert err.code == ErrorCode.CHECKSUM_MISMATCH
        assert fs_of(alice).exists("pfs:s.txt") is None
    alice.request("PUT", "/pfs/file", params=params, content=data, headers={CHECKSUM: whole(data, len(data))})
    assert download(alice, f"{HOME}/s.txt") == data
    assert staged(platform) == []


def test_damaged_resend_of_a_verified_chunk_does_not_corrupt_the_file(alice: Client) -> None:
    data = blob(2 * CHUNK, 9)
    parts = chunks_of(data)
    up = begin(alice, f"{HOME}/big.bin", len(data))
    put_chunk(alice, up, 0, parts[0])  # verified and marked
    # the same chunk again (a retry whose first answer was lost), damaged on the way
    garbage = b"\0" * CHUNK
    err = error_of(lambda: put_chunk(alice, up, 0, garbage, digest=chunk_digest(parts[0])))
    assert err.code == ErrorCode.CHECKSUM_MISMATCH
    put_chunk(alice, up, 1, parts[1])
    try:
        alice.request("POST", f"/pfs/uploads/{up.id}/complete", json={"checksum": whole(data)})
    except PaddleCloudError:
        return  # refusing to commit is also correct
    assert download(alice, f"{HOME}/big.bin") == data


def test_upload_into_a_missing_directory_fails_before_sending(alice: Client, tmp_path: Path) -> None:
    src = write(tmp_path / "big.bin", blob(SIZE))
    fs = fs_of(alice)
    sent: list[int] = []
    err = error_of(lambda: fs.upload_file(src, "pfs:no/such/dir/big.bin", progress=sent.append))
    assert err.code == ErrorCode.PATH_NOT_FOUND
    assert fs.usage().reserved == 0
    assert sum(sent) == 0


# -- resumable downloads -------------------------------------------------------------------------


class Interrupted(Exception):
    pass


def test_download_resumes_from_the_journal(
    alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = blob(SIZE, 10)
    fs = fs_of(alice, parallel=1)  # one chunk at a time: the interruption point is exact
    fs.upload_file(write(tmp_path / "src.bin", data), "pfs:big.bin")

    real = Pfs._fetch_chunk
    calls: list[int] = []

    def failing(self: Pfs, remote: str, fd: int, off: int, n: int, progress: Any) -> str:
        if len(calls) == 2:
            raise Interrupted("connection lost")
        calls.append(off)
        return real(self, remote, fd, off, n, progress)

    monkeypatch.setattr(Pfs, "_fetch_chunk", failing)
    dest = tmp_path / "out" / "big.bin"
    dest.parent.mkdir()
    with pytest.raises(Interrupted):
        fs.download_file("pfs:big.bin", dest)
    assert not dest.exists()  # only the partial file
    part = dest.with_name("big.bin.pfspart")
    journal = dest.with_name("big.bin.pfspart.json")
    assert part.exists() and journal.exists()
    assert part.read_bytes()[: 2 * CHUNK] == data[: 2 * CHUNK]
    monkeypatch.setattr(Pfs, "_fetch_chunk", real)

    fetched: list[int] = []
    real_stream = Session.stream_bytes

    def counting(self: Session, path: str, **kw: Any) -> Iterator[bytes]:
        for piece in real_stream(self, path, **kw):
            fetched.append(len(piece))
            yield piece

    monkeypatch.setattr(Session, "stream_bytes", counting)
    stats = fs_of(alice, parallel=1).download_file("pfs:big.bin", dest)
    assert stats.bytes_skipped == 2 * CHUNK
    assert stats.bytes_sent == SIZE - 2 * CHUNK
    assert sum(fetched) == SIZE - 2 * CHUNK  # what actually crossed the wire
    assert dest.read_bytes() == data
    assert not part.exists() and not journal.exists()


def test_download_with_a_stale_journal_starts_over(alice: Client, tmp_path: Path) -> None:
    data = blob(SIZE, 11)
    fs = fs_of(alice)
    fs.upload_file(write(tmp_path / "src.bin", data), "pfs:big.bin")
    dest = tmp_path / "big.bin"
    dest.with_name("big.bin.pfspart").write_bytes(b"junk" * 100)
    dest.with_name("big.bin.pfspart.json").write_text(
        '{"size": 12, "chunk_size": 1048576}\n{"i": 0, "d": "x"}\n'
    )
    stats = fs.download_file("pfs:big.bin", dest)
    assert (stats.bytes_sent, stats.bytes_skipped) == (SIZE, 0)
    assert dest.read_bytes() == data


def test_download_with_a_lying_journal_fails_verification(alice: Client, tmp_path: Path) -> None:
    """A journal that claims a chunk whose bytes are wrong is caught by the whole-file checksum."""
    data = blob(SIZE, 12)
    fs = fs_of(alice)
    fs.upload_file(write(tmp_path / "src.bin", data), "pfs:big.bin")
    dest = tmp_path / "big.bin"
    dest.with_name("big.bin.pfspart").write_bytes(b"\0" * SIZE)
    dest.with_name("big.bin.pfspart.json").write_text(
        f'{{"size": {SIZE}, "chunk_size": {CHUNK}}}\n{{"i": 0, "d": "{chunk_digest(b"nope")}"}}\n'
    )
    assert error_of(lambda: fs.download_file("pfs:big.bin", dest)).code == ErrorCode.CHECKSUM_MISMATCH
    assert not dest.exists()
    assert not dest.with_name("big.bin.pfspart").exists()
    fs.download_file("pfs:big.bin", dest)  # and the next try starts clean
    assert dest.read_bytes() == data


def test_download_ranges(alice: Client, tmp_path: Path) -> None:
    data = blob(5000, 13)
    fs_of(alice).upload_file(write(tmp_path / "f", data), "pfs:f")
    for offset, length, want in [
        (0, None, data),
        (100, 50, data[100:150]),
        (4990, 100, data[4990:]),
        (5000, None, b""),
        (9999, 10, b""),
        (0, 0, b""),
    ]:
        params: dict[str, Any] = {"path": f"{HOME}/f", "offset": offset}
        if length is not None:
            params["length"] = length
        assert b"".join(alice.stream_bytes("/pfs/file", params=params)) == want, (offset, length)
    r = alice.request("GET", "/pfs/file", params={"path": f"{HOME}/f", "offset": 10})
    assert r.headers["X-PaddleCloud-Size"] == "5000"
    err = error_of(lambda: alice.request("GET", "/pfs/file", params={"path": f"{HOME}/f", "offset": -1}))
    assert err.code == ErrorCode.INVALID_REQUEST


# -- namespace -----------------------------------------------------------------------------------


@pytest.fixture
def files(alice: Client, tmp_path: Path) -> Pfs:
    fs = fs_of(alice)
    fs.mkdir("pfs:data/sub", parents=True)
    for rel, data in {
        "data/a.csv": b"a",
        "data/b.csv": b"bb",
        "data/c.txt": b"ccc",
        "data/sub/d.csv": b"dddd",
        "top.csv": b"t",
    }.items():
        fs.upload_file(write(tmp_path / "src" / rel, data), f"pfs:{rel}")
    return fs


@pytest.mark.parametrize(
    ("path", "recursive", "want"),
    [
        ("pfs:data/*.csv", False, ["data/a.csv", "data/b.csv"]),
        ("pfs:data/?.txt", False, ["data/c.txt"]),
        ("pfs:data/[ab].csv", False, ["data/a.csv", "data/b.csv"]),
        ("pfs:data/*.none", False, []),
        ("pfs:*.csv", False, ["top.csv"]),
        ("pfs:data/*.csv", True, ["data/a.csv", "data/b.csv", "data/sub/d.csv"]),
        ("pfs:data", False, ["data/a.csv", "data/b.csv", "data/c.txt", "data/sub"]),
        ("pfs:data/", False, ["data/a.csv", "data/b.csv", "data/c.txt", "data/sub"]),
        ("pfs:data", True, ["data/a.csv", "data/b.csv", "data/c.txt", "data/sub", "data/sub/d.csv"]),
        ("pfs:data/a.csv", False, ["data/a.csv"]),  # a file lists itself
        (None, False, ["data", "top.csv"]),  # no path: the home
        ("pfs:", False, ["data", "top.csv"]),
    ],
)
def test_ls(files: Pfs, path: str | None, recursive: bool, want: list[str]) -> None:
    got = [f.path.removeprefix(HOME + "/") for f in files.ls(path, recursive=recursive)]
    assert got == want


def test_ls_errors(files: Pfs) -> None:
    assert error_of(lambda: files.ls("pfs:nope")).code == ErrorCode.PATH_NOT_FOUND
    assert error_of(lambda: files.ls("pfs:nope/*.csv")).code == ErrorCode.PATH_NOT_FOUND
    assert error_of(lambda: files.ls("pfs:data/a.csv/*")).code == ErrorCode.NOT_A_DIRECTORY
    # a glob cannot widen the scope to other homes
    assert error_of(lambda: files.ls("/pfs/local/home/*")).code == ErrorCode.INVALID_PATH
    assert error_of(lambda: files.ls("/pfs/local/home/al*")).code == ErrorCode.INVALID_PATH


def test_ls_of_a_new_users_home_is_empty(alice: Client) -> None:
    assert fs_of(alice).ls() == []


def test_stat(files: Pfs) -> None:
    f = files.stat("pfs:data/b.csv")
    assert (f.path, f.type, f.size) == (f"{HOME}/data/b.csv", "file", 2)
    d = files.stat("pfs:data/sub")
    assert (d.path, d.type, d.size) == (f"{HOME}/data/sub", "dir", 0)
    h = files.stat("pfs:")
    assert (h.path, h.type) == (HOME, "dir")
    assert error_of(lambda: files.stat("pfs:data/zzz")).code == ErrorCode.PATH_NOT_FOUND


@pytest.mark.parametrize(
    ("path", "parents", "code"),
    [
        ("pfs:data", False, ErrorCode.PATH_EXISTS),
        ("pfs:data/a.csv", True, ErrorCode.PATH_EXISTS),
        ("pfs:x/y", False, ErrorCode.PATH_NOT_FOUND),
        ("pfs:", True, ErrorCode.INVALID_PATH),
    ],
)
def test_mkdir_errors(files: Pfs, path: str, parents: bool, code: ErrorCode) -> None:
    assert error_of(lambda: files.mkdir(path, parents=parents)).code == code


def test_mkdir_p_is_idempotent(files: Pfs) -> None:
    files.mkdir("pfs:n/e/s/t", parents=True)
    files.mkdir("pfs:n/e/s/t", parents=True)
    assert files.stat("pfs:n/e/s/t").type == "dir"


def test_rm(files: Pfs) -> None:
    files.rm("pfs:data/a.csv")
    assert files.exists("pfs:data/a.csv") is None
    assert error_of(lambda: files.rm("pfs:data")).code == ErrorCode.IS_A_DIRECTORY
    assert files.stat("pfs:data/sub/d.csv").size == 4  # nothing removed
    files.mkdir("pfs:empty")
    assert error_of(lambda: files.rm("pfs:empty")).code == ErrorCode.IS_A_DIRECTORY
    files.rm("pfs:data", recursive=True)
    assert files.exists("pfs:data") is None
    assert error_of(lambda: files.rm("pfs:data", recursive=True)).code == ErrorCode.PATH_NOT_FOUND
    assert error_of(lambda: files.rm("pfs:", recursive=True)).code == ErrorCode.INVALID_PATH
    assert [f.path for f in files.ls()] == [f"{HOME}/empty", f"{HOME}/top.csv"]


def test_mv_within_home(files: Pfs, alice: Client) -> None:
    files.mv("pfs:top.csv", "pfs:renamed.csv")  # rename
    assert files.exists("pfs:top.csv") is None
    assert download(alice, f"{HOME}/renamed.csv") == b"t"
    moved = files.mv("pfs:renamed.csv", "pfs:data/sub")  # into an existing directory
    assert moved.path == f"{HOME}/data/sub/renamed.csv"
    files.mv("pfs:data/sub", "pfs:sub2")  # a directory
    assert sorted(f.path for f in files.ls("pfs:sub2")) == [f"{HOME}/sub2/d.csv", f"{HOME}/sub2/renamed.csv"]


@pytest.mark.parametrize(
    ("src", "dst", "code"),
    [
        ("pfs:nope", "pfs:x", ErrorCode.PATH_NOT_FOUND),
        ("pfs:top.csv", "pfs:data/a.csv", ErrorCode.PATH_EXISTS),  # never clobbers
        ("pfs:top.csv", "pfs:no/dir/x", ErrorCode.PATH_NOT_FOUND),
        ("pfs:data", "pfs:data/sub", ErrorCode.INVALID_PATH),  # into itself
        ("pfs:data", "pfs:data", ErrorCode.INVALID_PATH),
        ("pfs:", "pfs:x", ErrorCode.INVALID_PATH),
        ("pfs:top.csv", "pfs:", ErrorCode.INVALID_PATH),
        ("pfs:top.csv", f"{PUBLIC}/top.csv", ErrorCode.FORBIDDEN),  # a user cannot write public
        ("pfs:top.csv", "/pfs/local/home/bob/top.csv", ErrorCode.FORBIDDEN),
    ],
)
def test_mv_errors(files: Pfs, alice: Client, src: str, dst: str, code: ErrorCode) -> None:
    assert error_of(lambda: files.mv(src, dst)).code == code
    assert download(alice, f"{HOME}/top.csv") == b"t"
    assert download(alice, f"{HOME}/data/a.csv") == b"a"


def test_admin_mv_across_spaces_is_refused(root: Client, alice: Client, tmp_path: Path) -> None:
    fs = fs_of(alice)
    fs.upload_file(write(tmp_path / "f", b"alice's"), "pfs:f")
    err = error_of(lambda: fs_of(root).mv(f"{HOME}/f", f"{PUBLIC}/f"))
    assert err.code == ErrorCode.INVALID_PATH and "one space" in str(err)
    err = error_of(lambda: fs_of(root).mv(f"{HOME}/f", "/pfs/local/home/root/f"))
    assert err.code == ErrorCode.INVALID_PATH
    assert download(alice, f"{HOME}/f") == b"alice's"


@pytest.mark.parametrize("op", ["stat", "ls", "mkdir", "rm", "download", "mv"])
def test_path_below_a_file(files: Pfs, alice: Client, op: str) -> None:
    """A path below a regular file is not found (the store must not leak ENOTDIR as a 500)."""
    calls: dict[str, Callable[[], object]] = {
        "stat": lambda: files.stat("pfs:top.csv/x"),
        "ls": lambda: files.ls("pfs:top.csv/x"),
        "mkdir": lambda: files.mkdir("pfs:top.csv/x/y", parents=True),
        "rm": lambda: files.rm("pfs:top.csv/x"),
        "download": lambda: download(alice, f"{HOME}/top.csv/x"),
        "mv": lambda: files.mv("pfs:data/a.csv", "pfs:top.csv/x"),
    }
    err = error_of(calls[op])
    assert err.code in (ErrorCode.PATH_NOT_FOUND, ErrorCode.NOT_A_DIRECTORY), err.code
