"""Backends turn admitted jobs into running workers; see :mod:`paddlecloud.backends.base`.

Heavy or optional backends are imported lazily by :func:`create_backend`.
"""

from __future__ import annotations

from paddlecloud.backends.base import (
    Backend,
    BackendEvent,
    Capability,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
    WorkerStatus,
)

__all__ = [
    "Backend",
    "BackendEvent",
    "Capability",
    "JobLaunch",
    "JobStatus",
    "LogRequest",
    "NodeInfo",
    "WorkerStatus",
]
