"""Which TCP ports a process's network namespace listens on, read from ``/proc`` (no connection made).

    monitor  listening(child pid, port, owners)   the run's program listens: the monitor writes its
                                                  ready file
    netns    parse(tables)                        the same, for a namespace read through ``nsenter``

A worker in a network namespace of its own cannot be reached from the host to see whether it
listens, so the run's monitor looks from outside at what the kernel lists for the namespace of its
child (``/proc/<pid>/net/tcp`` and ``tcp6``, state ``0A``: LISTEN) and tells the backend with a file.
A listener on the port is the worker's only when one of ``owners`` holds that socket (its inode
among the processes' ``/proc/<pid>/fd``): where workers share a namespace with other processes
(``--isolation none``), another process holding the port is never taken for the worker (issue 25:
a pserver that failed to bind was reported listening because a squatter held its port).

Standard library only (``os``): the monitor imports it.
"""

from __future__ import annotations

import os

__all__ = ["descendants", "listening", "parse"]

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def _listeners(table: str) -> dict[int, set[str]]:
    """Port -> socket inodes in LISTEN state, of ``/proc/net/tcp``-format text (several tables may
    follow each other, each with its header line)."""
    out: dict[int, set[str]] = {}
    for line in table.splitlines():
        cols = line.split()
        if len(cols) > 9 and cols[3] == _LISTEN and ":" in cols[1]:
            try:
                port = int(cols[1].rpartition(":")[2], 16)
            except ValueError:
                continue
            out.setdefault(port, set()).add(cols[9])
    return out


def parse(table: str) -> set[int]:
    """The ports in LISTEN state in ``/proc/net/tcp``-format text."""
    return set(_listeners(table))


def _tables(pid: int) -> str:
    text = ""
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                text += f.read()
        except OSError:
            continue
    return text


def descendants(root: int) -> set[int]:
    """``root`` and every process below it (a walk of the parent pids in ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])  # the name may hold spaces and ")"
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _holds(pids: set[int], inodes: set[str]) -> bool | None:
    """Whether one of ``pids`` has one of the socket ``inodes`` open; None when no process's
    descriptors could be read at all (no permission)."""
    wanted = {f"socket:[{i}]" for i in inodes}
    readable = False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        readable = True
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False if readable else None


def listening(pid: int, port: int, owners: int | None = None) -> bool:
    """Whether something in the network namespace of process ``pid`` listens on TCP ``port``; with
    ``owners`` (a pid), only a socket that process or one below it holds counts (where no
    descriptor can be read, any listener does, as without ``owners``)."""
    inodes = _listeners(_tables(pid)).get(port)
    if not inodes:
        return False
    if owners is None:
        return True
    held = _holds(descendants(owners), inodes)
    return held is None or held
