"""storage.LocalDirStore on a temp dir: the namespace operations, atomic small writes, staged uploads
(begin / write / mark / commit / abort), and symbolic links planted inside the store."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.core.checksum import chunk_digest
from paddlecloud.storage import LocalDirStore, StorageError, UploadState
from paddlecloud.storage.base import Kind, StorageErrorKind

pytestmark = pytest.mark.timeout(30)

E = StorageErrorKind
HOME = ("home", "alice")


@pytest.fixture
def store(tmp_path: Path) -> LocalDirStore:
    s = LocalDirStore(tmp_path / "pfs")
    s.mkdir(HOME, parents=True)
    return s


def k(*parts: str) -> tuple[str, ...]:
    return (*HOME, *parts)


def put(store: LocalDirStore, key: tuple[str, ...], data: bytes, overwrite: bool = False) -> None:
    store.put_small(key, [data], overwrite)


def read_all(store: LocalDirStore, key: tuple[str, ...], offset: int = 0, length: int | None = None) -> bytes:
    return b"".join(store.read(key, offset, length, 3))


def kind_of(call: object) -> StorageErrorKind:
    assert callable(call)
    with pytest.raises(StorageError) as info:
        result = call()
        if hasattr(result, "__next__"):
            list(result)  # generators: errors may come on first use
    return info.value.kind


def staged_names(store: LocalDirStore) -> list[str]:
    return sorted(p.name for p in store.uploads.iterdir())


# -- layout --------------------------------------------------------------------------------------


def test_layout_is_created(tmp_path: Path) -> None:
    s = LocalDirStore(tmp_path / "root")
    for d in ("files/home", "files/public", "uploads"):
        assert (tmp_path / "root" / d).is_dir()
    assert s.local_paths is True
    assert s.local_path(k("a", "b")) == tmp_path / "root" / "files" / "home" / "alice" / "a" / "b"


# -- mkdir ---------------------------------------------------------------------------------------


def test_mkdir_parents(store: LocalDirStore) -> None:
    e = store.mkdir(k("a", "b", "c"), parents=True)
    assert e.kind == Kind.DIR and e.key == k("a", "b", "c") and e.size == 0
    assert (store.files / "home" / "alice" / "a" / "b" / "c").is_dir()
    # -p on an existing directory is fine and returns it
    assert store.mkdir(k("a", "b"), parents=True).kind == Kind.DIR


@pytest.mark.parametrize(
    ("setup", "key", "parents", "want"),
    [
        ([], k("missing", "x"), False, E.NOT_FOUND),
        (["d"], k("d"), False, E.EXISTS),
        (["f:"], k("f"), True, E.EXISTS),
        (["f:"], k("f"), False, E.EXISTS),
    ],
)
def test_mkdir_errors(
    store: LocalDirStore, setup: list[str], key: tuple[str, ...], parents: bool, want: StorageErrorKind
) -> None:
    for item in setup:
        if item.endswith(":"):
            put(store, k(item[:-1]), b"file")
        else:
            store.mkdir(k(item), parents=False)
    assert kind_of(lambda: store.mkdir(key, parents)) == want


# -- listdir -------------------------------------------------------------------------------------


@pytest.fixture
def tree(store: LocalDirStore) -> LocalDirStore:
    store.mkdir(k("b", "y"), parents=True)
    store.mkdir(k("a"), parents=False)
    for key, data in [
        (k("c.txt"), b"ccc"),
        (k("a", "2"), b"22"),
        (k("a", "1"), b"1"),
        (k("b", "y", "z"), b"zzzz"),
        (k("b", "x"), b""),
    ]:
        put(store, key, data)
    return store


def test_listdir_flat_is_sorted(tree: LocalDirStore) -> None:
    got = [(e.key[2:], e.kind, e.size) for e in tree.listdir(HOME, recursive=False)]
    assert got == [(("a",), Kind.DIR, 0), (("b",), Kind.DIR, 0), (("c.txt",), Kind.FILE, 3)]


def test_listdir_recursive_is_depth_first_sorted(tree: LocalDirStore) -> None:
    got = ["/".join(e.key[2:]) for e in tree.listdir(HOME, recursive=True)]
    assert got == ["a", "a/1", "a/2", "b", "b/x", "b/y", "b/y/z", "c.txt"]
    sizes = {"/".join(e.key[2:]): e.size for e in tree.listdir(HOME, recursive=True)}
    assert sizes["b/y/z"] == 4 and sizes["b/x"] == 0 and sizes["a/1"] == 1


@pytest.mark.parametrize(("key", "want"), [(k("nope"), E.NOT_FOUND), (k("c.txt"), E.NOT_A_DIRECTORY)])
def test_listdir_errors(tree: LocalDirStore, key: tuple[str, ...], want: StorageErrorKind) -> None:
    assert kind_of(lambda: tree.listdir(key, recursive=False)) == want


def test_listdir_skips_non_regular_files(tree: LocalDirStore) -> None:
    os.mkfifo(tree.local_path(k("fifo")))  # type: ignore[arg-type]
    assert "fifo" not in [e.key[-1] for e in tree.listdir(HOME, recursive=True)]
    assert kind_of(lambda: tree.stat(k("fifo"))) == E.UNSAFE


# -- stat / read ---------------------------------------------------------------------------------


def test_stat(tree: LocalDirStore) -> None:
    f = tree.stat(k("c.txt"))
    assert f is not None and f.kind == Kind.FILE and f.size == 3
    d = tree.stat(k("a"))
    assert d is not None and d.kind == Kind.DIR and d.size == 0
    assert tree.stat(k("nope")) is None
    assert tree.stat(k("nope", "deeper")) is None


@pytest.mark.parametrize(
    ("offset", "length", "want"),
    [
        (0, None, b"0123456789"),
        (3, None, b"3456789"),
        (3, 4, b"3456"),
        (8, 10, b"89"),
        (10, None, b""),
        (0, 0, b""),
        (20, None, b""),
    ],
)
def test_read_ranges(store: LocalDirStore, offset: int, length: int | None, want: bytes) -> None:
    put(store, k("f"), b"0123456789")
    assert read_all(store, k("f"), offset, length) == want


def test_read_errors(tree: LocalDirStore) -> None:
    assert kind_of(lambda: tree.read(k("nope"), 0, None, 10)) == E.NOT_FOUND
    assert kind_of(lambda: tree.read(k("a"), 0, None, 10)) == E.IS_A_DIRECTORY


# -- remove / move -------------------------------------------------------------------------------


def test_remove_file_returns_its_size(tree: LocalDirStore) -> None:
    assert tree.remove(k("c.txt"), recursive=False) == 3
    assert tree.stat(k("c.txt")) is None


def test_remove_dir_needs_recursive(tree: LocalDirStore) -> None:
    assert kind_of(lambda: tree.remove(k("b"), recursive=False)) == E.IS_A_DIRECTORY
    assert tree.stat(k("b", "y", "z")) is not None  # nothing removed
    assert tree.remove(k("b"), recursive=True) == 4
    assert tree.stat(k("b")) is None
    assert ["/".join(e.key[2:]) for e in tree.listdir(HOME, recursive=True)] == ["a", "a/1", "a/2", "c.txt"]


def test_remove_empty_dir_also_needs_recursive(store: LocalDirStore) -> None:
    store.mkdir(k("empty"), parents=False)
    assert kind_of(lambda: store.remove(k("empty"), recursive=False)) == E.IS_A_DIRECTORY
    assert store.remove(k("empty"), recursive=True) == 0


def test_remove_missing(store: LocalDirStore) -> None:
    assert kind_of(lambda: store.remove(k("nope"), recursive=True)) == E.NOT_FOUND


def test_move_file_and_dir(tree: LocalDirStore) -> None:
    e = tree.move(k("c.txt"), k("a", "c2.txt"))
    assert e.key == k("a", "c2.txt") and e.size == 3
    assert tree.stat(k("c.txt")) is None
    assert read_all(tree, k("a", "c2.txt")) == b"ccc"
    tree.move(k("b"), k("a", "bb"))
    assert read_all(tree, k("a", "bb", "y", "z")) == b"zzzz"


@pytest.mark.parametrize(
    ("src", "dst", "want"),
    [
        (k("nope"), k("x"), E.NOT_FOUND),
        (k("c.txt"), k("a"), E.EXISTS),  # the store never clobbers; "into a dir" is the service's job
        (k("c.txt"), k("a", "1"), E.EXISTS),
        (k("c.txt"), k("nodir", "c"), E.NOT_FOUND),
    ],
)
def test_move_errors(
    tree: LocalDirStore, src: tuple[str, ...], dst: tuple[str, ...], want: StorageErrorKind
) -> None:
    assert kind_of(lambda: tree.move(src, dst)) == want
    assert read_all(tree, k("a", "1")) == b"1"  # the existing file is intact


# -- a file used as a directory --------------------------------------------------------------------

#: keys below the regular file ``c.txt``: "x inside a file" neither exists nor can be made (os.lstat
#: answers ENOTDIR there, which must not escape as a raw OSError)
BELOW_FILE = [k("c.txt", "x"), k("c.txt", "x", "y")]


@pytest.mark.parametrize(
    "op", ["stat", "mkdir", "mkdir_p", "listdir", "read", "remove", "move_to", "local_path"]
)
@pytest.mark.parametrize("key", BELOW_FILE, ids=lambda key: "/".join(key[2:]))
def test_key_below_a_regular_file(tree: LocalDirStore, key: tuple[str, ...], op: str) -> None:
    calls = {
        "stat": lambda: tree.stat(key),
        "mkdir": lambda: tree.mkdir(key, parents=False),
        "mkdir_p": lambda: tree.mkdir(key, parents=True),
        "listdir": lambda: list(tree.listdir(key, recursive=False)),
        "read": lambda: b"".join(tree.read(key, 0, None, 10)),
        "remove": lambda: tree.remove(key, recursive=True),
        "move_to": lambda: tree.move(k("a", "1"), key),
        "local_path": lambda: tree.local_path(key),
    }
    try:
        result = calls[op]()
    except StorageError as exc:
        assert exc.kind in (E.NOT_FOUND, E.NOT_A_DIRECTORY)
    else:
        assert op in ("stat", "local_path"), f"{op} below a file succeeded"
        assert result is None or op == "local_path"
    assert read_all(tree, k("c.txt")) == b"ccc"


# -- put_small -----------------------------------------------------------------------------------


def test_put_small_is_atomic_and_leaves_no_temp(store: LocalDirStore) -> None:
    seen: list[list[str]] = []

    def pieces() -> Iterator[bytes]:
        for piece in (b"abc", b"def"):
            # while the file is being written, the namespace holds nothing new
            seen.append(sorted(p.name for p in (store.files / "home" / "alice").iterdir()))
            yield piece

    e = store.put_small(k("f"), pieces(), overwrite=False)
    assert seen == [[], []]
    assert e.size == 6 and read_all(store, k("f")) == b"abcdef"
    assert staged_names(store) == []
    assert [x.key[-1] for x in store.listdir(HOME, recursive=True)] == ["f"]


def test_put_small_failure_midway_leaves_nothing(store: LocalDirStore) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"abc"
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        store.put_small(k("f"), pieces(), overwrite=False)
    assert store.stat(k("f")) is None
    assert staged_names(store) == []


def test_put_small_no_clobber_and_overwrite(store: LocalDirStore) -> None:
    put(store, k("f"), b"one")
    assert kind_of(lambda: put(store, k("f"), b"two")) == E.EXISTS
    assert read_all(store, k("f")) == b"one"
    assert staged_names(store) == []
    put(store, k("f"), b"three", overwrite=True)
    assert read_all(store, k("f")) == b"three"
    assert staged_names(store) == []


@pytest.mark.parametrize(
    ("key", "want"),
    [(k("d"), E.IS_A_DIRECTORY), (k("nodir", "f"), E.NOT_FOUND), (k("file", "f"), E.NOT_A_DIRECTORY)],
)
def test_put_small_errors(store: LocalDirStore, key: tuple[str, ...], want: StorageErrorKind) -> None:
    store.mkdir(k("d"), parents=False)
    put(store, k("file"), b"x")
    assert kind_of(lambda: store.put_small(key, [b"data"], True)) == want
    assert staged_names(store) == []


# -- staged uploads ------------------------------------------------------------------------------

CHUNK = 4


def begin(store: LocalDirStore, key: tuple[str, ...], size: int, uid: str = "u1") -> UploadState:
    return store.upload_begin(UploadState(id=uid, key=key, size=size, chunk_size=CHUNK, owner="alice"))


def send(store: LocalDirStore, uid: str, index: int, data: bytes, mark: bool = True) -> int:
    seen: list[bytes] = []
    n = store.upload_write(uid, index * CHUNK, [data[:1], data[1:]], seen.append)
    assert b"".join(seen) == data  # every piece passed through on_piece
    if mark:
        store.upload_mark(uid, index, chunk_digest(data))
    return n


def test_upload_begin_write_mark_commit(store: LocalDirStore) -> None:
    data = b"0123456789"  # 3 chunks of 4, 4, 2
    st = begin(store, k("big"), len(data))
    assert st.chunks == 3 and st.received == {}
    assert (store.uploads / "u1" / "data").stat().st_size == len(data)  # reserved at full size
    assert send(store, "u1", 2, data[8:]) == 2
    assert send(store, "u1", 0, data[:4]) == 4
    got = store.upload_get("u1")
    assert got is not None
    assert got.received == {0: chunk_digest(data[:4]), 2: chunk_digest(data[8:])}
    assert (got.key, got.size, got.chunk_size, got.owner) == (k("big"), 10, CHUNK, "alice")
    assert store.stat(k("big")) is None  # staged, not visible
    assert [e.key for e in store.listdir(HOME, recursive=True)] == []
    send(store, "u1", 1, data[4:8])
    e = store.upload_commit("u1", overwrite=False)
    assert e.key == k("big") and e.size == 10
    assert read_all(store, k("big")) == data
    assert store.upload_get("u1") is None
    assert staged_names(store) == []


def test_upload_begin_again_returns_what_was_received(store: LocalDirStore) -> None:
    begin(store, k("big"), 10)
    send(store, "u1", 1, b"4567")
    again = begin(store, k("big"), 10)
    assert again.received == {1: chunk_digest(b"4567")}


def test_unmarked_chunk_is_not_received(store: LocalDirStore) -> None:
    begin(store, k("big"), 10)
    send(store, "u1", 0, b"0123", mark=False)
    st = store.upload_get("u1")
    assert st is not None and st.received == {}


def test_upload_abort(store: LocalDirStore) -> None:
    begin(store, k("big"), 10)
    send(store, "u1", 0, b"0123")
    store.upload_abort("u1")
    assert store.upload_get("u1") is None
    assert staged_names(store) == []
    assert store.stat(k("big")) is None
    store.upload_abort("u1")  # twice is fine


def test_upload_commit_does_not_clobber_without_overwrite(store: LocalDirStore) -> None:
    put(store, k("big"), b"existing")
    begin(store, k("big"), 4)
    send(store, "u1", 0, b"new!")
    assert kind_of(lambda: store.upload_commit("u1", overwrite=False)) == E.EXISTS
    assert read_all(store, k("big")) == b"existing"
    # the staged upload is kept: it can still be committed with overwrite
    e = store.upload_commit("u1", overwrite=True)
    assert e.size == 4 and read_all(store, k("big")) == b"new!"
    assert staged_names(store) == []


def test_upload_commit_onto_a_directory_is_refused(store: LocalDirStore) -> None:
    store.mkdir(k("d"), parents=False)
    begin(store, k("d"), 4)
    send(store, "u1", 0, b"abcd")
    assert kind_of(lambda: store.upload_commit("u1", overwrite=True)) == E.IS_A_DIRECTORY
    d = store.stat(k("d"))
    assert d is not None and d.kind == Kind.DIR


def test_upload_commit_unknown(store: LocalDirStore) -> None:
    assert kind_of(lambda: store.upload_commit("nosuch", overwrite=False)) == E.NOT_FOUND


@pytest.mark.parametrize("uid", ["../x", "a/b", "..", "", "a.b", "x\x00"])
def test_upload_ids_must_be_alphanumeric(store: LocalDirStore, uid: str) -> None:
    assert kind_of(lambda: store.upload_get(uid)) == E.NOT_FOUND
    assert kind_of(lambda: store.upload_abort(uid)) == E.NOT_FOUND


def test_uploads_of_is_per_owner(store: LocalDirStore) -> None:
    begin(store, k("a"), 10, "u1")
    store.upload_begin(UploadState(id="u2", key=("home", "bob", "b"), size=7, chunk_size=4, owner="bob"))
    assert [(u.id, u.size) for u in store.uploads_of("alice")] == [("u1", 10)]
    assert [(u.id, u.size) for u in store.uploads_of("bob")] == [("u2", 7)]
    assert store.uploads_of("carol") == []


def test_upload_begin_that_does_not_fit_fails_and_keeps_nothing(
    store: LocalDirStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.posix_fallocate

    def partial(fd: int, offset: int, length: int) -> None:
        real(fd, 0, min(length, 1 << 20))  # the file system allocates what it can ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... and then runs out

    monkeypatch.setattr(os, "posix_fallocate", partial)
    assert kind_of(lambda: begin(store, k("big"), 8 << 20)) == E.NO_SPACE  # a 507, not a 404 or 500
    assert staged_names(store) == []


# -- usage ---------------------------------------------------------------------------------------


def test_usage(tree: LocalDirStore) -> None:
    assert tree.usage(HOME) == 3 + 2 + 1 + 4 + 0
    assert tree.usage(k("b")) == 4
    assert tree.usage(k("nope")) == 0
    begin(tree, k("staged"), 1000)
    assert tree.usage(HOME) == 10  # staged uploads are not files (they are reserved, not used)


# -- symbolic links planted inside the store -----------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "secret").write_bytes(b"TOP SECRET")
    (d / "sub" / "inner").write_bytes(b"INNER")
    return d


def snapshot(d: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else None) for p in sorted(d.rglob("*"))}


LINKS = {
    "to_dir": "outside",  # a directory outside the store
    "to_file": "outside/secret",  # a file outside
    "to_etc": "/etc",
    "to_passwd": "/etc/passwd",
    "dangling": "outside/nothing-here",
}


@pytest.fixture
def planted(store: LocalDirStore, outside: Path) -> LocalDirStore:
    home = store.local_path(HOME)
    assert home is not None
    (home / "ok").mkdir()
    (home / "ok" / "f").write_bytes(b"fine")
    for name, target in LINKS.items():
        os.symlink(target if target.startswith("/") else outside.parent / target, home / name)
    # a link one level down as well
    os.symlink(outside, home / "ok" / "deep")
    # and one that stays inside the store: into another user's home (relative, as a job would plant it)
    (home.parent / "bob" / "sub").mkdir(parents=True)
    (home.parent / "bob" / "secret").write_bytes(b"BOB'S SECRET")
    os.symlink("../bob", home / "to_bob")
    return store


LINK_KEYS = [k(name) for name in LINKS] + [k("ok", "deep"), k("to_bob")]
THROUGH_KEYS = [
    k("to_dir", "secret"),
    k("to_dir", "sub"),
    k("to_dir", "sub", "inner"),
    k("to_etc", "passwd"),
    k("ok", "deep", "secret"),
    k("to_dir", "new"),
    k("to_bob", "secret"),
    k("to_bob", "sub"),
    k("to_bob", "new"),
]


def operations(store: LocalDirStore, key: tuple[str, ...]) -> dict[str, object]:
    """Every store operation that takes a key, aimed at ``key``."""
    return {
        "stat": lambda: store.stat(key),
        "listdir": lambda: store.listdir(key, recursive=True),
        "read": lambda: store.read(key, 0, None, 1 << 20),
        "open_read": lambda: os.close(store.open_read(key)),
        "mkdir": lambda: store.mkdir(key, parents=False),
        "mkdir_p": lambda: store.mkdir((*key, "x", "y"), parents=True),
        "remove": lambda: store.remove(key, recursive=False),
        "remove_r": lambda: store.remove(key, recursive=True),
        "move_from": lambda: store.move(key, k("moved")),
        "move_to": lambda: store.move(k("ok", "f"), key),
        "move_into": lambda: store.move(k("ok", "f"), (*key, "f")),
        "put_small": lambda: store.put_small(key, [b"PWNED"], True),
        "put_small_below": lambda: store.put_small((*key, "pwn"), [b"PWNED"], True),
        "local_path": lambda: store.local_path(key),
    }


OPS = [
    "stat",
    "listdir",
    "read",
    "open_read",
    "mkdir",
    "mkdir_p",
    "remove",
    "remove_r",
    "move_from",
    "move_to",
    "move_into",
    "put_small",
    "put_small_below",
    "local_path",
]


READ_OPS = ("stat", "listdir", "read", "open_read", "local_path")
#: (key, operation): everything, except that keys reaching into the real /etc are only ever read (the
#: suite may run as root: a regression must not be able to write there)
OP_CASES = [
    (key, op)
    for key in LINK_KEYS + THROUGH_KEYS
    for op in OPS
    if op in READ_OPS or not (key[2] == "to_etc" or (len(key) > 3 and key[2] == "to_passwd"))
]


@pytest.mark.parametrize(("key", "op"), OP_CASES, ids=[f"{'/'.join(k[2:])}-{op}" for k, op in OP_CASES])
def test_every_operation_through_a_link_is_unsafe(
    planted: LocalDirStore, outside: Path, key: tuple[str, ...], op: str
) -> None:
    bob = planted.files / "home" / "bob"
    before, bob_before = snapshot(outside), snapshot(bob)
    etc_before = sorted(os.listdir("/etc"))
    assert kind_of(operations(planted, key)[op]) == E.UNSAFE
    assert snapshot(outside) == before
    assert snapshot(bob) == bob_before
    assert sorted(os.listdir("/etc")) == etc_before
    # the planted link itself is still there, and the legitimate file untouched
    link = planted.local_path(HOME) / ("ok/deep" if key[2] == "ok" else key[2])  # type: ignore[operator]
    assert os.path.islink(link)
    assert (planted.local_path(HOME) / "ok" / "f").read_bytes() == b"fine"  # type: ignore[operator]


@pytest.mark.parametrize(
    "key", [k for k in LINK_KEYS + THROUGH_KEYS if k[2] != "to_etc"], ids=lambda key: "/".join(key[2:])
)
def test_upload_commit_through_a_link_is_unsafe(
    planted: LocalDirStore, outside: Path, key: tuple[str, ...]
) -> None:
    bob = planted.files / "home" / "bob"
    before, bob_before = snapshot(outside), snapshot(bob)
    begin(planted, key, 4)
    send(planted, "u1", 0, b"PWND")
    for overwrite in (False, True):
        assert kind_of(lambda ow=overwrite: planted.upload_commit("u1", ow)) == E.UNSAFE
    assert snapshot(outside) == before
    assert snapshot(bob) == bob_before


def test_listdir_hides_links(planted: LocalDirStore) -> None:
    names = ["/".join(e.key[2:]) for e in planted.listdir(HOME, recursive=True)]
    assert names == ["ok", "ok/f"]
    assert planted.usage(HOME) == 4  # the 10-byte secret and /etc are not counted


def test_remove_tree_with_links_does_not_follow_them(planted: LocalDirStore, outside: Path) -> None:
    before = snapshot(outside)
    assert planted.remove(k("ok"), recursive=True) == 4
    assert snapshot(outside) == before
    assert planted.stat(k("ok")) is None


def test_home_root_link_is_unsafe(store: LocalDirStore, outside: Path) -> None:
    store.mkdir(k("ok"), parents=False)
    put(store, k("ok", "f"), b"fine")
    os.symlink(outside, store.files / "home" / "mallory")
    before = snapshot(outside)
    for op, call in operations(store, ("home", "mallory")).items():
        assert kind_of(call) == E.UNSAFE, op
    assert kind_of(lambda: store.stat(("home", "mallory", "secret"))) == E.UNSAFE
    assert snapshot(outside) == before


# a link swapped in while an operation runs (time of check / time of use): test_pfs_store_race.py
