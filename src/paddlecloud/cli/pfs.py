"""``paddlecloud pfs``: cp, ls, rm, mkdir, mv, stat, du on the cluster file system.

A remote path is ``/pfs/<datacenter>/home/<user>/...`` (or ``/pfs/<dc>/public/...``) or ``pfs:REL``
(relative to your home); anything else is a local path. The transfer work is the SDK's
(``Client.pfs``); this module only draws the progress bar and the listings. It takes the SDK's file
service alone (``Pfs.connect()``, not ``Client``): a ``pfs`` command imports none of the job models,
and Rich only to draw a progress bar (not with ``-q``); ``tests/unit/test_cli_imports.py`` checks.
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime

import click

from paddlecloud.cli.output import FORMATS, emit, print_table, storage_parts
from paddlecloud.client.pfs import CopyPlan, Pfs, TransferStats
from paddlecloud.core.quantity import human_bytes

__all__ = ["pfs"]


@click.group()
def pfs() -> None:
    """The cluster file system: /pfs/<datacenter>/home/<user>/... or pfs:REL."""


@pfs.command("cp")
@click.argument("paths", nargs=-1, required=True)
@click.option("-r", "--recursive", is_flag=True, help="copy directories")
@click.option("-f", "--force", is_flag=True, help="overwrite existing files")
@click.option(
    "-j", "--parallel", type=click.IntRange(1, 32), default=4, show_default=True, help="transfers in flight"
)
@click.option("-q", "--quiet", is_flag=True, help="no progress bar")
def cp(paths: tuple[str, ...], recursive: bool, force: bool, parallel: int, quiet: bool) -> None:
    """Copy SRC... to DST, local ↔ PFS, as cp does: into DST as DST/<name> when DST is a directory
    or ends in /, else as DST (missing parents are created). Interrupted copies resume where they
    stopped."""
    if len(paths) < 2:
        raise click.UsageError("cp needs a source and a destination")
    fs = Pfs.connect()
    fs.parallel = parallel
    srcs, dst = list(paths[:-1]), paths[-1]
    plan = fs.plan(srcs, dst, recursive)  # every mistake is reported before the bar is drawn
    t0 = time.perf_counter()
    if quiet:
        stats = fs.cp(srcs, dst, recursive=recursive, overwrite=force, plan=plan)
    else:
        stats = _cp_with_bar(fs, plan, srcs, dst, recursive=recursive, overwrite=force)
    dt = time.perf_counter() - t0
    moved = stats.bytes_sent + stats.bytes_skipped
    resumed = f", {human_bytes(stats.bytes_skipped)} already there" if stats.bytes_skipped else ""
    click.echo(
        f"copied {stats.files} file(s), {human_bytes(moved)} in {dt:.1f} s "
        f"({human_bytes(int(moved / dt)) if dt > 0 else '-'}/s); "
        f"sent {human_bytes(stats.bytes_sent)}{resumed}",
        err=True,
    )


def _cp_with_bar(
    fs: Pfs, plan: CopyPlan, srcs: list[str], dst: str, *, recursive: bool, overwrite: bool
) -> TransferStats:
    """``fs.cp`` under a Rich progress bar on stderr (Rich imported here: ``-q`` never pays for it)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("[bold]copy"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("copy", total=plan.total)
        advance = functools.partial(bar.advance, task)
        return fs.cp(srcs, dst, recursive=recursive, overwrite=overwrite, progress=advance, plan=plan)


@pfs.command("ls")
@click.argument("path", required=False)
@click.option("-r", "--recursive", is_flag=True)
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def ls(path: str | None, recursive: bool, fmt: str) -> None:
    """List a directory (default: your home). A glob in the last component filters: pfs:data/*.csv"""
    items = Pfs.connect().ls(path, recursive=recursive)
    if fmt in ("json", "yaml"):
        emit(items, fmt)
        return
    now = datetime.now(UTC)
    rows = []
    for f in items:
        when = (
            f.mtime.strftime("%b %d %H:%M") if (now - f.mtime).days < 180 else f.mtime.strftime("%b %d  %Y")
        )
        name = f.path + ("/" if f.type == "dir" else "")
        rows.append([f.type, human_bytes(f.size) if f.type == "file" else "-", when, name])
    if rows:
        print_table(["TYPE", "SIZE", "MODIFIED", "PATH"], rows)


@pfs.command("stat")
@click.argument("path")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def stat(path: str, fmt: str) -> None:
    info = Pfs.connect().stat(path)
    if fmt in ("json", "yaml"):
        emit(info, fmt)
        return
    click.echo(f"{info.path}\n  type: {info.type}\n  size: {info.size} ({human_bytes(info.size)})\n"
               f"  modified: {info.mtime:%Y-%m-%d %H:%M:%S}Z")  # fmt: skip


@pfs.command("mkdir")
@click.argument("paths", nargs=-1, required=True)
@click.option("-p", "--parents", is_flag=True, help="no error if it exists already")
def mkdir(paths: tuple[str, ...], parents: bool) -> None:
    """Make directories, with any missing parents (pfs:a/b/c makes a and a/b too)."""
    fs = Pfs.connect()
    for p in paths:
        fs.makedirs(p, exist_ok=parents)


@pfs.command("rm")
@click.argument("paths", nargs=-1, required=True)
@click.option("-r", "--recursive", is_flag=True, help="remove directories and their contents")
def rm(paths: tuple[str, ...], recursive: bool) -> None:
    fs = Pfs.connect()
    for p in paths:
        fs.rm(p, recursive=recursive)


@pfs.command("mv")
@click.argument("src")
@click.argument("dst")
def mv(src: str, dst: str) -> None:
    """Move or rename within your own space."""
    Pfs.connect().mv(src, dst)


@pfs.command("du")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def du(fmt: str) -> None:
    """Your storage use and quota."""
    u = Pfs.connect().usage()
    if fmt in ("json", "yaml"):
        emit(u, fmt)
        return
    limit = human_bytes(u.limit) if u.limit is not None else "unlimited"
    click.echo(f"{u.user}: {human_bytes(u.used)} used, {human_bytes(u.reserved)} in uploads, limit {limit}")
    click.echo(storage_parts(u))
