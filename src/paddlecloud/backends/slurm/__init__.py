"""The Slurm backend: every worker of a job is one Slurm batch job on a real Slurm cluster."""

from __future__ import annotations

from paddlecloud.backends.slurm.backend import SlurmBackend
from paddlecloud.backends.slurm.settings import SlurmSettings

__all__ = ["SlurmBackend", "SlurmSettings"]
