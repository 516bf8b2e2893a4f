"""core.names: DNS-1123 labels (job names) and environment variable names."""

from __future__ import annotations

import pytest

from paddlecloud.core.names import NAME_MAX, check_dns1123_label, check_env_name


@pytest.mark.parametrize("name", ["a", "job", "fit-a-line", "a1", "1a", "0", "a" * 63, "x-" * 31 + "y"])
def test_valid_labels_are_returned(name: str) -> None:
    assert check_dns1123_label(name) == name


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "empty"),
        ("a" * 64, "at most 63"),
        ("Job", "DNS-1123"),
        ("UPPER", "DNS-1123"),
        ("-job", "DNS-1123"),
        ("job-", "DNS-1123"),
        ("my_job", "DNS-1123"),
        ("a.b", "DNS-1123"),
        ("a b", "DNS-1123"),
        ("jöb", "DNS-1123"),
    ],
)
def test_invalid_labels_name_the_rule(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_dns1123_label(name)


def test_name_max_is_the_dns_label_limit() -> None:
    assert NAME_MAX == 63


@pytest.mark.parametrize("name", ["job\n", "a\n"])
def test_trailing_newline_is_not_a_valid_label(name: str) -> None:
    with pytest.raises(ValueError):
        check_dns1123_label(name)


@pytest.mark.parametrize("name", ["A", "_", "PATH", "my_var", "X1", "_1"])
def test_valid_env_names(name: str) -> None:
    assert check_env_name(name) == name


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "A=B", "Ä"])
def test_invalid_env_names(name: str) -> None:
    with pytest.raises(ValueError, match="environment variable"):
        check_env_name(name)


def test_env_name_with_trailing_newline_is_invalid() -> None:
    with pytest.raises(ValueError):
        check_env_name("FOO\n")
