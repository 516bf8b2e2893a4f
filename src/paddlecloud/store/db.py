"""Open the database: SQLite (WAL mode) under the data dir by default, any SQLAlchemy URL by option.

``open_database(url)`` creates the engine, applies the connection pragmas for SQLite and upgrades the
schema to Alembic's head before anything reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from paddlecloud.store.changes import ChangeCounters
from paddlecloud.store.writelock import WriterQueue

__all__ = ["Database", "open_database", "sqlite_url"]

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Database:
    """An engine plus a session factory; ``session()`` is one unit of work. ``changes`` counts the
    commits per table (``store.changes``), for readers that cache."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._factory = sessionmaker(engine, expire_on_commit=False)
        self.changes = ChangeCounters()
        self.changes.watch(self._factory)
        if engine.dialect.name == "sqlite":  # one writer at a time, queued here (store.writelock)
            WriterQueue().watch(self._factory)

    def session(self) -> Session:
        return self._factory()

    def dispose(self) -> None:
        self.engine.dispose()


def upgrade(engine: Engine) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_database(url: str) -> Database:
    is_sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {}
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        # as many pooled connections as request threads (anyio's 40): a connection opened and closed
        # per request under load costs more than the query (the pragmas run on each connect)
        kwargs["pool_size"], kwargs["max_overflow"] = 20, 30
    else:
        kwargs["pool_pre_ping"] = True
    engine = create_engine(url, **kwargs)
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    upgrade(engine)
    return Database(engine)
