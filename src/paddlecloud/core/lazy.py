"""Re-exports a package imports only when they are first used (PEP 562 module ``__getattr__``).

    package/__init__.py:  __getattr__ = lazy.exports(__name__, {"Name": "package.module", ...})
    from package import Name ──▶ __getattr__("Name") ──▶ importlib.import_module("package.module").Name

So importing one light module of a package (the Slurm node's ``backends.slurm.jail``, which each
worker start pays for) does not import everything the package's ``__init__`` re-exports. The names
are also imported under ``TYPE_CHECKING`` in the ``__init__``, for type checkers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that takes each name of ``names`` from its module."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
