"""What backend settings are made from: ``paddlecloud up``'s option values, checked.

A backend's settings class has ``OPTIONS`` (the Click parameter names it reads) and
``from_options(values)``, which raises :class:`OptionError` naming the flag of a bad value; the
helpers here parse the common kinds of values. The CLI turns an ``OptionError`` into a usage error.
"""

from __future__ import annotations

from paddlecloud.core.imageref import ImageRefError, parse_image_ref
from paddlecloud.core.quantity import QuantityError, parse_cpu, parse_memory

__all__ = [
    "ISOLATION_MODES",
    "OptionError",
    "cache_size",
    "insecure_registries",
    "isolation_mode",
    "quantity",
]

#: ``up --isolation`` (``backends/local/sandbox.py``: ``choose``)
ISOLATION_MODES = ("auto", "sandbox", "none")


class OptionError(ValueError):
    """A backend option's value is not usable; ``option`` is its flag (``--node-cpu``)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def quantity(kind: str, value: object, option: str) -> int | None:
    """``value`` as millicores (``kind`` "cpu") or bytes ("memory"); None stays None."""
    if value is None:
        return None
    try:
        return parse_cpu(value) if kind == "cpu" else parse_memory(value)  # type: ignore[arg-type]
    except QuantityError as exc:
        raise OptionError(option, str(exc)) from None


def isolation_mode(value: object, option: str = "--isolation") -> str:
    """``up --isolation`` of the backends that confine workers with ``sandbox.py``: auto (the
    default), sandbox or none."""
    mode = value or "auto"
    if mode not in ISOLATION_MODES:
        raise OptionError(option, f"{mode!r}: expected {', '.join(ISOLATION_MODES)}")
    return str(mode)


def insecure_registries(values: object, option: str = "--insecure-registry") -> tuple[str, ...]:
    """``up --insecure-registry HOST[:PORT]`` (repeatable): registries of the image backends reached
    over plain HTTP, as a registry in an image reference names them (loopback ones always are)."""
    out: list[str] = []
    for value in values or ():  # type: ignore[attr-defined]
        try:
            ref = parse_image_ref(f"{value}/probe")
        except ImageRefError:
            ref = None
        if ref is None or ref.registry != value:
            raise OptionError(
                option, f"{value!r}: give a registry as HOST[:PORT] (for example 10.0.0.5:5000)"
            )
        out.append(str(value))
    return tuple(out)


def cache_size(value: object, default: int | None, option: str) -> int | None:
    """A cache's cap: a memory quantity, "none" (no cap), or unset (``default``)."""
    if value is None:
        return default
    return None if value == "none" else quantity("memory", value, option)
