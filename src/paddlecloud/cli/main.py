"""The ``paddlecloud`` command: a Click group and one error boundary.

Every failure ends as one line on stderr (``error: ...``) and a non-zero exit: 1 for an error the
platform reported, 2 for bad command-line usage, 3 when the server cannot be reached, 130 on Ctrl-C.
Never a traceback.
"""

from __future__ import annotations

import os
import sys

import click

from paddlecloud.api.errors import PaddleCloudError, ServerUnreachable
from paddlecloud.cli.account import admin, config, login
from paddlecloud.cli.jobs import describe, get, kill, logs, submit
from paddlecloud.cli.pfs import pfs
from paddlecloud.cli.sim import sim
from paddlecloud.cli.system import down, operator, up, version
from paddlecloud.cli.tasks import get_tasks

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """PaddleCloud: run distributed training jobs (parameter servers + trainers, collective, PyTorch)."""


COMMANDS = (up, down, operator, submit, get, describe, logs, kill, pfs, login, config, admin, sim, version)
for command in COMMANDS:
    cli.add_command(command)
get.add_command(get_tasks)


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="paddlecloud", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
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
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug: still one line, unless PADDLECLOUD_DEBUG asks for the traceback
        if os.environ.get("PADDLECLOUD_DEBUG"):
            raise
        click.echo(f"error: internal error ({type(exc).__name__}: {exc}); rerun with PADDLECLOUD_DEBUG=1 "
                   "for the traceback and please report it", err=True)  # fmt: skip
        sys.exit(1)
