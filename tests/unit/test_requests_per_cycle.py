"""The scheduler's view of a job (``JobRequest``) is built once per job per reconcile cycle (issue
26: a started job's was built three times, twice only for the resources its workers hold, which
``capacity.node_states`` now takes from the spec). Counted on the in-memory backend, every build
going through ``model.job_rows.job_request``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from memory_platform import MemoryWorld

from paddlecloud.controller.model import job_rows
from paddlecloud.scheduler import JobRequest

__all__: list[str] = []

pytestmark = pytest.mark.timeout(60)


def test_each_job_is_seen_by_the_scheduler_once_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text("print('unused')\n")
    world = MemoryWorld(tmp_path)
    try:
        alice = world.client("alice")
        for name in ("a", "b", "c", "d", "e"):  # 4 CPUs: four 1-CPU jobs start, one waits
            world.submit(alice, name, package)
        world.tick()
        assert sorted(j.phase for j in alice.jobs()) == ["Queued"] + ["Starting"] * 4
        built: Counter[str] = Counter()

        def counting(**kw: Any) -> JobRequest:
            built[kw["key"]] += 1
            return JobRequest(**kw)

        monkeypatch.setattr(job_rows, "JobRequest", counting)
        world.tick()
        assert built == dict.fromkeys(("alice/a", "alice/b", "alice/c", "alice/d", "alice/e"), 1)
    finally:
        world.close()
