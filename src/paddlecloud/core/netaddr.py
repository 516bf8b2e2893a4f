"""Network addresses as the platform meets them: whether a host or ``host:port`` is this machine's
loopback (an address no other host can use to reach it).

Pure; used where an address is handed to another host (the API URL workers get, a run's fence, a
job's overlay peers) to tell when that cannot work.
"""

from __future__ import annotations

import ipaddress

__all__ = ["host_of", "is_loopback"]


def host_of(target: str) -> str:
    """The host of ``host:port`` / ``[v6]:port`` (``target`` itself when it has no port)."""
    if target.startswith("["):
        return target[1:].partition("]")[0]
    host, sep, port = target.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else target


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, maybe with a ``%zone``, or a name) is this machine's loopback:
    127.0.0.0/8, ::1, ``localhost`` or empty (the default bind)."""
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
