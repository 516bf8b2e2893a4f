"""The embedded single-machine cluster: virtual nodes whose workers are OS processes."""

from __future__ import annotations

from paddlecloud.backends.local.backend import LocalBackend, LocalConfig
from paddlecloud.backends.local.nodes import NodeShape
from paddlecloud.backends.local.settings import LocalSettings

__all__ = ["LocalBackend", "LocalConfig", "LocalSettings", "NodeShape"]
