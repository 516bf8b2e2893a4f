"""storage.LocalDirStore when a job changes its owner's tree between two calls of the server in ways
that are not links (those are in test_pfs_store_race.py): a folder made unsearchable, a file
swapped for a folder, a name made after the server checked it was free; and a read abandoned
before its first block. Each is the caller's error (a StorageError the API answers with a 4xx and a
stable code), never an OSError (a 500), and nothing is lost or leaked.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import paddlecloud.storage.local as local_module
from paddlecloud.api.errors import Conflict, ErrorCode
from paddlecloud.controller.services.files import _storage_error
from paddlecloud.storage import LocalDirStore, StorageError
from paddlecloud.storage.base import StorageErrorKind

pytestmark = pytest.mark.timeout(60)

NOBODY = 65534
D = ("home", "alice", "d")


def _put(store: LocalDirStore, key: tuple[str, ...], data: bytes) -> None:
    store.mkdir(key[:-1], parents=True)
    store.put_small(key, [data], overwrite=False)


def _store_with(tmp_path: Path, name: str, data: bytes) -> tuple[LocalDirStore, Path]:
    """A store with one file ``D/name`` holding ``data``; the store and the file's real path."""
    store = LocalDirStore(tmp_path / "store")
    _put(store, (*D, name), data)
    return store, tmp_path / "store" / "files" / Path(*D) / name


def _as_nobody(tmp_path: Path, fn: Callable[[LocalDirStore, Path], Any]) -> Any:
    """Run ``fn(store, root)`` in a forked child that is an unprivileged user (root, which runs the
    tests here, passes every permission check), on a store it owns; its JSON result. The store is
    in a folder of its own under the system's temporary dir (pytest's are root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="pc-nobody-"))
    os.chown(top, NOBODY, NOBODY)
    try:
        return _fork_as_nobody(top, fn)
    finally:
        for p in top.rglob("*"):  # the child's chmod 000 folders: removable again
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(top, ignore_errors=True)


def _fork_as_nobody(top: Path, fn: Callable[[LocalDirStore, Path], Any]) -> Any:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out: Any = fn(LocalDirStore(top / "store"), top / "store")
        except BaseException as exc:
            out, code = {"child_error": repr(exc)}, 1
        os.write(w, json.dumps(out).encode())
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _outcome(call: Callable[[], Any]) -> str:
    """``ok``, the StorageError's kind, or the name of any other exception (a 500 in the API)."""
    try:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
    except StorageError as exc:
        return f"StorageError:{exc.kind}"
    except Exception as exc:
        return type(exc).__name__
    return "ok"


def _unsearchable(store: LocalDirStore, root: Path) -> dict[str, str]:
    _put(store, (*D, "f"), b"data")
    os.chmod(root / "files" / Path(*D), 0)  # what `chmod 000 d` in a job does
    return {
        "stat": _outcome(lambda: store.stat((*D, "f"))),
        "list": _outcome(lambda: store.listdir(D, recursive=False)),
        "read": _outcome(lambda: store.read((*D, "f"), 0, None, 1 << 16)),
        "remove": _outcome(lambda: store.remove((*D, "f"), recursive=False)),
        "mkdir": _outcome(lambda: store.mkdir((*D, "sub"), parents=False)),
        "put": _outcome(lambda: store.put_small((*D, "g"), [b"x"], overwrite=False)),
        # the quota's walk of the home: bytes in a folder it may not enter are not skipped
        "usage": _outcome(lambda: store.usage(("home", "alice"))),
    }


def test_a_folder_a_job_made_unsearchable_is_refused_as_denied_not_a_server_error(tmp_path: Path) -> None:
    got = _as_nobody(tmp_path, _unsearchable)
    assert "child_error" not in got, got
    assert got == dict.fromkeys(got, f"StorageError:{StorageErrorKind.DENIED}"), got
    assert set(got) == {"stat", "list", "read", "remove", "mkdir", "put", "usage"}


def test_denied_is_a_conflict_with_a_stable_code_that_says_what_to_do() -> None:
    err = _storage_error(StorageError(StorageErrorKind.DENIED, D), "pfs:d/f")
    assert isinstance(err, Conflict) and err.code == ErrorCode.PATH_NOT_ACCESSIBLE
    assert err.http_status == 409
    assert "chmod u+rwX" in str(err) and "pfs:d/f" in str(err)


def test_a_file_swapped_for_a_folder_before_its_unlink_is_refused_and_the_folder_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, target = _store_with(tmp_path, "f", b"data")
    real_unlink = os.unlink

    class Os:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
            target.unlink()  # the job, between the server's stat and its unlink
            target.mkdir()
            (target / "kept").write_bytes(b"job's")
            real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(local_module, "os", Os())
    with pytest.raises(StorageError) as caught:
        store.remove((*D, "f"), recursive=False)
    assert caught.value.kind == StorageErrorKind.IS_A_DIRECTORY
    assert (target / "kept").read_bytes() == b"job's"


def test_a_move_never_overwrites_a_name_made_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, src = _store_with(tmp_path, "a", b"moved")
    dst = src.with_name("b")
    real = LocalDirStore._stat_at

    def check_then_job_writes(self: LocalDirStore, parent: int, name: str, key: tuple[str, ...]) -> Any:
        e = real(self, parent, name, key)
        if name == "b":
            dst.write_bytes(b"the job's own b")  # made right after the server saw the name free
        return e

    monkeypatch.setattr(LocalDirStore, "_stat_at", check_then_job_writes)
    with pytest.raises(StorageError) as caught:
        store.move((*D, "a"), (*D, "b"))
    assert caught.value.kind == StorageErrorKind.EXISTS
    assert dst.read_bytes() == b"the job's own b"
    assert src.read_bytes() == b"moved"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_read_dropped_before_its_first_block_closes_its_descriptor(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store")
    _put(store, (*D, "f"), b"x" * 100_000)
    gc.collect()
    before = _open_fds()
    for _ in range(20):
        store.read((*D, "f"), 0, None, 4096)  # e.g. the client went away before the body was sent
    gc.collect()
    assert _open_fds() == before
    blocks = store.read((*D, "f"), 10, 5000, 4096)
    assert b"".join(blocks) == b"x" * 5000
    assert _open_fds() == before  # read to the end: closed without waiting for the collector
    half = store.read((*D, "f"), 0, None, 4096)
    next(half)
    half.close()  # type: ignore[attr-defined]
    assert _open_fds() == before
