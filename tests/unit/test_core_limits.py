"""Pure checks behind the submit-time limits: core.limits (entry, env), the per-worker quantity
bounds of core.quantity, and scheduler.never_placeable (a job no idle node set could hold)."""

from __future__ import annotations

import pytest

from paddlecloud.core.limits import MAX_ENV_BYTES, MAX_ENV_ENTRIES, env_bytes, env_problem, text_problem
from paddlecloud.core.quantity import (
    MAX_CPU_M,
    MAX_MEMORY,
    MIN_MEMORY,
    QuantityError,
    parse_cpu_request,
    parse_memory_request,
)
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, never_placeable

GI = 2**30


def test_env_bytes_count_as_the_kernel_does() -> None:
    assert env_bytes({"A": "1", "BC": "é"}) == (1 + 1 + 2) + (2 + 2 + 2)  # KEY=VALUE\0, UTF-8


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({}, None),
        ({f"V{i}": "" for i in range(MAX_ENV_ENTRIES)}, None),
        ({f"V{i}": "" for i in range(MAX_ENV_ENTRIES + 1)}, "257 variables"),
        ({"A": "x" * (MAX_ENV_BYTES - 3)}, None),  # exactly the limit
        ({"A": "x" * (MAX_ENV_BYTES - 2)}, "65537 bytes"),
        ({"A": "ok", "B": "a\x00b"}, "B: contains a NUL byte"),
    ],
)
def test_env_problem(env: dict[str, str], words: str | None) -> None:
    problem = env_problem(env)
    assert (problem is None) == (words is None), problem
    if words:
        assert problem is not None and words in problem


def test_text_problem() -> None:
    assert text_problem("python train.py --lr 0.1") is None
    assert "NUL" in (text_problem("python\x00") or "")


@pytest.mark.parametrize(
    ("text", "ok"),
    [("1m", True), ("0", False), ("0m", False), ("1024", True), ("1025", False), ("1" * 33, False)],
)
def test_cpu_request_bounds(text: str, ok: bool) -> None:
    if ok:
        assert 0 < parse_cpu_request(text) <= MAX_CPU_M
    else:
        with pytest.raises(QuantityError):
            parse_cpu_request(text)


@pytest.mark.parametrize(
    ("text", "ok"), [("1Mi", True), ("1048575", False), ("0", False), ("64Ti", True), ("65Ti", False)]
)
def test_memory_request_bounds(text: str, ok: bool) -> None:
    if ok:
        assert MIN_MEMORY <= parse_memory_request(text) <= MAX_MEMORY
    else:
        with pytest.raises(QuantityError):
            parse_memory_request(text)


def _job(trainers: int, cpu: int, gpu: int = 0, pservers: int = 0, lo: int = 0) -> JobRequest:
    return JobRequest(
        key="u/j", user="u", priority=0, submitted_at=0.0, pservers=pservers, pserver=Resources(1000, GI),
        trainers=trainers, trainer=Resources(cpu, GI, gpu), min_trainers=lo,
    )  # fmt: skip


NODES = (
    NodeState("a", Resources(8000, 16 * GI, 2), free_gpus=(0, 1)),
    NodeState("b", Resources(8000, 16 * GI, 0)),
)


@pytest.mark.parametrize(
    ("job", "found"),
    [
        (_job(1, 8000), None),
        (_job(2, 8000), None),  # one per node
        (_job(3, 8000), ("trainer", "3 trainers (cpu 8, memory 1Gi each) do not fit")),
        (_job(3, 8000, lo=2), None),  # elastic: its minimum fits
        (_job(1, 9000), ("trainer", "a trainer needs cpu 9, memory 1Gi, but the largest node has cpu 8")),
        (_job(1, 1000, gpu=3), ("trainer", "gpu 3, but the largest node has cpu 8, memory 16Gi, gpu 2")),
        (_job(2, 1000, gpu=2), ("trainer", "2 nodes, cpu 16, memory 32Gi, gpu 2 in all")),  # GPUs on one node
        (
            _job(1, 7500, pservers=9),
            ("trainer", "9 pservers (cpu 1, memory 1Gi each) and 1 trainer (cpu 7500m, memory 1Gi) do"),
        ),
    ],
)
def test_never_placeable(job: JobRequest, found: tuple[str, str] | None) -> None:
    got = never_placeable(NODES, job)
    if found is None:
        assert got is None
    else:
        assert got is not None and got[0] == found[0] and found[1] in got[1], got
