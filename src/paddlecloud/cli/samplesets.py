"""SampleSet commands: ``sampleset create|sync|warmup|clear|rmr|delete|jobs``, ``get samplesets``,
``describe sampleset NAME`` (``cli/jobs.py`` hands it here).

Each command parses options, calls one SDK method (``Client.create_sampleset``, ``sampleset_job``,
...) and renders the answer; SampleJobs are shown with their phase and a Rich progress bar. The
server decides everything (names, paths, quota, tenancy) and its refusals end as one ``error:``
line (``cli/main.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import click

from paddlecloud.api.samplesets import SampleJobView, SampleSetPhase, SampleSetView
from paddlecloud.cli.output import FORMATS, age, console, emit, format_table
from paddlecloud.client import Client
from paddlecloud.core.quantity import human_memory

__all__ = ["describe_sampleset", "get_samplesets", "sampleset"]


def _when(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


def _size(n: int) -> str:
    return human_memory(n) if n else "0"


def samplesets_text(items: Sequence[SampleSetView], wide: bool = False, show_owner: bool = False) -> str:
    headers = ["NAME", "PHASE", "FILES", "SIZE", "CACHED", "NODES", "AGE", "MESSAGE"]
    if show_owner:
        headers.insert(0, "OWNER")
    if wide:
        headers.insert(-1, "SOURCE")
    rows = []
    for v in items:
        mounted = sum(1 for n in v.nodes if n.mounted)
        phase = f"{v.phase} (deleting)" if v.deleting else str(v.phase)
        nodes = f"{mounted}/{len(v.nodes)}"
        row = [v.name, phase, str(v.files), _size(v.bytes), _size(v.cached_bytes), nodes,
               age(_when(v.created_at)), v.message]  # fmt: skip
        if show_owner:
            row.insert(0, v.owner)
        if wide:
            row.insert(-1, v.source)
        rows.append(row)
    return format_table(headers, rows)


def print_jobs(jobs: Sequence[SampleJobView]) -> None:
    """SampleJobs with their phase and a progress bar (Rich)."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for h in ("ID", "KIND", "PATH", "PHASE", "PROGRESS", "", "MESSAGE"):
        table.add_column(h, no_wrap=h != "MESSAGE")
    for j in jobs:
        total = j.total or (1 if j.phase in ("Succeeded", "Failed") else 0)
        done = j.done if j.total else total if j.phase == "Succeeded" else 0
        bar = ProgressBar(total=total or None, completed=done, width=24)
        pct = f"{100 * done // total}%" if total else "-"
        table.add_row(str(j.id), j.kind, j.path or "-", str(j.phase), bar, pct, j.message)
    console().print(table)


@click.group()
def sampleset() -> None:
    """Data sets cached near the trainers (JuiceFS): create, sync, warm up, clear, remove."""


@sampleset.command("create")
@click.argument("name")
@click.option("--source", required=True, help="the PFS folder it holds (/pfs/... or pfs:REL)")
@click.option("--cache-size", help="per-node cache cap (10Gi); default the source's size x 1.1, min 64Mi")
@click.option("--node", "nodes", multiple=True, help="cache on this node (repeatable; default: every node)")
@click.option("--wait", is_flag=True, help="wait until it is Ready (exit 1 if it fails)")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="--wait: seconds at most")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def create(
    name: str,
    source: str,
    cache_size: str | None,
    nodes: tuple[str, ...],
    wait: bool,
    timeout: float,
    fmt: str,
) -> None:
    """Create SampleSet NAME from a PFS folder; it syncs and warms up by itself."""
    client = Client()
    view = client.create_sampleset(name, source, cache_size=cache_size, nodes=list(nodes) or None)
    if wait:
        view = client.wait_sampleset(name, timeout=timeout)
    if fmt in ("json", "yaml"):
        emit(view, fmt)
    else:
        click.echo(f"sampleset {view.name} {'is' if wait else 'created,'} {view.phase}"
                   + (f": {view.message}" if view.message else ""))  # fmt: skip
    if wait and view.phase != SampleSetPhase.READY:
        raise SystemExit(1)


def _job_command(kind: str, help_text: str, path_arg: str | None = None) -> click.Command:
    """``sampleset KIND NAME [PATH]``: queue one SampleJob and say so."""

    def run(name: str, path: str = "") -> None:
        job = Client().sampleset_job(name, kind, path or "")
        where = f" {job.path}" if job.path else ""
        click.echo(
            f"sampleset {name}: {kind}{where} queued as job {job.id} (see: paddlecloud sampleset jobs {name})"
        )

    params: list[click.Parameter] = [click.Argument(["name"])]
    if path_arg is not None:
        optional = {} if path_arg == "required" else {"required": False, "default": ""}
        params.append(click.Argument(["path"], **optional))  # type: ignore[arg-type]
    return click.Command(kind, callback=run, params=params, help=help_text)


sampleset.add_command(_job_command("sync", "Copy the source folder into NAME again (new and changed files)."))
sampleset.add_command(
    _job_command("warmup", "Fill every node's cache with NAME's data (or only PATH).", "optional")
)
sampleset.add_command(_job_command("clear", "Empty every node's cache of NAME (the data stays)."))
sampleset.add_command(
    _job_command("rmr", "Remove PATH (relative to NAME's root) from the SampleSet.", "required")
)


@sampleset.command("delete")
@click.argument("name")
def delete(name: str) -> None:
    """Unmount NAME everywhere and remove it with its caches."""
    Client().delete_sampleset(name)
    click.echo(f"sampleset {name} is being deleted (unmounting and removing its caches)")


@sampleset.command("jobs")
@click.argument("name")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def jobs(name: str, fmt: str) -> None:
    """NAME's SampleJobs (sync, warmup, clear, rmr), latest first, with their progress."""
    items = Client().sample_jobs(name)
    if fmt in ("json", "yaml"):
        emit(items, fmt)
    else:
        print_jobs(items)


@click.command("samplesets")
@click.option("--all-users", is_flag=True, help="admins: every user's SampleSets")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def get_samplesets(all_users: bool, fmt: str) -> None:
    """List your SampleSets: phase, files, size, bytes cached, nodes mounted."""
    items = Client().samplesets(all_users=all_users)
    if fmt in ("json", "yaml"):
        emit(items, fmt)
    else:
        click.echo(samplesets_text(items, wide=fmt == "wide", show_owner=all_users))


def describe_sampleset(name: str, fmt: str) -> None:
    """``describe sampleset NAME``: the SampleSet, its per-node caches and its SampleJobs."""
    v = Client().sampleset(name)
    if fmt in ("json", "yaml"):
        emit(v, fmt)
        return
    from rich.markup import escape

    out = console()
    out.print(f"[bold]Name:[/bold]       {v.name}   [bold]Owner:[/bold] {v.owner}")
    out.print(
        f"[bold]Phase:[/bold]      {v.phase}{' (deleting)' if v.deleting else ''}   {escape(v.message)}"
    )
    out.print(f"[bold]Source:[/bold]     {escape(v.source)}")
    out.print(f"[bold]Data:[/bold]       {v.files} files, {_size(v.bytes)}")
    out.print(
        f"[bold]Cache:[/bold]      {_size(v.cached_bytes)} cached in all, "
        f"at most {_size(v.cache_size)} per node"
    )
    out.print(f"[bold]Created:[/bold]    {age(_when(v.created_at))} ago")
    out.print("\n[bold]Nodes[/bold]")
    reads = {True: "local copy", False: "mount"}
    rows = [
        [n.node, "yes" if n.mounted else "no", _size(n.cached_bytes), reads[n.local_copy], n.message]
        for n in v.nodes
    ]
    click.echo(format_table(["NODE", "MOUNTED", "CACHED", "READS", "MESSAGE"], rows))
    out.print("\n[bold]SampleJobs[/bold]")
    print_jobs(v.jobs)
