"""runtime.checkpoint: atomic saves, keep-last-K, and the newest *valid* checkpoint on load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from paddlecloud.runtime import checkpoint
from paddlecloud.runtime import contract as c


def _bytes(data: bytes) -> Callable[[BinaryIO], object]:
    return lambda f: f.write(data)


def test_save_then_latest_round_trips(tmp_path: Path) -> None:
    assert checkpoint.latest(tmp_path) is None
    saved = checkpoint.save(5, _bytes(b"state-5"), directory=tmp_path)
    found = checkpoint.latest(tmp_path)
    assert found == saved
    assert found is not None and found.step == 5 and found.path.read_bytes() == b"state-5"


def test_keeps_only_the_newest_k(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4, 10):
        checkpoint.save(step, _bytes(f"s{step}".encode()), keep=2, directory=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-10.bin", "ckpt-10.json", "ckpt-4.bin", "ckpt-4.json"]


def test_a_corrupt_or_unmanifested_newest_falls_back_to_the_previous(tmp_path: Path) -> None:
    checkpoint.save(1, _bytes(b"good"), directory=tmp_path)
    checkpoint.save(2, _bytes(b"also good"), directory=tmp_path)
    (tmp_path / "ckpt-2.bin").write_bytes(b"torn")  # bytes changed after the manifest was written
    (tmp_path / "ckpt-3.bin").write_bytes(b"no manifest yet")  # a crash before the manifest
    found = checkpoint.latest(tmp_path)
    assert found is not None and (found.step, found.path.read_bytes()) == (1, b"good")


def _flip_a_bit(path: Path, at: int) -> None:
    """Damage ``path`` in place, as bit rot or a torn sector would: same size, one bit different."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x01]))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_checkpoint_damaged_without_changing_its_size_is_refused(tmp_path: Path, where: str) -> None:
    checkpoint.save(1, _bytes(b"state after step 1"), directory=tmp_path)
    # larger than the 1 MiB the digest reads at a time: the damage may be in a later block
    newest = checkpoint.save(2, _bytes(b"state after step 2" * 80_000), directory=tmp_path)
    size = newest.path.stat().st_size
    _flip_a_bit(newest.path, {"first": 0, "middle": size // 2, "last": size - 1}[where])
    assert newest.path.stat().st_size == size  # only the sha256 can tell
    found = checkpoint.latest(tmp_path)
    assert found is not None and (found.step, found.path.read_bytes()) == (1, b"state after step 1")


def test_when_every_checkpoint_is_damaged_none_is_loaded(tmp_path: Path) -> None:
    only = checkpoint.save(1, _bytes(b"state after step 1"), directory=tmp_path)
    _flip_a_bit(only.path, 3)
    assert checkpoint.latest(tmp_path) is None  # start from scratch rather than from damaged state


def test_a_failing_writer_leaves_no_file_and_keeps_the_old_checkpoint(tmp_path: Path) -> None:
    checkpoint.save(1, _bytes(b"old"), directory=tmp_path)

    def boom(f: object) -> None:
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        checkpoint.save(2, boom, directory=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-1.bin", "ckpt-1.json"]
    found = checkpoint.latest(tmp_path)
    assert found is not None and found.step == 1


def test_directory_comes_from_the_env_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(c.CHECKPOINT_DIR, str(tmp_path / "ck"))
    checkpoint.save(7, _bytes(b"x"))
    assert (tmp_path / "ck" / "ckpt-7.json").is_file()
    found = checkpoint.latest()
    assert found is not None and found.step == 7


@pytest.mark.parametrize(("step", "keep"), [(-1, 1), (0, 0)])
def test_bad_arguments(tmp_path: Path, step: int, keep: int) -> None:
    with pytest.raises(ValueError):
        checkpoint.save(step, _bytes(b""), keep=keep, directory=tmp_path)
