"""Which TCP ports a process's network namespace listens on, read from ``/proc`` (no connection made).

    monitor  listening(child pid, port)   the run's program listens: the monitor writes its ready file
    netns    parse(tables)                the same, for a namespace read through ``nsenter``

A worker in a network namespace of its own cannot be reached from the host to see whether it
listens, so the run's monitor looks from outside at what the kernel lists for the namespace of its
child (``/proc/<pid>/net/tcp`` and ``tcp6``, state ``0A``: LISTEN) and tells the backend with a file.

Standard library only (``os``): the monitor imports it.
"""

from __future__ import annotations

__all__ = ["listening", "parse"]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def parse(table: str) -> set[int]:
    """The ports in LISTEN state in ``/proc/net/tcp``-format text (several tables may follow each
    other, each with its header line)."""
    ports = set()
    for line in table.splitlines():
        cols = line.split()
        if len(cols) > 3 and cols[3] == _LISTEN and ":" in cols[1]:
            try:
                ports.add(int(cols[1].rpartition(":")[2], 16))
            except ValueError:
                continue
    return ports


def listening(pid: int, port: int) -> bool:
    """Whether anything in the network namespace of process ``pid`` listens on TCP ``port``."""
    text = ""
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                text += f.read()
        except OSError:
            continue
    return port in parse(text)
