"""The default user's token (``server/main.py``): only in the client config, never in the data dir.

005407f kept it in ``<data-dir>/default-user.token``, where any job could read it and become admin.
``up`` now hands back the token the client config holds when it still authenticates as the default
admin, else issues a new one; a token file an older version left is used once and removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paddlecloud.api.errors import Unauthorized
from paddlecloud.backends.local import LocalSettings
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.server.main import LEGACY_TOKEN_FILE, prepare

pytestmark = pytest.mark.timeout(60)

Who = Callable[[str], tuple[str, bool]]


@pytest.fixture
def config(tmp_path: Path) -> PlatformConfig:
    return PlatformConfig(data_dir=tmp_path / "data", backend_settings=LocalSettings(isolation="none"))


@pytest.fixture
def who(config: PlatformConfig) -> Iterator[Who]:
    """``who(token)``: (user, is admin) as a fresh open of the data dir sees it."""
    opened: list[Platform] = []

    def check(token: str) -> tuple[str, bool]:
        opened.append(Platform.open(config))
        identity = opened[-1].authenticate(token)
        return identity.name, identity.is_admin

    yield check
    for p in opened:
        p.close()


def _files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_up_issues_a_token_that_no_file_of_the_data_dir_holds(config: PlatformConfig, who: Who) -> None:
    token = prepare(config).token
    assert who(token) == ("default", True)
    assert _files_holding(config.data_dir, token) == []
    assert not (config.data_dir / LEGACY_TOKEN_FILE).exists()


def test_up_again_hands_back_the_clients_token_or_a_new_one(config: PlatformConfig, who: Who) -> None:
    first = prepare(config).token
    assert prepare(config, [first]).token == first  # the same: copies elsewhere keep working
    assert who(first) == ("default", True)

    fresh = prepare(config, ["pc_not-a-token"]).token
    assert fresh != first and who(fresh) == ("default", True)
    with pytest.raises(Unauthorized):
        who(first)  # rotated


def test_a_token_of_another_user_is_not_taken_for_the_defaults(config: PlatformConfig, who: Who) -> None:
    prepare(config)
    platform = Platform.open(config)
    try:
        alice = platform.ensure_user("alice")
    finally:
        platform.close()
    token = prepare(config, [alice]).token
    assert token != alice and who(token) == ("default", True) and who(alice) == ("alice", False)


def test_a_token_file_left_by_an_older_version_is_used_once_and_removed(
    config: PlatformConfig, who: Who
) -> None:
    old = prepare(config).token
    legacy = config.data_dir / LEGACY_TOKEN_FILE
    legacy.write_text(old + "\n")
    assert prepare(config).token == old  # the client config lost it; the old file still had it
    assert not legacy.exists() and who(old) == ("default", True)
    assert _files_holding(config.data_dir, old) == []
