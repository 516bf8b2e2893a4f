"""Where a job's workers run, as the scheduler decided: the one codec of ``JobRow.placement``.

    scheduler (WorkerPlacement values) ──place(row, workers)──▶ row.placement (a JSON list of
        {"role", "index", "node", "gpus"})                     ──placed(row)──▶ WorkerPlacement

Every other module works on the typed values: ``placed(row)`` (all of them), ``trainers_of(row)``,
``trainer_names(row)``; ``place(row, ...)`` is the only writer (``None``: the job holds nothing,
queued again). A stored placement never names the rendezvous store: that is the job's one pserver
placement, which ``Context.workers_placed`` names as the worker the backend runs.
``tests/unit/test_phase_writes.py`` reads the source for any other write of ``.placement``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.store.tables import JobRow

__all__ = ["count_trainers", "place", "placed", "trainer_names", "trainers_of"]


def placed(row: JobRow) -> tuple[WorkerPlacement, ...]:
    """Every worker the job holds a place for, in stored order."""
    return decode(row.placement)


def decode(stored: Sequence[dict[str, Any]] | None) -> tuple[WorkerPlacement, ...]:
    """A stored placement (the column's JSON, also as a query reads it) as typed values."""
    return tuple(
        WorkerPlacement(p["role"], int(p["index"]), p["node"], tuple(p.get("gpus", ()))) for p in stored or ()
    )


def trainers_of(row: JobRow) -> tuple[WorkerPlacement, ...]:
    """The trainers the job has now (a resize changes them; retired ones are not among them)."""
    return tuple(p for p in placed(row) if p.role == "trainer")


def trainer_names(row: JobRow) -> set[str]:
    return {f"trainer-{p.index}" for p in trainers_of(row)}


def count_trainers(stored: Sequence[dict[str, Any]] | None) -> int:
    """How many trainers a stored placement holds (a query's column: no row at hand)."""
    return sum(1 for p in decode(stored) if p.role == "trainer")


def place(row: JobRow, workers: Iterable[WorkerPlacement] | None) -> None:
    """Store ``workers`` as the job's placement (``None``: it holds nothing)."""
    if workers is None:
        row.placement = None
        return
    row.placement = [
        {"role": p.role, "index": p.index, "node": p.node, "gpus": list(p.gpus)} for p in workers
    ]
