"""store: open_database migrates with Alembic to head, in WAL mode, idempotently, matching the ORM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, select, text

from paddlecloud.store import Database, UserRow, open_database
from paddlecloud.store.db import MIGRATIONS, sqlite_url
from paddlecloud.store.tables import Base

TABLES = {
    "alembic_version",
    "users",
    "jobs",
    "workers",
    "events",
    "job_tokens",
    "task_queues",
    "tasks",
    "samplesets",
    "sample_jobs",
    "adaptive_states",
    "adaptive_reports",
    "registry_logins",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(sqlite_url(tmp_path / "pc.db"))
    yield database
    database.dispose()


def alembic_head() -> str | None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def test_tables_exist(db: Database) -> None:
    assert set(inspect(db.engine).get_table_names()) == TABLES


def test_migrated_to_head(db: Database) -> None:
    with db.engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    assert current is not None
    assert current == alembic_head()


@pytest.mark.parametrize(
    ("pragma", "value"), [("journal_mode", "wal"), ("foreign_keys", 1), ("busy_timeout", 10000)]
)
def test_sqlite_pragmas(db: Database, pragma: str, value: object) -> None:
    with db.engine.connect() as conn:
        assert conn.execute(text(f"PRAGMA {pragma}")).scalar() == value


def test_open_twice_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "pc.db")
    first = open_database(url)
    with first.session() as s:
        s.add(UserRow(name="alice", token_sha256="0" * 64, is_admin=False, created_at=1.0))
        s.commit()
    first.dispose()
    second = open_database(url)
    try:
        with second.session() as s:
            assert s.scalars(select(UserRow.name)).all() == ["alice"]
        with second.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
            assert MigrationContext.configure(conn).get_current_revision() == alembic_head()
    finally:
        second.dispose()


def test_alembic_head_matches_orm_metadata(db: Database) -> None:
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        diffs = compare_metadata(ctx, Base.metadata)
    assert diffs == []


def test_deleting_a_job_cascades_in_sql(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (id, user, name, package_id, framework, spec, priority, phase, reason, "
                "message, submitted_at, stop_requested, output_dir) VALUES "
                "(1, 'u', 'j', 'p', 'none', '{}', 0, 'Queued', '', '', 1.0, 0, '')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO events (job_id, time, type, reason, message) VALUES (1, 1.0, 'Normal', 'r', 'm')"
            )
        )
        conn.execute(text("DELETE FROM jobs WHERE id = 1"))
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == 0
