"""``paddlecloud image``: your container-registry logins, which your jobs' pulls use.

image login REGISTRY -u USER [--password-stdin]   stored on the server, encrypted; the password
                                                  is read hidden from the terminal or from stdin
image logout REGISTRY
image logins [-o json]                             registry, user, when (never a password)
"""

from __future__ import annotations

import sys

import click

from paddlecloud.cli.output import FORMATS, age, emit, format_table
from paddlecloud.client import Client

__all__ = ["image"]


@click.group()
def image() -> None:
    """Container images: the registries your jobs pull from (submit --image)."""


@image.command("login")
@click.argument("registry")
@click.option("--username", "-u", required=True, help="your user on the registry")
@click.option("--password-stdin", is_flag=True, help="read the password from standard input")
def login(registry: str, username: str, password_stdin: bool) -> None:
    """Store your credentials for REGISTRY (host[:port], as in 127.0.0.1:5000/train:1)."""
    if password_stdin:
        password = sys.stdin.read(4097).rstrip("\r\n")
    elif sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True)
    else:
        raise click.UsageError(
            "no terminal to ask the password on: give it on standard input with --password-stdin"
        )
    if not password:
        raise click.UsageError("the password is empty")
    Client().registry_login(registry, username, password)
    click.echo(f"logged in to {registry} as {username}: your jobs' pulls from it use these credentials")


@image.command("logout")
@click.argument("registry")
def logout(registry: str) -> None:
    """Forget your credentials for REGISTRY."""
    Client().registry_logout(registry)
    click.echo(f"logged out of {registry}")


@image.command("logins")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table", show_default=True)
def logins(fmt: str) -> None:
    """The registries you are logged in to."""
    found = Client().registry_logins()
    if fmt != "table":
        emit(found, fmt)
        return
    rows = [[x.registry, x.username, age(x.created_at)] for x in found]
    click.echo(format_table(["REGISTRY", "USER", "AGE"], rows) if rows else "no registry logins")
