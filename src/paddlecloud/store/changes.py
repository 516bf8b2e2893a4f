"""Write hooks: know, per session, which tables it writes, and count commits per table.

    a row INSERTed / UPDATEd / DELETEd by a flush ──mapper before_* events──┐
    Session.execute(insert | update | delete statement) ──do_orm_execute───┼─▶ on_write(session, table)
                                                                            │   (every hook of the
                                                                            │    session's factory)
    Session commit ──after_commit──▶ ChangeCounters.bump(the tables written) ◀┘
    Session rollback ──after_rollback──▶ the notes are dropped

Only rows that are really written count (mapper events fire per statement row, not for objects that
were merely touched), so a session holding many loaded rows costs nothing extra per flush.

Readers that cache what they built from the database (the job list, token lookups;
``controller.model.readcache``) remember the counter they built it at and rebuild when it moved: a write
committed through any session of this process is seen by the very next read, whichever code path
made it. Writes from other processes on the same database are not seen (one server per database;
callers bound their caches' age as well). ``store.writelock`` uses the same hook to queue SQLite's
writers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper, ORMExecuteState, Session, object_session, sessionmaker

from paddlecloud.store.tables import Base

__all__ = ["ChangeCounters", "WriteHook", "add_write_hook"]

#: called with the session and the table name before each write it makes
WriteHook = Callable[[Session, str], None]

_HOOKS = "paddlecloud.write_hooks"
_NOTE = "paddlecloud.changed_tables"


def add_write_hook(factory: sessionmaker[Session], hook: WriteHook) -> None:
    """Call ``hook`` before every write of every session ``factory`` makes."""
    hooks: list[WriteHook] = factory.kw.setdefault("info", {}).setdefault(_HOOKS, [])
    hooks.append(hook)
    if not event.contains(factory, "do_orm_execute", _on_statement):
        event.listen(factory, "do_orm_execute", _on_statement)


def _fire(session: Session | None, table: str) -> None:
    if session is None:
        return
    for hook in session.info.get(_HOOKS, ()):
        hook(session, table)


def _on_row(_mapper: Mapper[Any], _conn: Any, target: Any) -> None:
    _fire(object_session(target), target.__table__.name)


def _on_statement(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        name = getattr(getattr(state.statement, "table", None), "name", None)
        if isinstance(name, str):
            _fire(state.session, name)


for _kind in ("before_insert", "before_update", "before_delete"):
    event.listen(Base, _kind, _on_row, propagate=True)


class ChangeCounters:
    """Monotonic counters per table name, bumped after each commit that wrote to the table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def get(self, *tables: str) -> int:
        """The sum of the counters of ``tables``: changes whenever any of them was written."""
        counts = self._counts
        return sum(counts.get(t, 0) for t in tables)

    def bump(self, tables: set[str]) -> None:
        with self._lock:
            for t in tables:
                self._counts[t] = self._counts.get(t, 0) + 1

    def watch(self, factory: sessionmaker[Session]) -> None:
        """Count the commits of every session ``factory`` makes."""
        add_write_hook(factory, _note)
        event.listen(factory, "after_commit", self._after_commit)
        event.listen(factory, "after_rollback", _forget)

    def _after_commit(self, session: Session) -> None:
        tables: set[str] | None = session.info.pop(_NOTE, None)
        if tables:
            self.bump(tables)


def _note(session: Session, table: str) -> None:
    tables: set[str] = session.info.setdefault(_NOTE, set())
    tables.add(table)


def _forget(session: Session) -> None:
    session.info.pop(_NOTE, None)
