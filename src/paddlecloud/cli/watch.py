"""``--watch``: a listing polled every few seconds and shown again when it changes, until Ctrl-C.

    fetch() ──every interval──▶ items ──┬─ a terminal:  the table redrawn in place (Rich Live)
                                        ├─ -o json/yaml: one document per change (JSON: one line each;
                                        │                YAML: a ``---`` separated stream)
                                        └─ piped table:  the whole table again per change

A change is a change of the items' JSON (their ages do not count: they change every second). Ctrl-C
ends the watch with exit 0, also one pressed while the command is still starting (``interrupt.py``);
an error of the server ends it as any command's error does.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import click
from pydantic import BaseModel

from paddlecloud.cli import interrupt
from paddlecloud.cli.output import console

__all__ = ["INTERVAL", "watch", "watch_options"]

M = TypeVar("M", bound=BaseModel)

#: ``--interval``: seconds between polls, bounded so a watch never hammers the server
INTERVAL = click.FloatRange(0.5, 60)


def watch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--interval",
        type=INTERVAL,
        default=2.0,
        show_default=True,
        help="--watch: seconds between polls (0.5-60)",
    )(f)
    return click.option(
        "-w",
        "--watch",
        is_flag=True,
        callback=_ends_with_ctrl_c,
        help="keep watching: show it again whenever it changes (Ctrl-C stops; with -o json one "
        "document per change, one per line)",
    )(f)


def _ends_with_ctrl_c(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """``--watch`` given: Ctrl-C is this command's normal end (exit 0), from its start on."""
    if value:
        interrupt.ends_cleanly()
    return value


def watch(
    fetch: Callable[[], Sequence[M]],
    table: Callable[[Sequence[M]], str],
    fmt: str,
    interval: float,
    title: str,
) -> None:
    """Poll ``fetch`` until Ctrl-C, showing ``table`` of it (or its ``fmt`` documents) on change."""
    out = console()
    try:
        if fmt in ("json", "yaml"):
            _documents(fetch, fmt, interval)
        elif out.is_terminal:
            _live(fetch, table, interval, title)
        else:
            _reprinted(fetch, table, interval)
    except KeyboardInterrupt:
        return


def _key(items: Sequence[BaseModel]) -> str:
    return json.dumps([i.model_dump(mode="json") for i in items], sort_keys=True)


def _documents(fetch: Callable[[], Sequence[M]], fmt: str, interval: float) -> None:
    last = None
    while True:
        items = [i.model_dump(mode="json") for i in fetch()]
        key = json.dumps(items, sort_keys=True)
        if key != last:
            doc = {"items": items}
            if fmt == "json":
                sys.stdout.write(json.dumps(doc) + "\n")
            else:
                import yaml

                sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, explicit_start=True))
            sys.stdout.flush()
            last = key
        time.sleep(interval)


def _reprinted(
    fetch: Callable[[], Sequence[M]], table: Callable[[Sequence[M]], str], interval: float
) -> None:
    last = None
    while True:
        items = fetch()
        key = _key(items)
        if key != last:
            sys.stdout.write(("\n" if last is not None else "") + table(items) + "\n")
            sys.stdout.flush()
            last = key
        time.sleep(interval)


def _live(
    fetch: Callable[[], Sequence[M]],
    table: Callable[[Sequence[M]], str],
    interval: float,
    title: str,
) -> None:
    from rich.live import Live
    from rich.text import Text

    with Live(console=console(), auto_refresh=False, transient=False) as live:
        while True:
            items = fetch()
            now = f"{datetime.now():%H:%M:%S}"
            header = Text(f"every {interval:g}s: {title}   {now}   (Ctrl-C stops)\n", "dim")
            live.update(header + Text(table(items)), refresh=True)
            time.sleep(interval)
