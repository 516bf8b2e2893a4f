"""The in-memory backend: the contract without processes, for controller tests and the conformance suite.

Workers are records in a :class:`MemoryEngine` that the test drives (run, log, exit, lose a node's
workers, report foreign load, make a call raise); the backend declares whatever capabilities its
settings say, and refuses the operations it does not declare (``NotSupported``).
"""

from __future__ import annotations

from paddlecloud.backends.memory.backend import MemoryBackend, MemoryEngine, MemorySettings, create

__all__ = ["MemoryBackend", "MemoryEngine", "MemorySettings", "create"]
