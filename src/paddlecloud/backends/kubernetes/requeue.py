"""Per-object timers of the operator's reconcilers: look at one object again after a delay.

    Requeue(fire)(ns, name, delay) ──▶ threading.Timer ──▶ fire(ns, name)
                                       (one per object: a newer request replaces an older one)

Used by the TrainingJob operator (backoff after a failure, a job's own ``requeue_after``) and the
SampleSet reconciler (a SampleJob at work). ``close`` cancels every timer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Requeue"]


class Requeue:
    def __init__(self, fire: Callable[[str, str], None]) -> None:
        self._fire = fire
        self._timers: dict[tuple[str, str], threading.Timer] = {}
        self._guard = threading.Lock()

    def __call__(self, ns: str, name: str, delay: float) -> None:
        def fire() -> None:
            with self._guard:
                self._timers.pop((ns, name), None)
            self._fire(ns, name)

        timer = threading.Timer(max(delay, 0.05), fire)
        timer.daemon = True
        with self._guard:
            old = self._timers.pop((ns, name), None)
            if old is not None:
                old.cancel()
            self._timers[(ns, name)] = timer
        timer.start()

    def close(self) -> None:
        with self._guard:
            for t in self._timers.values():
                t.cancel()
            self._timers.clear()
