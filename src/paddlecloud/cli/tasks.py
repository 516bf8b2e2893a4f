"""Task master commands: ``get tasks JOB``, the summary ``describe`` prints, and ``submit``'s task options.

Each parses options, calls the SDK (``client.tasks``) and renders; no decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from paddlecloud.api.tasks import MAX_PAGE, PAGE, TaskSummary, TaskView
from paddlecloud.cli.output import FORMATS, emit, print_table
from paddlecloud.client import Client
from paddlecloud.core.quantity import human_bytes

__all__ = ["get_tasks", "summary_line", "task_options", "task_spec"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option("--tasks-from-input", is_flag=True,
                 help="hand the --input's files to the trainers as tasks (the data task master)"),
    click.option("--task", "task_items", multiple=True, metavar="TEXT",
                 help="an explicit task (repeatable) instead of the input's files"),
    click.option("--task-pattern", metavar="GLOB", help="only the input's files matching this (default *)"),
    click.option("--task-chunk-size", metavar="SIZE", help="split files larger than SIZE (64Mi) into ranges"),
    click.option("--passes", type=int, help="passes (epochs) over every task (default 1)"),
    click.option("--task-timeout", type=float, help="seconds a lease lasts unless renewed (default 30)"),
    click.option("--task-max-failures", type=int, help="failures before a task fails for good (default 3)"),
]  # fmt: skip
_TUNING = {
    "task_pattern": "pattern",
    "task_chunk_size": "chunk_size",
    "passes": "num_passes",
    "task_timeout": "lease_timeout",
    "task_max_failures": "max_failures",
}


def task_options(fn: F) -> F:
    """``submit``'s task master options (read back with :func:`task_spec`)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def task_spec(opts: dict[str, Any]) -> dict[str, Any] | None:
    """The JobSpec ``tasks`` field from the options (removed from ``opts``); None: no task master."""
    from_input, items = opts.pop("tasks_from_input"), opts.pop("task_items")
    tuning = {field: opts.pop(opt) for opt, field in _TUNING.items()}
    tuning = {k: v for k, v in tuning.items() if v is not None}
    if from_input and items:
        raise click.UsageError("--tasks-from-input and --task exclude each other")
    if not (from_input or items):
        if tuning:
            raise click.UsageError("task options need --tasks-from-input or --task")
        return None
    return {**({"items": list(items)} if items else {}), **tuning}


def _where(t: TaskView) -> str:
    path = t.path or "(the input)"
    if t.kind == "range" and t.length is not None:
        return f"{path} [{human_bytes(t.offset)}+{human_bytes(t.length)}]"
    return path


def summary_line(s: TaskSummary) -> str:
    state = "finished" if s.finished else f"pass {s.pass_no + 1}/{s.num_passes}"
    return (
        f"{state}: {s.total} tasks, {s.done} done, {s.leased} leased, {s.todo} todo, {s.failed} failed "
        f"(lease {s.lease_timeout:g}s, {s.max_failures} failures allowed)"
    )


def _expires(t: TaskView, now: datetime) -> str:
    if t.expires_at is None:
        return "-"
    return f"{(t.expires_at - now).total_seconds():.0f}s"


@click.command("tasks")
@click.argument("job")
@click.option("-u", "--user", metavar="NAME", help="admins: another user's job")
@click.option("--state", type=click.Choice(["todo", "leased", "done", "failed"]), help="only these")
@click.option(
    "--limit",
    type=click.IntRange(0, MAX_PAGE),
    metavar="N",
    help="only the first N tasks (default: all, page by page)",
)
@click.option("--after", type=click.IntRange(0), metavar="INDEX", help="start after this task index")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def get_tasks(
    job: str, user: str | None, state: str | None, limit: int | None, after: int | None, fmt: str
) -> None:
    """A job's data tasks: pass, who holds which lease, done and failed tasks."""
    client = Client()
    if limit is None and after is None:
        tasks = client.tasks.all(job, user=user, state=state)
    else:
        tasks = client.tasks.status(
            job, user=user, state=state, limit=PAGE if limit is None else limit, after=after
        )
    if fmt in ("json", "yaml"):
        emit(tasks, fmt)
        return
    click.echo(summary_line(tasks.summary))
    now = datetime.now(UTC)
    headers = ["INDEX", "TASK", "STATE", "HOLDER", "EXPIRES", "FAILURES", "LEASES", "DONE"]
    if fmt == "wide":
        headers.append("ERROR")
    rows = []
    for t in tasks.items:
        row = [str(t.index), _where(t), str(t.state), t.holder or "-", _expires(t, now),
               str(t.failures), str(t.leases), str(t.done_passes)]  # fmt: skip
        if fmt == "wide":
            row.append(t.error or "-")
        rows.append(row)
    if rows:
        print_table(headers, rows)
    if tasks.next_after is not None:
        click.echo(f"(more tasks follow: paddlecloud get tasks {job} --after {tasks.next_after})", err=True)
