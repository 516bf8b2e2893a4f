"""Parsed job specs, kept per controller: a stored spec never changes after the submit.

Every reconcile cycle turns every queued and running job's stored spec (a JSON column) into a
``JobSpec``; with thousands of queued jobs that parse was most of a cycle. ``SpecCache.get`` parses a
row's spec once and keeps it by (job id, submit time) — one cache per ``Context``, so two databases in
one process (tests) never see each other's specs. A job deleted and submitted again under the same
id gets a new submit time and so a new entry.

This module is the controller's only reader of the stored spec (``tests/unit/test_phase_writes.py``
reads the source for any other): ``get`` (parsed; a spec that no longer passes the rules raises),
``peek`` (parsed, or None for such a spec: for the paths that must not fail on one job), and
``listed_counts`` (the two counts a listing shows, read without parsing: ``get jobs`` lists
thousands of finished jobs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from paddlecloud.api.models import JobSpec
from paddlecloud.store.tables import JobRow

__all__ = ["SpecCache", "listed_counts"]


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

    def peek(self, row: JobRow) -> JobSpec | None:
        """:meth:`get`, or None when the stored spec cannot be read (the reconcile cycle fails
        that job with ``InvalidSpec``; a caller that only looks must not fail on it first)."""
        try:
            return self.get(row)
        except (ValueError, TypeError, KeyError):  # pydantic's ValidationError is a ValueError
            return None

    def __len__(self) -> int:
        return len(self._specs)


def listed_counts(row: JobRow) -> tuple[int, int]:
    """The pservers and trainers ``row``'s stored spec asks for, read without parsing it."""
    stored = row.spec
    return int(stored.get("pservers", {}).get("count", 0)), int(stored.get("trainers", {}).get("count", 1))
