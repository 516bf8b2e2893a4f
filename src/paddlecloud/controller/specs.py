"""Parsed job specs, kept per controller: a stored spec never changes after the submit.

Every reconcile cycle turns every queued and running job's stored spec (a JSON column) into a
``JobSpec``; with thousands of queued jobs that parse was most of a cycle. ``SpecCache.get`` parses a
row's spec once and keeps it by (job id, submit time) — one cache per ``Context``, so two databases in
one process (tests) never see each other's specs. A job deleted and submitted again under the same
id gets a new submit time and so a new entry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from paddlecloud.api.models import JobSpec
from paddlecloud.store.tables import JobRow

__all__ = ["SpecCache"]


class SpecCache:
    """An LRU of parsed specs, bounded to ``size`` jobs; safe to share between threads."""

    def __init__(self, size: int = 20_000) -> None:
        self._size = size
        self._specs: OrderedDict[tuple[int, float], JobSpec] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, row: JobRow) -> JobSpec:
        """``JobSpec.from_stored(row.spec)``, parsed once per job (a row not yet stored: each time)."""
        if row.id is None:
            return JobSpec.from_stored(row.spec)
        key = (row.id, row.submitted_at)
        with self._lock:
            spec = self._specs.get(key)
            if spec is not None:
                self._specs.move_to_end(key)
                return spec
        spec = JobSpec.from_stored(row.spec)  # outside the lock: a parse may take milliseconds
        with self._lock:
            self._specs[key] = spec
            while len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return spec

    def __len__(self) -> int:
        return len(self._specs)
