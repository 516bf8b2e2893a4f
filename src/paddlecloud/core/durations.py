"""Durations for people: ``90``, ``90s``, ``45m``, ``2h``, ``1h30m``, ``3d`` <-> seconds.

``parse_duration`` reads what ``submit --expected-duration`` accepts (a bare number is seconds);
``human_duration`` writes the short form ``get jobs`` shows (``45s``, ``12m``, ``2h5m``, ``3d4h``).
"""

from __future__ import annotations

import re

__all__ = ["human_duration", "parse_duration"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError saying what is accepted otherwise."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t)
    parts = _PART.findall(t)
    if (
        not t
        or len(t) > 40
        or "".join(n + u for n, u in parts) != t
        or len({u for _, u in parts}) != len(parts)
    ):
        raise ValueError(f"{text[:40]!r} is not a duration: use seconds or e.g. 90s, 45m, 2h, 1h30m, 3d")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def human_duration(seconds: float) -> str:
    """``seconds`` (>= 0) in at most two units, rounded up (an estimate never looks sooner)."""
    s = max(int(-(-seconds // 1)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{-(-s // 60)}m"
    if s < 86400:
        h, m = divmod(-(-s // 60), 60)
        return f"{h}h{m}m" if m else f"{h}h"
    d, h = divmod(-(-s // 3600), 24)
    return f"{d}d{h}h" if h else f"{d}d"
