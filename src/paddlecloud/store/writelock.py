"""One writer at a time on SQLite, queued in this process instead of polling the database file.

SQLite allows one write transaction at a time; a second writer gets ``SQLITE_BUSY`` and its busy
handler sleeps and retries (1, 2, 5, ... 100 ms). Under many concurrent request threads (submits)
most of their time goes into those sleeps, and a writer can lose the race again and again. This
takes a process-wide lock just before a session's first write and releases it when its transaction
ends, so writers wait in a queue and go the moment the previous one commits:

    first row written / write statement (``store.changes`` write hook)
        └─▶ acquire (once per transaction; at most ``timeout`` s, then SQLite's own handler)
    Session commit / rollback / close  ──after_transaction_end──▶ release

The lock mirrors the database's own write lock (held from the first write to the end of the
transaction), so it adds no waiting that SQLite would not impose; the bounded acquire keeps a
lock-order mistake elsewhere from turning into a hang (it degrades to SQLite's busy timeout).
PostgreSQL needs none of it: its writers lock rows, not the database.
"""

from __future__ import annotations

import threading

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from paddlecloud.store.changes import add_write_hook

__all__ = ["WriterQueue"]

_HELD = "paddlecloud.write_lock_held"


class WriterQueue:
    def __init__(self, timeout: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._timeout = timeout

    def watch(self, factory: sessionmaker[Session]) -> None:
        add_write_hook(factory, self._before_write)
        event.listen(factory, "after_transaction_end", self._after_end)

    def _before_write(self, session: Session, _table: str) -> None:
        if _HELD not in session.info:
            session.info[_HELD] = self._lock.acquire(timeout=self._timeout)

    def _after_end(self, session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None and session.info.pop(_HELD, False):
            self._lock.release()
