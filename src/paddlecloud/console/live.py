"""How the live parts stay cheap: a part's data is built once per change, not once per poll.

    poll GET /ui/_jobs?since=V
      stamp = (database change counter of the part's tables, 30-s time bucket)
      MEMO[(part, caller, params)] built at this stamp? ─ yes ─▶ its digest
                                                       └ no ──▶ build the data (a thread), digest it,
                                                                remember it with the stamp
      digest == V ─▶ 204 (htmx swaps nothing)      else ─▶ render the part with its new digest

The digest is of the data the part shows (``pydantic_core.to_json``), not of the counter: a write
that changes nothing shown (a running job's attained service, accounted every cycle) costs one
build per change for all the consoles showing that part, and each of their polls stays a 204. The
stamp is read before the build, so a write during the build is never taken as seen. The time bucket
lets what the database does not record (files a job writes, a node's foreign load) show within 30 s.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from pydantic_core import to_json

from paddlecloud.controller import Platform

__all__ = ["MAX_STALE_S", "Memo", "digest", "stamp"]

T = TypeVar("T")

#: a live part is built again at least this often, even when no table it reads changed
MAX_STALE_S = 30

Stamp = tuple[int, int]


def stamp(platform: Platform, tables: tuple[str, ...]) -> Stamp:
    return platform.ctx.db.changes.get(*tables), int(time.time() // MAX_STALE_S)


def digest(data: Any) -> str:
    """A short digest of what a part shows (pydantic models, dataclasses, lists, strings)."""
    return hashlib.blake2b(to_json(data), digest_size=10).hexdigest()


class Memo:
    """The latest data and digest of each live part (by key), with the stamp it was built at.
    Bounded: the least recently stored go first."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Hashable, Any, str]] = OrderedDict()

    def known(self, key: Hashable, at: Hashable) -> tuple[Any, str] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != at:
            return None
        return entry[1], entry[2]

    def get_or_build(self, key: Hashable, at: Hashable, build: Callable[[], T]) -> tuple[T, str]:
        """The data of ``key`` built at stamp ``at`` (read before calling), and its digest."""
        hit = self.known(key, at)
        if hit is not None:
            data: T = hit[0]
            return data, hit[1]
        data = build()
        value = digest(data)
        with self._lock:
            self._entries[key] = (at, data, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return data, value
