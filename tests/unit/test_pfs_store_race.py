"""storage.LocalDirStore against a job that swaps a directory of its owner's home for a symbolic link
while a request of its owner is being served (time of check / time of use).

A job of alice can write in alice's home (it is bound into its sandbox), so between any two system
calls of the server it may rename ``home/alice/d`` aside and put a link ``d -> ../bob`` in its place.
Each operation below runs once per ``os`` call it makes inside ``storage.local``: before the n-th
call, the swap happens. Whatever n, the operation is refused (UNSAFE, when the store meets the link)
or acts on alice's own directory (the one moved aside): bob's home is never read, listed or changed.
Deterministic: no threads, the interleaving is chosen by n.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import paddlecloud.storage.local as local_module
from paddlecloud.storage import LocalDirStore, StorageError, UploadState
from paddlecloud.storage.base import Entry, StorageErrorKind

pytestmark = pytest.mark.timeout(120)

D = ("home", "alice", "d")
ALICE_F = b"alice's"
BOB_F = b"BOB'S SECRET"  # another size than anything of alice's: a stat of it shows
#: bob's home: what a request of alice's must never see or change
BOB = {"f": BOB_F, "bobonly": b"BOB 2", "sub/inner": b"BOB 3"}
BOB_USAGE = sum(map(len, BOB.values()))


def k(*parts: str) -> tuple[str, ...]:
    return (*D, *parts)


class SwapBefore:
    """Stands for ``os`` in ``storage.local``: counts the calls made through it and, before call number
    ``at``, runs ``swap`` (the job's move). ``at=None``: only counts."""

    def __init__(self, at: int | None, swap: Callable[[], None]) -> None:
        self.at, self.swap, self.calls = at, swap, 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if not callable(real) or isinstance(real, type):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.calls == self.at:
                self.swap()
            self.calls += 1
            return real(*args, **kwargs)

        return call


def make_store(root: Path) -> LocalDirStore:
    store = LocalDirStore(root)
    home = root / "files" / "home"
    for name, data in BOB.items():
        (home / "bob" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "bob" / name).write_bytes(data)
    (home / "alice" / "d" / "sub").mkdir(parents=True)
    (home / "alice" / "d" / "f").write_bytes(ALICE_F)
    (home / "alice" / "d" / "sub" / "inner").write_bytes(b"ALICE")
    (home / "alice" / "top").write_bytes(b"top")
    for uid, key in (("u1", k("g")), ("u2", k("f"))):  # staged uploads, committed by the operations
        store.upload_begin(UploadState(id=uid, key=key, size=4, chunk_size=4, owner="alice"))
        store.upload_write(uid, 0, [b"PWND"], lambda _: None)
    return store


def swap_dir(root: Path) -> None:
    """The job's move: alice's ``d`` aside, a link to bob's home in its place."""
    d = root / "files" / "home" / "alice" / "d"
    d.rename(d.with_name("d.aside"))
    os.symlink("../bob", d)


def swap_file(root: Path) -> None:
    """The same one level down: alice's ``d/f`` aside (if the operation left it), a link to bob's ``f``
    in its place."""
    f = root / "files" / "home" / "alice" / "d" / "f"
    with contextlib.suppress(FileNotFoundError):
        f.rename(f.with_name("f.aside"))
    os.symlink("../../bob/f", f)


def read_fd(fd: int) -> bytes:
    try:
        return os.pread(fd, 1 << 16, 0)
    finally:
        os.close(fd)


#: name -> what it does (its result is checked for bob's data); every operation that takes a key
OPS: dict[str, Callable[[LocalDirStore], object]] = {
    "stat": lambda s: s.stat(k("f")),
    "read": lambda s: b"".join(s.read(k("f"), 0, None, 1 << 20)),
    "open_read": lambda s: read_fd(s.open_read(k("f"))),
    "listdir": lambda s: list(s.listdir(D, recursive=True)),
    "usage": lambda s: s.usage(D),
    "mkdir": lambda s: s.mkdir(k("new"), parents=False),
    "mkdir_p": lambda s: s.mkdir(k("new", "deeper"), parents=True),
    "put_small": lambda s: s.put_small(k("g"), [b"PWND"], False),
    "put_small_over": lambda s: s.put_small(k("f"), [b"PWND"], True),
    "upload_commit": lambda s: s.upload_commit("u1", False),
    "upload_commit_over": lambda s: s.upload_commit("u2", True),
    "remove": lambda s: s.remove(k("f"), recursive=False),
    "remove_r": lambda s: s.remove(k("sub"), recursive=True),
    "move_from": lambda s: s.move(k("f"), ("home", "alice", "moved")),
    "move_to": lambda s: s.move(("home", "alice", "top"), k("top")),
}
#: the operations on ``d/f`` itself (for the swap of the file: the rest never meet it)
ON_F = ["stat", "read", "open_read", "put_small_over", "upload_commit_over", "remove", "move_from"]
CASES = [("dir", op) for op in OPS] + [("file", op) for op in ON_F]


def shows_bob(result: object) -> bool:
    if isinstance(result, bytes):
        return b"BOB" in result
    if isinstance(result, Entry):
        return result.size == len(BOB_F)
    if isinstance(result, list):
        return any(shows_bob(e) or "bobonly" in e.key for e in result)
    if isinstance(result, int):
        return result == BOB_USAGE
    return False


def bob_now(root: Path) -> dict[str, bytes | None]:
    home = root / "files" / "home" / "bob"
    return {
        str(p.relative_to(home)): p.read_bytes() if p.is_file() else None for p in sorted(home.rglob("*"))
    }


@pytest.mark.parametrize(("swap", "op"), CASES, ids=[f"{s}-{op}" for s, op in CASES])
def test_a_swap_at_any_point_of_an_operation_never_reaches_another_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str, op: str
) -> None:
    swapper = swap_dir if swap == "dir" else swap_file
    counting, dry = SwapBefore(None, lambda: None), make_store(tmp_path / "dry")
    with monkeypatch.context() as m:
        m.setattr(local_module, "os", counting)
        OPS[op](dry)
    assert counting.calls > 0
    outcomes: list[str] = []
    for at in range(counting.calls):
        root = tmp_path / str(at)
        store = make_store(root)
        bob_before = bob_now(root)
        swapping = SwapBefore(at, lambda root=root: swapper(root))  # type: ignore[misc]
        with monkeypatch.context() as m:
            m.setattr(local_module, "os", swapping)
            try:
                result = OPS[op](store)
            except StorageError as exc:
                result, outcome = None, str(exc.kind)
            else:  # usage answers 0 where it may not count (its refusal)
                outcome = str(StorageErrorKind.UNSAFE) if op == "usage" and result == 0 else "done"
        assert swapping.calls > at  # the swap did happen
        assert not shows_bob(result), f"swap before call {at}: {op} gave bob's data: {result!r}"
        assert bob_now(root) == bob_before, f"swap before call {at}: {op} changed bob's home"
        outcomes.append(outcome)
    # the store met the link at some point and refused it (else the swap never hit the operation)
    assert str(StorageErrorKind.UNSAFE) in outcomes, outcomes
