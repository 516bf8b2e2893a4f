"""Two servers on one PostgreSQL database: two admins revoking each other at the same moment, each
through its own server (so no process lock is shared), leave exactly one admin: the admins' rows are
locked ``FOR UPDATE`` and the second change finds its caller no longer an admin."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.api.errors import Forbidden
from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.controller import Identity, Platform, PlatformConfig
from paddlecloud.core.clock import ManualClock

from .postgres import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ADMIN = Identity("anyone", is_admin=True)


@pytest.fixture
def servers(postgres: str, tmp_path: Path) -> Iterator[list[Platform]]:
    url = fresh_database(postgres)
    opened = [
        Platform.open(
            PlatformConfig(
                data_dir=tmp_path / f"data{i}",
                database_url=url,
                backend_settings=LocalSettings(nodes=NodeShape(count=1)),
            ),
            clock=ManualClock(),
        )
        for i in range(2)
    ]
    yield opened
    for p in opened:
        p.close()


def revoke_each_other(servers: list[Platform]) -> dict[str, str]:
    """root (through server 0) revokes ops while ops (through server 1) revokes root, at once."""
    outcome: dict[str, str] = {}
    start = threading.Barrier(2)

    def revoke(server: Platform, caller: str, target: str) -> None:
        start.wait(timeout=10)
        with server.ctx.session() as s:
            try:
                server.users.set_admin(s, Identity(caller, is_admin=True), target, False)
                outcome[caller] = "revoked"
            except Forbidden:
                outcome[caller] = "forbidden"

    threads = [
        threading.Thread(target=revoke, args=(servers[0], "root", "ops")),
        threading.Thread(target=revoke, args=(servers[1], "ops", "root")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return outcome


def admins(server: Platform) -> list[str]:
    with server.ctx.session() as s:
        return [u.name for u in server.users.list_users(s, ADMIN).items if u.is_admin]


def test_two_admins_on_two_servers_revoking_each_other_leave_one(servers: list[Platform]) -> None:
    servers[0].ensure_user("root", admin=True)
    servers[0].ensure_user("ops", admin=True)
    for _ in range(5):  # the two meet in whatever order the machine gives each time
        outcome = revoke_each_other(servers)
        assert sorted(outcome.values()) == ["forbidden", "revoked"], outcome
        winner = next(c for c, o in outcome.items() if o == "revoked")
        assert admins(servers[0]) == [winner]
        with servers[0].ctx.session() as s:  # both admins again for the next round
            servers[0].users.set_admin(s, Identity(winner, True), "ops" if winner == "root" else "root", True)
