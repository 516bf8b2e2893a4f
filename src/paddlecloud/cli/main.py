"""The ``paddlecloud`` command: a Click group and one error boundary.

Every failure ends as one line on stderr (``error: ...``) and a non-zero exit: 1 for an error the
platform reported, 2 for bad command-line usage, 3 when the server cannot be reached, 130 on Ctrl-C
(0 for a ``--watch``, whose normal end it is, also when it comes while the command starts:
``interrupt.py``). Never a traceback.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import sys
from typing import Any

import click

from paddlecloud.api.errors import PaddleCloudError, ServerUnreachable
from paddlecloud.cli import interrupt

__all__ = ["cli", "main", "skip_async_imports"]

#: command name -> (module, attribute): a command's module is imported only when it runs (or help
#: lists it), so ``paddlecloud pfs cp`` does not pay for the imports of ``up`` or ``sim``
COMMANDS = {
    "up": ("system", "up"),
    "down": ("system", "down"),
    "operator": ("system", "operator"),
    "submit": ("jobs", "submit"),
    "get": ("jobs", "get"),
    "describe": ("jobs", "describe"),
    "logs": ("jobs", "logs"),
    "kill": ("jobs", "kill"),
    "pfs": ("pfs", "pfs"),
    "sampleset": ("samplesets", "sampleset"),
    "image": ("images", "image"),
    "login": ("account", "login"),
    "config": ("account", "config"),
    "admin": ("account", "admin"),
    "sim": ("sim", "sim"),
    "version": ("system", "version"),
}
#: commands that serve until stopped: their import-time garbage is collected, not frozen, and they
#: keep the async libraries (the server runs on asyncio and anyio)
SERVERS = frozenset({"up", "operator"})
#: what httpcore imports, when it can, only for async callers (its locks ask which event loop runs
#: them: trio's or anyio's): ~0.1-0.25 s of a command here where trio is installed
ASYNC_ONLY = ("trio", "anyio")
#: whether this process is the `paddlecloud` program (main() with no argv), not a test calling
#: ``main([...])`` or ``cli``: only the program freezes its objects and skips the async imports
_PROGRAM = {"on": False}
#: the commands whose callbacks let a held Ctrl-C go first (``_released_first``)
_RELEASING: set[click.Command] = set()


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented lazy-loading
    pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(f"paddlecloud.cli.{module}"), attr)
        if cmd_name == "get" and isinstance(command, click.Group) and "tasks" not in command.commands:
            from paddlecloud.cli.samplesets import get_samplesets
            from paddlecloud.cli.tasks import get_tasks

            command.add_command(get_tasks)
            command.add_command(get_samplesets)
        if _PROGRAM["on"]:
            _released_first(command)
        # What is alive now is what the imports made (~50k objects: modules, classes, pydantic
        # schemas) and lives until the process exits. Frozen, the collector stops scanning it: in
        # every collection of the oldest generation while the command runs and in the one the
        # interpreter makes at exit (0.06-0.09 s of a `pfs cp` here). Objects made later (httpx's
        # request cycles, which pin sent chunks until collected) are collected as before; the few
        # import-time cycles that are garbage already stay until exit, when the OS takes the memory
        # back. Exit stays the normal one: atexit handlers, buffered output and temporary files are
        # finished as usual (no os._exit). A server (`up`, `operator`) lives on: not frozen; nor a
        # test process running commands in-process (its fixtures' cycles must stay collectable).
        if _PROGRAM["on"] and cmd_name not in SERVERS:
            gc.freeze()
        return command


def _released_first(command: click.Command) -> None:
    """Each command under ``command`` that runs code of its own (not a group) lets the Ctrl-C held
    while the program started go as that code begins (``interrupt.release``): its options parsed, so
    a watch's ends it with exit 0."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _released_first(sub)
        return
    callback = command.callback
    if callback is None or command in _RELEASING:
        return

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        interrupt.release()
        return callback(*args, **kwargs)

    command.callback = run
    _RELEASING.add(command)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """PaddleCloud: run distributed training jobs (parameter servers + trainers, collective, PyTorch)."""


def skip_async_imports(command: str | None) -> None:
    """In the ``paddlecloud`` program running a client command, mark trio and anyio absent, so
    httpcore's ``try: import trio`` / ``try: import anyio`` take their not-installed path: the SDK's
    HTTP is synchronous and never asks for an event loop (the e2e tests run every command so). Only
    for the program (tests call ``main([...])`` or ``cli`` inside a process that may need anyio
    later) and not for a server command; a module already imported is left alone."""
    if command is None or command not in COMMANDS or command in SERVERS:
        return
    for name in ASYNC_ONLY:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    interrupt.reset()
    if argv is None:  # the `paddlecloud` program itself
        _PROGRAM["on"] = True
        interrupt.hold()  # a Ctrl-C while the command starts: raised when its code begins
        skip_async_imports(sys.argv[1] if len(sys.argv) > 1 else None)
    try:
        cli.main(args=argv, prog_name="paddlecloud", standalone_mode=False)
    except click.exceptions.Abort:  # click's for KeyboardInterrupt
        sys.exit(interrupt.exit_code())
    except click.exceptions.NoArgsIsHelpError as exc:  # `paddlecloud`, `paddlecloud get`: show help
        click.echo(exc.ctx.get_help() if exc.ctx is not None else "see: paddlecloud --help")
        sys.exit(0)
    except click.ClickException as exc:
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see: {exc.ctx.command_path} --help)"
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except ServerUnreachable as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(3)
    except PaddleCloudError as exc:
        field = f" [{exc.field}]" if exc.field and exc.field not in exc.message else ""
        click.echo(f"error: {exc.message}{field}", err=True)
        sys.exit(1)
    except TimeoutError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(interrupt.exit_code())
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug: still one line, unless PADDLECLOUD_DEBUG asks for the traceback
        if os.environ.get("PADDLECLOUD_DEBUG"):
            raise
        click.echo(f"error: internal error ({type(exc).__name__}: {exc}); rerun with PADDLECLOUD_DEBUG=1 "
                   "for the traceback and please report it", err=True)  # fmt: skip
        sys.exit(1)
    finally:
        interrupt.drop()  # a Ctrl-C held for a command that never began (help, a usage error)
