"""Render API views for people (aligned text tables) and programs (``-o json`` / ``-o yaml``).

JSON and YAML are the API models' own JSON form (``docs/cli.md`` documents the job schema); tables
are for reading and may change. Imported by every command, so it imports no wire model and no Rich
at start-up: Rich when something is drawn (:func:`console`), the job models only for type checking.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import click

from paddlecloud.core.durations import human_duration
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

    from paddlecloud.api.files import StorageUsage
    from paddlecloud.api.models import JobView, RoleStatus

__all__ = [
    "FORMATS",
    "age",
    "console",
    "emit",
    "estimate_line",
    "eta_cell",
    "format_table",
    "jobs_text",
    "print_table",
    "role_cell",
    "storage_parts",
]


class Wired(Protocol):
    """An answer of ``api.files`` (a dataclass, not a pydantic model): its JSON is ``to_wire()``."""

    def to_wire(self) -> dict[str, Any]: ...


FORMATS = click.Choice(["table", "wide", "json", "yaml"])


def console(stderr: bool = False) -> Console:
    from rich.console import Console  # imported on use: most commands never need it

    stream = sys.stderr if stderr else sys.stdout
    # Piped output is not folded at 80 columns: scripts and logs get whole lines.
    width = None if stream.isatty() else 250
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def emit(data: BaseModel | Wired | Sequence[BaseModel | Wired] | dict[str, Any], fmt: str) -> None:
    """Machine output: a model (or an answer of ``api.files``), or ``{"items": [...]}`` for a list."""
    if isinstance(data, dict):
        obj: Any = data
    elif isinstance(data, Sequence):
        obj = {"items": [_jsonable(d) for d in data]}
    else:
        obj = _jsonable(data)
    if fmt == "json":
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))


def _jsonable(data: BaseModel | Wired) -> Any:
    """A pydantic model's JSON form, or an ``api.files`` answer's (no pydantic on the ``pfs`` path)."""
    if hasattr(data, "to_wire"):
        return data.to_wire()
    return data.model_dump(mode="json")


def age(t: datetime | None, now: datetime | None = None) -> str:
    if t is None:
        return "-"
    secs = int(((now or datetime.now(UTC)) - t).total_seconds())
    if secs < 120:
        return f"{max(secs, 0)}s"
    if secs < 7200:
        return f"{secs // 60}m"
    if secs < 172800:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def role_cell(r: RoleStatus) -> str:
    if r.desired == 0:
        return "-"
    done = f" ({r.succeeded} done)" if r.succeeded else ""
    failed = f" ({r.failed} failed)" if r.failed else ""
    return f"{r.running}/{r.desired}{done}{failed}"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """kubectl-style aligned columns, one string (no final newline). Plain string formatting on
    purpose: a Rich ``Table`` takes 0.34 s to lay out 1,000 rows here, more than the whole
    ``get jobs`` budget (bench/list_jobs.py)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    last = len(headers) - 1
    return "\n".join(
        "   ".join(c if i == last else c.ljust(widths[i]) for i, c in enumerate(r)) for r in [headers, *rows]
    )


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    sys.stdout.write(format_table(headers, rows) + "\n")


def _until(t: datetime | None, horizon: datetime, now: datetime) -> str:
    if t is None:
        return f">{human_duration((horizon - now).total_seconds())}"
    secs = (t - now).total_seconds()
    return "now" if secs <= 0 else f"in {human_duration(secs)}"


def eta_cell(j: JobView, now: datetime | None = None) -> str:
    """``get jobs``' ETA: a queued job's estimated start, a started one's end ("starts in 12m",
    "ends >3d": beyond the forecast); "?" after it when it rests on a duration nobody gave."""
    e = j.estimate
    if e is None or j.phase in TERMINAL_PHASES:
        return "-"
    now = now or datetime.now(UTC)
    if j.phase == JobPhase.QUEUED:
        text, basis = f"starts {_until(e.start, e.horizon, now)}", e.start_basis
    else:
        text, basis = f"ends {_until(e.end, e.horizon, now)}", e.end_basis
    return text + ("?" if basis == "unknown" else "")


def estimate_line(d: JobView) -> str | None:
    """``describe``'s Estimate line: start and end with how sure each is."""
    e = d.estimate
    if e is None or d.phase in TERMINAL_PHASES:
        return None

    def when(t: datetime | None, basis: str | None) -> str:
        at = f"{t:%Y-%m-%d %H:%M}Z" if t is not None else f"after {e.horizon:%Y-%m-%d %H:%M}Z"
        return f"{at} ({basis or 'certain'})"

    start = f"start {when(e.start, e.start_basis)}, " if d.phase == JobPhase.QUEUED else ""
    return f"{start}end {when(e.end, e.end_basis)}   (forecast of {e.made_at:%H:%M:%S}Z)"


def jobs_text(jobs: list[JobView], wide: bool, show_user: bool = False) -> str:
    """The ``get jobs`` table (or the line saying there is none)."""
    now = datetime.now(UTC)
    headers = ["NAME", "PHASE", "TRAINERS", "PSERVERS", "AGE", "ETA", "REASON"]
    show_user = show_user or wide
    if show_user:
        headers[1:1] = ["USER"]
    if wide:
        headers += ["FRAMEWORK", "STARTED", "FINISHED", "MESSAGE"]
    rows = []
    for j in jobs:
        reason = j.reason if wide else (f"{j.reason}: {j.message}" if j.phase == "Queued" else j.reason)
        row = [
            j.name,
            str(j.phase),
            role_cell(j.trainers),
            role_cell(j.pservers),
            age(j.submitted_at, now),
            eta_cell(j, now),
            reason,
        ]
        if show_user:
            row[1:1] = [j.user]
        if wide:
            row += [str(j.framework), age(j.started_at, now), age(j.finished_at, now), j.message]
        rows.append(row)
    if not rows:
        return "No jobs. (finished ones: paddlecloud get jobs -a)"
    return format_table(headers, rows)


def storage_parts(u: StorageUsage) -> str:
    """What a user's storage use is made of (docs/pfs.md "What counts"), one line."""
    from paddlecloud.core.quantity import human_bytes

    return (
        f"storage used: {human_bytes(u.pfs)} in PFS, {human_bytes(u.jobs)} in jobs' folders (logs, "
        f"the workers' copies and /tmp), {human_bytes(u.samplesets)} in SampleSet caches"
    )
