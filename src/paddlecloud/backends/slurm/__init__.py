"""The Slurm backend: every worker of a job is one Slurm batch job on a real Slurm cluster.

Its names are imported on first use: a Slurm node imports only ``jail`` (each worker start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddlecloud.core import lazy

if TYPE_CHECKING:
    from paddlecloud.backends.slurm.backend import SlurmBackend
    from paddlecloud.backends.slurm.settings import SlurmSettings

__all__ = ["SlurmBackend", "SlurmSettings"]

__getattr__ = lazy.exports(
    __name__,
    {
        "SlurmBackend": "paddlecloud.backends.slurm.backend",
        "SlurmSettings": "paddlecloud.backends.slurm.settings",
    },
)
