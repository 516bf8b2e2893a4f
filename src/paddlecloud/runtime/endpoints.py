"""Endpoints resolved at run time: for engines that choose a worker's host only when they start it.

A backend that knows every worker's host before it starts (local: loopback; Kubernetes: Services)
puts plain ``host:port`` endpoints in the env contract. One whose engine allocates hosts (Slurm)
cannot: it writes the host of each endpoint as a placeholder, ``@<worker>@`` (``@pserver-0@:41001``,
and ``@pserver-0@`` alone where only a host is wanted), and sets two variables:

    PADDLECLOUD_ENDPOINTS_DIR   a directory of the job every worker can read and write (shared
                                storage): each worker publishes its host there as a file named after
                                it (``pserver-0``, written atomically)
    PADDLECLOUD_ENDPOINTS_WAIT  the workers whose hosts this worker must know before its program
                                starts (pservers: the pservers; trainers: the pservers and, in a job
                                of fixed size, the other trainers)

``resolve`` (called by ``runtime.launcher`` before it starts the program, and by ``runtime.env``
when it still sees placeholders) publishes this worker's host, waits (bounded:
``PADDLECLOUD_ENDPOINTS_TIMEOUT`` seconds, 300 by default) for the hosts it must know, and returns
the environment with every placeholder replaced: a host published by then is used, any other (a
trainer a pserver does not wait for) becomes the worker's name. The host published is
``PADDLECLOUD_PUBLISH_HOST`` when set (the backend may name an address other than the hostname),
else this machine's hostname.

Standard library only.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping

from paddlecloud.runtime import contract as c

__all__ = ["PLACEHOLDER", "EndpointsTimeout", "placeholder", "publish", "published", "resolve"]

#: a host not known before the worker starts
PLACEHOLDER = re.compile(r"@([a-z][a-z0-9]*-[0-9]+)@")
DEFAULT_TIMEOUT_S = 300.0
_POLL_S = 0.1


class EndpointsTimeout(TimeoutError):
    """Some workers did not publish their hosts in time (their names are in the message)."""


def placeholder(worker: str) -> str:
    """The host of ``worker`` as the platform writes it before the engine has placed it."""
    return f"@{worker}@"


def publish(directory: str, worker: str, host: str) -> None:
    """Publish ``worker``'s host in ``directory`` (atomically: readers see all of it or nothing)."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{worker}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(host)
    os.replace(tmp, os.path.join(directory, worker))


def published(directory: str) -> dict[str, str]:
    """Every host published so far, by worker."""
    try:
        names = [n for n in os.listdir(directory) if not n.startswith(".")]
    except FileNotFoundError:
        return {}
    out = {}
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                host = f.read().strip()
        except OSError:
            continue
        if host:
            out[name] = host
    return out


def resolve(environ: Mapping[str, str], timeout: float | None = None) -> dict[str, str]:
    """``environ`` with its endpoints resolved (unchanged when it has no ``ENDPOINTS_DIR``); raises
    :class:`EndpointsTimeout` when the hosts it must wait for are not all published in time."""
    env = dict(environ)
    directory = env.get(c.ENDPOINTS_DIR, "")
    if not directory:
        return env
    me = env[c.WORKER]
    host = env.get(c.PUBLISH_HOST) or socket.gethostname()
    publish(directory, me, host)
    need = {w for w in env.get(c.ENDPOINTS_WAIT, "").split(",") if w} - {me}
    limit = timeout if timeout is not None else float(env.get(c.ENDPOINTS_TIMEOUT) or DEFAULT_TIMEOUT_S)
    deadline = time.monotonic() + limit
    hosts = published(directory)
    while not need <= hosts.keys():
        if time.monotonic() >= deadline:
            missing = ", ".join(sorted(need - hosts.keys()))
            raise EndpointsTimeout(
                f"{me}: the hosts of {missing} were not published in {directory} within {limit:g} s"
            )
        time.sleep(_POLL_S)
        hosts = published(directory)
    hosts[me] = host

    def host_of(m: re.Match[str]) -> str:
        return hosts.get(m.group(1), m.group(1))

    return {k: PLACEHOLDER.sub(host_of, v) if "@" in v else v for k, v in env.items()}
