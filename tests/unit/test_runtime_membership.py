"""runtime.membership: what a worker reads of its job's current trainers (the backend's file)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from paddlecloud.runtime import contract as c
from paddlecloud.runtime import membership as m


def _m(version: int, n: int) -> m.Membership:
    return m.Membership(version, n, tuple(f"127.0.0.1:{4000 + i}" for i in range(n)), ())


def test_current_reads_what_the_backend_wrote(tmp_path: Path) -> None:
    path = tmp_path / "membership.json"
    m.write(str(path), _m(5, 2))
    env = {c.MEMBERSHIP_FILE: str(path)}
    assert m.current(env) == _m(5, 2)
    assert not list(tmp_path.glob("*.tmp.*"))  # written through a temporary file, renamed


def test_changes_yields_each_new_membership_once(tmp_path: Path) -> None:
    path = tmp_path / "membership.json"
    m.write(str(path), _m(1, 1))
    env = {c.MEMBERSHIP_FILE: str(path)}
    seen: list[m.Membership] = []

    def watch() -> None:
        for now in m.changes(poll=0.02, environ=env):
            seen.append(now)
            if len(seen) == 2:
                return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    time.sleep(0.1)
    m.write(str(path), _m(2, 3))
    deadline = time.monotonic() + 5
    while len(seen) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    m.write(str(path), _m(2, 3))  # rewritten, same version: not a change
    time.sleep(0.1)
    m.write(str(path), _m(3, 2))
    t.join(timeout=5)
    assert [s.version for s in seen] == [2, 3]
    assert seen[0].trainers == 3 and seen[1].trainer_endpoints == ("127.0.0.1:4000", "127.0.0.1:4001")


def test_without_the_variable_it_says_the_backend_does_not_publish_it() -> None:
    with pytest.raises(m.MembershipUnavailable, match=c.MEMBERSHIP_FILE):
        m.current({})
    with pytest.raises(m.MembershipUnavailable, match="cannot read"):
        m.current({c.MEMBERSHIP_FILE: "/nonexistent/membership.json"})
