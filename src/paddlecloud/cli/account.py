"""Account commands: ``login``, ``config use|view`` (datacenters in the client config) and ``admin``
(users, their tokens, admin status, deletion).

``login`` checks the token with the server (``whoami``) before it writes anything, so a wrong token
leaves the client config as it was. Tokens are never printed, except the one ``admin create-user`` /
``admin rotate-token`` just issued (shown once: the server keeps only its hash).
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlsplit

import click

from paddlecloud.api.errors import Unauthorized
from paddlecloud.api.models import TokenView
from paddlecloud.cli.output import FORMATS, emit, print_table
from paddlecloud.client import Client, ClientConfig, Datacenter, load_config, save_datacenter, use_datacenter

__all__ = ["admin", "config", "login"]

_FILE = click.Path(exists=True, dir_okay=False, resolve_path=True)


def _datacenter_name(cfg: ClientConfig, endpoint: str, user: str) -> str:
    """The entry a login without ``--datacenter`` writes: the one for this endpoint and user (a
    re-login refreshes it), else ``default`` while that is free, else ``user@host``."""
    for dc in cfg.datacenters.values():
        if dc.endpoint.rstrip("/") == endpoint and dc.username == user:
            return dc.name
    if "default" not in cfg.datacenters:
        return "default"
    return f"{user}@{urlsplit(endpoint).netloc}"


@click.command()
@click.option("--endpoint", required=True, help="the server's URL, e.g. https://paddlecloud.example.com")
@click.option("--user", "username", metavar="NAME", help="the user you expect the token to belong to")
@click.option("--token", help="API token (default: asked for without echo)")
@click.option(
    "--datacenter",
    metavar="NAME",
    help="name of the entry in the client config (default: this endpoint and user's, else 'default')",
)
@click.option("--ca", type=click.Path(exists=True, resolve_path=True), help="CA bundle for the server's TLS")
@click.option("--cert", type=_FILE, help="TLS client certificate (with --key)")
@click.option("--key", type=_FILE, help="the client certificate's private key")
def login(
    endpoint: str,
    username: str | None,
    token: str | None,
    datacenter: str | None,
    ca: str | None,
    cert: str | None,
    key: str | None,
) -> None:
    """Check a token with the server, save it as a datacenter and make that the current one."""
    endpoint = endpoint.strip().rstrip("/")
    if urlsplit(endpoint).scheme not in ("http", "https") or not urlsplit(endpoint).netloc:
        raise click.BadParameter(f"{endpoint!r} is not an http(s):// URL", param_hint="--endpoint")
    if bool(cert) != bool(key):
        raise click.UsageError("--cert and --key go together")
    if token is None:
        if not sys.stdin.isatty():
            raise click.UsageError("no --token given and no terminal to ask for it on: pass --token TOKEN")
        token = click.prompt("API token", hide_input=True)
    token = token.strip()
    if not token:
        raise click.UsageError("the API token is empty")
    with Client(endpoint, token, ca=ca, cert=cert, key=key) as client:
        try:
            me = client.whoami()
        except Unauthorized:
            raise Unauthorized(
                f"{endpoint} does not accept this token (mistyped, or rotated since); nothing saved"
            ) from None
    if username and username != me.name:
        raise click.ClickException(f"this token belongs to user {me.name!r}, not {username!r}; nothing saved")
    name = datacenter or _datacenter_name(load_config(), endpoint, me.name)
    path = save_datacenter(
        Datacenter(name=name, endpoint=endpoint, username=me.name, token=token, ca=ca, cert=cert, key=key)
    )
    role = " (admin)" if me.is_admin else ""
    click.echo(f"logged in to {endpoint} as {me.name}{role}; current datacenter: {name} (config: {path})")


# -- config -------------------------------------------------------------------------------------


@click.group()
def config() -> None:
    """Datacenters in the client config (~/.paddle/config): show them, pick the current one."""


def _env_note() -> None:
    overrides = [
        v
        for v in ("PADDLECLOUD_ENDPOINT", "PADDLECLOUD_TOKEN", "PADDLECLOUD_DATACENTER")
        if os.environ.get(v)
    ]
    if overrides:
        click.echo(f"note: {', '.join(overrides)} set in the environment override(s) the file", err=True)


def _redacted(dc: Datacenter) -> dict[str, Any]:
    return {
        "endpoint": dc.endpoint,
        "username": dc.username,
        "token": "REDACTED" if dc.token else None,
        "ca": dc.ca,
        "cert": dc.cert,
        "key": dc.key,
    }


@config.command("use")
@click.argument("datacenter")
def config_use(datacenter: str) -> None:
    """Make DATACENTER the current one."""
    dc = use_datacenter(datacenter)
    click.echo(f"current datacenter: {dc.name} ({dc.endpoint} as {dc.username or '?'})")
    env = os.environ.get("PADDLECLOUD_DATACENTER")
    if env and env != dc.name:
        click.echo(f"note: PADDLECLOUD_DATACENTER={env} still overrides it here", err=True)


@config.command("view")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def config_view(fmt: str) -> None:
    """The datacenters (`*`: current). Tokens are never shown."""
    cfg = load_config()
    _env_note()
    if fmt in ("json", "yaml"):
        emit(
            {
                "path": str(cfg.path),
                "current": cfg.current_name or None,
                "datacenters": {name: _redacted(dc) for name, dc in cfg.datacenters.items()},
            },
            fmt,
        )
        return
    if not cfg.datacenters:
        click.echo(f"No datacenters in {cfg.path}. (add one: paddlecloud login --endpoint URL)")
        return
    headers = ["CURRENT", "NAME", "ENDPOINT", "USER", "TLS"]
    if fmt == "wide":
        headers[-1:] = ["CA", "CERT", "KEY"]
    rows = []
    for name, dc in cfg.datacenters.items():
        row = ["*" if name == cfg.current_name else "", name, dc.endpoint, dc.username or "-"]
        if fmt == "wide":
            row += [dc.ca or "-", dc.cert or "-", dc.key or "-"]
        else:
            row.append("+".join(k for k in ("ca", "cert") if getattr(dc, k)) or "-")
        rows.append(row)
    print_table(headers, rows)
    click.echo(f"(config: {cfg.path})")


# -- admin --------------------------------------------------------------------------------------


@click.group()
def admin() -> None:
    """Users, their API tokens and admin status (admins only)."""


@admin.command("users")
@click.option("-o", "--output", "fmt", type=FORMATS, default="table")
def admin_users(fmt: str) -> None:
    """Every user of the platform."""
    users = Client().users()
    if fmt in ("json", "yaml"):
        emit(users, fmt)
        return
    print_table(["NAME", "ADMIN"], [[u.name, "yes" if u.is_admin else "-"] for u in users])


def _show_token(client: Client, issued: TokenView, headline: str, fmt: str) -> None:
    if fmt in ("json", "yaml"):
        emit(issued, fmt)
        return
    click.echo(f"{headline}; API token (shown only this once, the server keeps only a hash):")
    click.echo(f"  {issued.token}")
    click.echo(
        f"{issued.name} logs in with: paddlecloud login --endpoint {client.endpoint} --user {issued.name}"
        "  (asks for the token)"
    )


_TOKEN_FORMATS = click.Choice(["text", "json", "yaml"])


@admin.command("create-user")
@click.argument("name")
@click.option("--admin", "is_admin", is_flag=True, help="the new user is an admin too")
@click.option("-o", "--output", "fmt", type=_TOKEN_FORMATS, default="text")
def create_user(name: str, is_admin: bool, fmt: str) -> None:
    """Create user NAME and print its API token (once)."""
    client = Client()
    issued = client.create_user(name, admin=is_admin)
    _show_token(client, issued, f"user {issued.name} created{' (admin)' if is_admin else ''}", fmt)


@admin.command("rotate-token")
@click.argument("name")
@click.option("-o", "--output", "fmt", type=_TOKEN_FORMATS, default="text")
def rotate_token(name: str, fmt: str) -> None:
    """Issue a new API token for user NAME; the old one stops working at once."""
    client = Client()
    issued = client.rotate_token(name)
    _show_token(client, issued, f"new token for {issued.name}, the old one no longer works", fmt)
    current = load_config().current
    if current is not None and current.username == issued.name and fmt == "text":
        click.echo("that was your own token: log in again with the new one (paddlecloud login)", err=True)


@admin.command("set-quota")
@click.argument("name")
@click.option("--storage", help="PFS storage, e.g. 500Gi; 'default': the platform default")
@click.option("--cpu", help="cpu for running jobs, e.g. 16; 'none': no limit")
@click.option("--memory", help="memory for running jobs, e.g. 64Gi; 'none': no limit")
@click.option("--gpu", help="GPUs for running jobs, e.g. 8; 'none': no limit")
def set_quota(name: str, storage: str | None, cpu: str | None, memory: str | None, gpu: str | None) -> None:
    """Set NAME's limits; jobs over a compute limit wait with QuotaExceeded (others go on)."""
    limits: dict[str, str | int | None] = {}
    if storage is not None:
        limits["storage"] = None if storage == "default" else storage
    for key, value in (("cpu", cpu), ("memory", memory)):
        if value is not None:
            limits[key] = None if value == "none" else value
    if gpu is not None:
        if gpu != "none" and not gpu.isdigit():
            raise click.BadParameter(f"{gpu!r} is not a whole number or 'none'", param_hint="--gpu")
        limits["gpu"] = None if gpu == "none" else int(gpu)
    if not limits:
        raise click.UsageError("name at least one of --storage, --cpu, --memory, --gpu")
    Client().set_quotas(name, **limits)
    click.echo(
        f"quotas of {name} set: "
        + ", ".join(f"{k}={'unlimited' if v is None else v}" for k, v in limits.items())
    )


@admin.command("grant-admin")
@click.argument("name")
def grant_admin(name: str) -> None:
    """Make user NAME an admin."""
    user = Client().set_admin(name, True)
    click.echo(f"{user.name} is now an admin")


@admin.command("revoke-admin")
@click.argument("name")
def revoke_admin(name: str) -> None:
    """Take admin status from user NAME (never your own: another admin must; never the last admin)."""
    user = Client().set_admin(name, False)
    click.echo(f"{user.name} is no longer an admin")


@admin.command("delete-user")
@click.argument("name")
@click.option("--force", is_flag=True, help="kill NAME's active jobs (without it: refused while they run)")
@click.option(
    "--delete-files", is_flag=True, help="delete NAME's PFS home too (default: kept, admins read it)"
)
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
def delete_user(name: str, force: bool, delete_files: bool, yes: bool) -> None:
    """Delete user NAME: their token stops working and their jobs are removed (with their logs)."""
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("deleting a user needs confirmation: pass --yes")
        files = "and their PFS home " if delete_files else ""
        click.confirm(f"delete user {name}, every job of theirs {files}for good?", abort=True)
    done = Client().delete_user(name, force=force, delete_files=delete_files)
    killed = f", killed {', '.join(done.killed)}" if done.killed else ""
    home = f"home {done.home_path} {done.home}"
    click.echo(f"user {done.name} deleted: {done.jobs_removed} job(s) removed{killed}; {home}")
