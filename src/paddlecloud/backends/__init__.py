"""Backends turn admitted jobs into running workers; the contract is :mod:`paddlecloud.backends.base`.

Which backends exist, and how each is made from its settings, is :mod:`paddlecloud.backends.registry`
(``entry(name).create(setup)``): a backend's module is imported only when it is chosen. What a
backend raises is :mod:`paddlecloud.backends.errors`.
"""

from __future__ import annotations

from paddlecloud.backends.base import (
    Backend,
    BackendEvent,
    BackendSetup,
    Capability,
    Confinement,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
    WorkerStatus,
)
from paddlecloud.backends.options import OptionError
from paddlecloud.backends.registry import (
    BackendConfigError,
    BackendEntry,
    UnknownBackend,
    backend_names,
    entry,
    register,
)

__all__ = [
    "Backend",
    "BackendConfigError",
    "BackendEntry",
    "BackendEvent",
    "BackendSetup",
    "Capability",
    "Confinement",
    "JobLaunch",
    "JobStatus",
    "LogRequest",
    "NodeInfo",
    "OptionError",
    "UnknownBackend",
    "WorkerStatus",
    "backend_names",
    "entry",
    "register",
]
