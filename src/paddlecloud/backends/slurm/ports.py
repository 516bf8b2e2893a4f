"""The ports the Slurm backend gives its servers and trainers, and how it sees a server listen.

    SlurmBackend.start / add_trainer / _move_port ──allocate(jobs, range, n)──▶ n ports of
        ``--slurm-ports`` that no live job of ours uses (workers, retired trainers, stores, ports
        found held on a node) and that nothing on the server's host listens on
    SlurmBackend._listens (unsandboxed) ──listening(host, port)──▶ a TCP connect

The server sees only its own host: a port held on another node is found by the node's launcher
(``PortHeld``, ``runtime.launcher``), and the backend moves that server (``SlurmBackend._move_port``).
Sandboxed, each job has a network namespace of its own on each host, where no other program holds
anything.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterable

from paddlecloud.backends.errors import JobRejected
from paddlecloud.backends.slurm.job_record import JobRecord

__all__ = ["allocate", "bindable", "listening"]


def allocate(jobs: Iterable[JobRecord], ports: tuple[int, int], n: int) -> list[int]:
    """``n`` ports of the range ``ports`` that none of ``jobs`` uses (JobRejected: too few left)."""
    used: set[int] = set()
    for j in jobs:
        used |= {w.port for w in [*j.workers.values(), *j.retired.values()]}
        used |= {*j.stores, *j.held_ports}
    lo, hi = ports
    # also skip a port something on the server's host listens on: where nodes share the host
    # (emulated ones, or a one-node cluster) a process outside our records may still hold it
    free = list(itertools.islice((p for p in range(lo, hi + 1) if p not in used and bindable(p)), n))
    if len(free) < n:
        raise JobRejected(f"no {n} free ports left in {lo}-{hi} (up --slurm-ports)")
    return free


def bindable(port: int) -> bool:
    """Whether ``port`` can be bound on every address of the server's host."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def listening(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` (within half a second)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
