"""Backends turn admitted jobs into running workers; the contract is :mod:`paddlecloud.backends.base`.

Which backends exist, and how each is made from its settings, is :mod:`paddlecloud.backends.registry`
(``entry(name).create(setup)``): a backend's module is imported only when it is chosen. What a
backend raises is :mod:`paddlecloud.backends.errors`. The names here are imported on first use
(``core.lazy``): a Slurm node imports only ``slurm.jail`` and the local sandbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddlecloud.core import lazy

if TYPE_CHECKING:
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

__getattr__ = lazy.exports(
    __name__,
    {
        "Backend": "paddlecloud.backends.base",
        "BackendEvent": "paddlecloud.backends.base",
        "BackendSetup": "paddlecloud.backends.base",
        "Capability": "paddlecloud.backends.base",
        "Confinement": "paddlecloud.backends.base",
        "JobLaunch": "paddlecloud.backends.base",
        "JobStatus": "paddlecloud.backends.base",
        "LogRequest": "paddlecloud.backends.base",
        "NodeInfo": "paddlecloud.backends.base",
        "WorkerStatus": "paddlecloud.backends.base",
        "OptionError": "paddlecloud.backends.options",
        "BackendConfigError": "paddlecloud.backends.registry",
        "BackendEntry": "paddlecloud.backends.registry",
        "UnknownBackend": "paddlecloud.backends.registry",
        "backend_names": "paddlecloud.backends.registry",
        "entry": "paddlecloud.backends.registry",
        "register": "paddlecloud.backends.registry",
    },
)
