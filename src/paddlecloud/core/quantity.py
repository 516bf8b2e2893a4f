"""Kubernetes resource quantities: ``500m`` / ``2`` CPUs, ``512Mi`` / ``10Gi`` / ``1G`` memory.

CPU is kept as integer millicores and memory as integer bytes, so that scheduling arithmetic is exact.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["QuantityError", "format_cpu", "format_memory", "human_bytes", "parse_cpu", "parse_memory"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)([a-zA-Z]{0,2})$")


class QuantityError(ValueError):
    """A quantity string that is not valid Kubernetes notation for its resource."""


def _split(text: str, what: str) -> tuple[Decimal, str]:
    m = _QUANTITY.match(str(text).strip())
    if not m:
        raise QuantityError(f"{text!r} is not a valid {what} quantity (examples: {_EXAMPLES[what]})")
    try:
        return Decimal(m.group(1)), m.group(2)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{text!r} is not a number") from exc


_EXAMPLES = {"cpu": "500m, 1, 2.5", "memory": "512Mi, 1Gi, 10Gi, 1G"}


def parse_cpu(text: str | int | float) -> int:
    """Return millicores: ``"500m"`` → 500, ``"2"`` → 2000, ``"0.5"`` → 500."""
    value, suffix = _split(str(text), "cpu")
    if suffix == "m":
        milli = value
    elif suffix == "":
        milli = value * 1000
    else:
        raise QuantityError(f"{text!r} is not a valid cpu quantity (examples: {_EXAMPLES['cpu']})")
    if milli != milli.to_integral_value():
        raise QuantityError(f"{text!r} is finer than one millicore")
    return int(milli)


def parse_memory(text: str | int) -> int:
    """Return bytes: ``"1Gi"`` → 1073741824, ``"1G"`` → 10**9, ``"128974848"`` → 128974848."""
    value, suffix = _split(str(text), "memory")
    if suffix in _BINARY:
        n = value * _BINARY[suffix]
    elif suffix in _DECIMAL:
        n = value * _DECIMAL[suffix]
    elif suffix == "":
        n = value
    else:
        raise QuantityError(f"{text!r} is not a valid memory quantity (examples: {_EXAMPLES['memory']})")
    if n != n.to_integral_value():
        raise QuantityError(f"{text!r} is not a whole number of bytes")
    return int(n)


def human_bytes(n: int) -> str:
    """Approximate binary units for people: 1536 → ``1.5 KiB``, 3 * 2**30 → ``3.0 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def format_cpu(millicores: int) -> str:
    """Inverse of :func:`parse_cpu`, shortest form: 500 → ``500m``, 2000 → ``2``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_memory(n: int) -> str:
    """Shortest exact binary form: 1073741824 → ``1Gi``; otherwise plain bytes."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
