"""The Python SDK: :class:`Client` (REST over httpx) and :func:`train` (submit in one call).

Its names are imported on first use (``core.lazy``): ``paddlecloud pfs`` imports ``client.pfs`` and
``client.session`` only, not ``client.client`` with every job model of the API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paddlecloud.core import lazy

if TYPE_CHECKING:
    from paddlecloud.client.client import Client
    from paddlecloud.client.config import (
        ClientConfig,
        Datacenter,
        list_datacenters,
        load_config,
        save_datacenter,
        use_datacenter,
    )
    from paddlecloud.client.training import train

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

_CONFIG = "paddlecloud.client.config"
__getattr__ = lazy.exports(
    __name__,
    {
        "Client": "paddlecloud.client.client",
        "ClientConfig": _CONFIG,
        "Datacenter": _CONFIG,
        "list_datacenters": _CONFIG,
        "load_config": _CONFIG,
        "save_datacenter": _CONFIG,
        "train": "paddlecloud.client.training",
        "use_datacenter": _CONFIG,
    },
)
