"""The Slurm backend's settings (``paddlecloud up --backend slurm --slurm-...``).

Everything Slurm-specific the server is told lives here, so the platform's own configuration only
carries one :class:`SlurmSettings` value through to :class:`~paddlecloud.backends.slurm.SlurmBackend`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SlurmSettings"]


@dataclass(frozen=True)
class SlurmSettings:
    #: the backend's files (job packages, logs, exit statuses, records): must be on a file system
    #: every Slurm node sees at the same path (the data dir's ``slurm/``)
    root: Path
    partition: str = ""  # sbatch --partition ("" : the cluster's default partition)
    account: str = ""  # sbatch --account ("" : the submitting Unix user's default account)
    qos: str = ""  # sbatch --qos
    #: more sbatch arguments, given as they are to every submission (e.g. ``--constraint=ib``)
    sbatch_args: tuple[str, ...] = ()
    #: the ports workers listen on, unique across every worker the server runs (emulated nodes share
    #: one host; on a real cluster it keeps a job's ports clear of each other's)
    ports: tuple[int, int] = (21000, 28999)
    #: the interpreter that runs ``paddlecloud.runtime.launcher`` on the nodes (the server's own:
    #: it must exist at the same path on every node)
    python: str = sys.executable
    #: seconds between SIGTERM and SIGKILL when the backend itself stops workers
    cleanup_grace: float = 5.0
    #: cap of the environments built from packages' requirements.txt (``<root>/envs``; None: none)
    env_cache_bytes: int | None = 20 * 2**30
    #: seconds a Slurm command may take before the call is given up (the controller retries)
    command_timeout: float = 30.0
