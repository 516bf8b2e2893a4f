"""A throw-away PostgreSQL cluster for tests: initdb in a temp dir, listening on 127.0.0.1 only."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text

from .conftest import free_port

_databases = itertools.count()


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    if not found:
        raise RuntimeError(
            f"{name} not found: install PostgreSQL (scripts/ensure-system-packages.sh postgresql)"
        )
    return found


@contextmanager
def postgres_cluster() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh cluster; stops and removes it afterwards.

    The cluster lives in its own directory under the system temp dir (pytest's are private to root,
    and PostgreSQL runs as the ``postgres`` user when the tests run as root).
    """
    base = Path(tempfile.mkdtemp(prefix="paddlecloud-pg-"))
    data, sock = base / "pgdata", base / "pgsock"
    sock.mkdir(parents=True)
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    initdb = [_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    subprocess.run([*as_user, *initdb], check=True, capture_output=True)
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sock} -c fsync=off"
    subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-o", opts, "-w", "-l", str(base / "pg.log"),
                    "start"], check=True, capture_output=True)  # fmt: skip
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       check=False, capture_output=True)  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(server: str) -> str:
    """A new, empty database on the cluster at ``server`` (a URL from :func:`postgres_cluster`)."""
    name = f"test_{os.getpid()}_{next(_databases)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return f"{server.rpartition('/')[0]}/{name}"
