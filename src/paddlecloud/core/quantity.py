"""Kubernetes resource quantities: ``500m`` / ``2`` CPUs, ``512Mi`` / ``10Gi`` / ``1G`` memory.

CPU is kept as integer millicores and memory as integer bytes, so that scheduling arithmetic is exact.
What one worker may ask for is bounded (:func:`parse_cpu_request`, :func:`parse_memory_request`): zero
and absurd amounts (a typo such as ``99999999999999999999``) are refused with what to ask for instead.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "MAX_CPU_M",
    "MAX_MEMORY",
    "MAX_QUANTITY_CHARS",
    "MIN_MEMORY",
    "QuantityError",
    "check_length",
    "format_cpu",
    "format_memory",
    "human_bytes",
    "human_memory",
    "parse_cpu",
    "parse_cpu_request",
    "parse_memory",
    "parse_memory_request",
]

#: the most cpu one worker may ask for: 1024 cores (no node this platform targets has more)
MAX_CPU_M = 1024 * 1000
#: the least and the most memory one worker may ask for: 1Mi (less cannot hold a Python process's
#: page tables) and 64Ti
MIN_MEMORY = 2**20
MAX_MEMORY = 64 * 2**40
#: the longest quantity text accepted (``1024``, ``1536Mi``, ``0.5``: a few characters)
MAX_QUANTITY_CHARS = 32

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


def check_length(text: str | int | float, what: str) -> None:
    """Refuse a quantity text longer than :data:`MAX_QUANTITY_CHARS` before parsing it."""
    if len(str(text)) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"{str(text)[:20]!r}... is {len(str(text))} characters, not a {what} quantity "
            f"(at most {MAX_QUANTITY_CHARS}; examples: {_EXAMPLES[what]})"
        )


def parse_cpu_request(text: str | int | float) -> int:
    """:func:`parse_cpu` for what one worker asks for: more than zero, at most :data:`MAX_CPU_M`."""
    check_length(text, "cpu")
    milli = parse_cpu(text)
    if milli <= 0:
        raise QuantityError(
            f"cpu {text!r} is zero: a worker needs at least 1m (a millicore); ask for e.g. 500m"
        )
    if milli > MAX_CPU_M:
        raise QuantityError(
            f"cpu {text!r} is more than {format_cpu(MAX_CPU_M)} cores, the most one worker may ask for; "
            "ask for less (e.g. 2) and spread the work over more trainers"
        )
    return milli


def parse_memory_request(text: str | int) -> int:
    """:func:`parse_memory` for what one worker asks for: :data:`MIN_MEMORY` to :data:`MAX_MEMORY`."""
    check_length(text, "memory")
    n = parse_memory(text)
    if n < MIN_MEMORY:
        raise QuantityError(
            f"memory {text!r} is less than {format_memory(MIN_MEMORY)}, the least one worker may ask for; "
            "ask for e.g. 512Mi"
        )
    if n > MAX_MEMORY:
        raise QuantityError(
            f"memory {text!r} is more than {format_memory(MAX_MEMORY)}, the most one worker may ask for; "
            "ask for less (e.g. 16Gi) and spread the work over more trainers"
        )
    return n


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
    """Shortest exact binary form: 1073741824 → ``1Gi``; otherwise plain bytes. For machines (the
    API's quota views, Kubernetes requests); people get :func:`human_memory`."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def human_memory(n: int) -> str:
    """Memory (or storage) for people, in the notation they ask for it in: exact when it is a whole
    number of the largest binary unit it reaches (``512Mi``, ``1Gi``), else that unit with one
    decimal, rounded down (a machine's 24683656Ki → ``23.5Gi``; 1023.99Mi → ``1023.9Mi``), so that
    "memory 24Gi > 23.9Gi free" never reads as if it fitted. Below 1Ki: bytes (``512``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if abs(n) >= unit:
            whole, rest = divmod(abs(n), unit)
            sign = "-" if n < 0 else ""
            if rest == 0:
                return f"{sign}{whole}{suffix}"
            return f"{sign}{whole}.{rest * 10 // unit}{suffix}"
    return str(n)
