"""controller.model.specs: a stored spec is parsed once per job, per controller, and the cache is bounded."""

from __future__ import annotations

from typing import Any

from paddlecloud.controller.model.specs import SpecCache
from paddlecloud.store import JobRow


def _row(job_id: int | None, trainers: int, submitted_at: float = 1000.0) -> JobRow:
    spec: dict[str, Any] = {
        "name": "j",
        "package": "/pfs/local/home/alice/p.tar.gz",
        "entry": "true",
        "trainers": {"count": trainers},
    }
    return JobRow(
        id=job_id, user="alice", name="j", package_id=spec["package"], framework="none", spec=spec,
        priority=0, phase="Queued", reason="", message="", submitted_at=submitted_at, output_dir="",
        workers=[],
    )  # fmt: skip


def test_a_job_spec_is_parsed_once_and_then_shared() -> None:
    cache = SpecCache()
    first = cache.get(_row(1, 2))
    assert first.trainers.count == 2
    assert cache.get(_row(1, 2)) is first


def test_two_controllers_never_share_a_spec() -> None:
    # two databases in one process: same id, same submit time, different specs
    a, b = SpecCache(), SpecCache()
    assert a.get(_row(1, 2)).trainers.count == 2
    assert b.get(_row(1, 3)).trainers.count == 3


def test_a_job_submitted_again_under_the_same_id_is_parsed_again() -> None:
    cache = SpecCache()
    assert cache.get(_row(1, 2, submitted_at=1.0)).trainers.count == 2
    assert cache.get(_row(1, 4, submitted_at=2.0)).trainers.count == 4


def test_an_unsaved_row_is_not_cached_and_the_cache_is_bounded() -> None:
    cache = SpecCache(size=3)
    assert cache.get(_row(None, 2)).trainers.count == 2
    assert len(cache) == 0
    for i in range(10):
        cache.get(_row(i, 1))
    assert len(cache) == 3
    assert cache.get(_row(9, 1)) is cache.get(_row(9, 1))  # the newest are the ones kept
