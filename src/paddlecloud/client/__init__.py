"""The Python SDK: :class:`Client` (REST over httpx) and :func:`train` (submit in one call)."""

from __future__ import annotations

from paddlecloud.client.client import Client
from paddlecloud.client.config import (
    ClientConfig,
    Datacenter,
    list_datacenters,
    load_config,
    save_datacenter,
    use_datacenter,
)
from paddlecloud.client.train import train

__all__ = [
    "Client",
    "ClientConfig",
    "Datacenter",
    "list_datacenters",
    "load_config",
    "save_datacenter",
    "train",
    "use_datacenter",
]
