"""core.netaddr: which hosts and ``host:port`` targets are this machine's loopback."""

from __future__ import annotations

import pytest

from paddlecloud.core.netaddr import host_of, is_loopback


@pytest.mark.parametrize(
    ("target", "host"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("[::1]:80", "::1"),
        ("head:9", "head"),
        ("head", "head"),
        ("fe80::1", "fe80::1"),
        ("", ""),
    ],
)
def test_host_of_strips_the_port_only(target: str, host: str) -> None:
    assert host_of(target) == host


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "localhost", "", "::1%lo"])
def test_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["10.79.0.1", "head", "fe80::1%eth0", "0.0.0.0x"])
def test_not_loopback(host: str) -> None:
    assert not is_loopback(host)
