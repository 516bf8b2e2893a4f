"""A bounded cache of values read from the database, dropped as soon as their tables change.

    reader: cache.get(key) ─▶ the value, while no commit touched ``tables`` since it was built and
                              it is younger than ``max_age``; else None
    reader: cache.get_or_build(key, build) ─▶ the value, built once: concurrent callers of one key
                              wait for the first one's build (no stampede when a value expires)

A value that is only *old* (no commit touched its tables) is rebuilt by one caller while the others
go on getting it: ``get`` answers None to the first caller after ``max_age`` and the old value to
the rest until that caller's build is stored. A value whose tables changed is never served again.

The generation is read *before* building (``generation()``, then ``put``), so a value built while a
write was being committed is stored under the older generation and never served after that write.
Commits are counted by ``store.changes`` for every session of this process; ``max_age`` bounds how
long a write made by another process could go unseen. Least recently stored entries go first when
``size`` is reached.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from paddlecloud.store import ChangeCounters

__all__ = ["ReadCache"]

_STRIPES = 64  # builder locks, shared by keys of equal hash modulo this

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadCache(Generic[K, V]):
    def __init__(
        self,
        changes: ChangeCounters,
        tables: tuple[str, ...],
        *,
        max_age: float,
        size: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._changes = changes
        self._tables = tables
        self._max_age = max_age
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, tuple[int, float, V]] = OrderedDict()
        self._builders = tuple(threading.Lock() for _ in range(_STRIPES))
        #: keys whose old (but not outdated) value one caller is rebuilding
        self._refreshing: set[K] = set()

    def generation(self) -> int:
        """Read this before building a value to ``put``."""
        return self._changes.get(*self._tables)

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        gen, stored, value = entry
        if gen != self.generation():
            return None
        if self._clock() - stored > self._max_age:
            with self._lock:
                if key not in self._refreshing:  # this caller rebuilds it; the others get it old
                    self._refreshing.add(key)
                    return None
        return value

    def _fresh(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        gen, stored, value = entry
        fresh = gen == self.generation() and self._clock() - stored <= self._max_age
        return value if fresh else None

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``build()``'s, stored; one build at a time per key."""
        with self._builders[hash(key) % _STRIPES]:
            try:
                value = self._fresh(key)
                if value is None:
                    generation = self.generation()
                    value = build()
                    self.put(key, value, generation)
                return value
            finally:
                with self._lock:
                    self._refreshing.discard(key)

    def put(self, key: K, value: V, generation: int) -> None:
        with self._lock:
            self._entries[key] = (generation, self._clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
