"""The container-image test bed as the tests see it (``scripts/ensure-registry.sh``' exports)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bed"]


@dataclass(frozen=True)
class Bed:
    registry: str
    private_registry: str
    image: str
    private_image: str
    user: str
    password: str
