"""The embedded single-machine cluster: virtual nodes whose workers are OS processes.

Its names are imported on first use: a Slurm node imports only ``sandbox`` (each worker start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddlecloud.core import lazy

if TYPE_CHECKING:
    from paddlecloud.backends.local.backend import LocalBackend
    from paddlecloud.backends.local.jobstate import LocalConfig
    from paddlecloud.backends.local.nodes import NodeShape
    from paddlecloud.backends.local.settings import LocalSettings

__all__ = ["LocalBackend", "LocalConfig", "LocalSettings", "NodeShape"]

__getattr__ = lazy.exports(
    __name__,
    {
        "LocalBackend": "paddlecloud.backends.local.backend",
        "LocalConfig": "paddlecloud.backends.local.jobstate",
        "LocalSettings": "paddlecloud.backends.local.settings",
        "NodeShape": "paddlecloud.backends.local.nodes",
    },
)
