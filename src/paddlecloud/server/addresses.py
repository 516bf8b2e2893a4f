"""The URLs a server is reached at: by clients on its own host, and by its workers.

``paddlecloud up --host H --port P`` binds H; two URLs follow from it, worked out here once:

    client URL   what the client config on this host gets: H, or 127.0.0.1 when H is a wildcard
                 (0.0.0.0, ::, empty): every address of this host answers, and loopback always does
    worker URL   the workers' ``PADDLECLOUD_API`` (task master, package, reports): ``up --api-url``
                 when given; else H when it names one address; for a wildcard, 127.0.0.1 when the
                 backend runs its workers on this host (local), and this host's name when they run on
                 other hosts (slurm, kubernetes: loopback there is the worker's own host), provided it
                 resolves to an address that is not loopback; else loopback with a warning saying that
                 other hosts cannot reach it and what to give instead

:func:`server_urls` returns both with how the worker URL was chosen, which ``up`` prints. Name
resolution is passed in (``resolve``) so the choice is tested without this host's resolver.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paddlecloud.core.netaddr import is_loopback

__all__ = ["ServerUrls", "server_urls", "this_host"]

WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})

#: host name -> the addresses it resolves to (empty when it does not)
Resolver = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class ServerUrls:
    client: str
    worker: str
    #: how ``worker`` was chosen, for ``up`` to print ("given", "the bound address", ...)
    source: str
    #: set when workers on other hosts will not reach ``worker``: what to do about it
    warning: str = ""


def _resolve(name: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


def this_host(resolve: Resolver = _resolve, names: Sequence[str] = ()) -> str:
    """The first of ``names`` (default: this host's fully qualified name, then its short name) that
    resolves to at least one address that is not loopback; "" when none does (a Debian host's own
    name often resolves to 127.0.1.1 only)."""
    for name in names or (socket.getfqdn(), socket.gethostname()):
        if name and any(not is_loopback(a) for a in resolve(name)):
            return name
    return ""


def _url(scheme: str, host: str, port: int) -> str:
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{scheme}://{bracketed}:{port}"


def server_urls(
    scheme: str, host: str, port: int, *, api_url: str = "", remote_workers: bool = False,
    host_name: Callable[[], str] = this_host,
) -> ServerUrls:  # fmt: skip
    """The client and worker URLs of a server bound to ``host``:``port`` (module docstring)."""
    wildcard = host in WILDCARDS
    client = _url(scheme, "127.0.0.1" if wildcard else host, port)
    if api_url:
        return ServerUrls(client, api_url.rstrip("/"), "given (--api-url)")
    if not wildcard:
        return ServerUrls(client, client, "the bound address (--host)")
    if not remote_workers:
        return ServerUrls(client, client, "loopback: the workers run on this host")
    name = host_name()
    if name:
        return ServerUrls(client, _url(scheme, name, port), "this host's name, as other hosts resolve it")
    return ServerUrls(
        client,
        client,
        "loopback",
        "this host's name resolves to no address other hosts can reach, so workers on other hosts "
        "cannot reach the API: give the URL they reach it at, e.g. --api-url http://ADDRESS:"
        f"{port}, or bind one address (--host ADDRESS)",
    )
