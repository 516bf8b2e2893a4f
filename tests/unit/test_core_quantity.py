"""core.quantity: Kubernetes quantity notation for cpu (millicores) and memory (bytes)."""

from __future__ import annotations

import pytest

from paddlecloud.core.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    human_memory,
    parse_cpu,
    parse_memory,
)

GI = 2**30


@pytest.mark.parametrize(
    ("text", "millicores"),
    [
        ("500m", 500),
        ("1", 1000),
        ("2.5", 2500),
        ("0.5", 500),
        (".5", 500),
        ("1m", 1),
        ("0", 0),
        (" 2 ", 2000),
        (3, 3000),
        (1.5, 1500),
    ],
)
def test_parse_cpu_valid(text: str | int | float, millicores: int) -> None:
    assert parse_cpu(text) == millicores


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("1Gi", GI),
        ("10Gi", 10 * GI),
        ("512Mi", 512 * 2**20),
        ("1G", 10**9),
        ("1k", 1000),
        ("1Ki", 1024),
        ("128974848", 128974848),
        ("1.5Gi", 3 * GI // 2),
        (4096, 4096),
    ],
)
def test_parse_memory_valid(text: str | int, nbytes: int) -> None:
    assert parse_memory(text) == nbytes


@pytest.mark.parametrize("text", ["1x", "", "-1", "1.0001m", "abc", "1Gb", "1Gi", "1k", "1..5", "1e3", "m"])
def test_parse_cpu_invalid(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_cpu(text)


@pytest.mark.parametrize("text", ["1x", "", "-1", "abc", "1Gb", "0.5", "1m", "1.0001", "Gi", "1 Gi"])
def test_parse_memory_invalid(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_memory(text)


def test_quantity_error_is_a_value_error_and_names_the_input() -> None:
    with pytest.raises(ValueError, match="'1x'"):
        parse_cpu("1x")


def test_finer_than_a_millicore_says_so() -> None:
    with pytest.raises(QuantityError, match="millicore"):
        parse_cpu("1.0001m")


@pytest.mark.parametrize(
    ("millicores", "text"), [(500, "500m"), (2000, "2"), (1500, "1500m"), (0, "0"), (1, "1m")]
)
def test_format_cpu(millicores: int, text: str) -> None:
    assert format_cpu(millicores) == text
    assert parse_cpu(text) == millicores


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (GI, "1Gi"),
        (10 * GI, "10Gi"),
        (512 * 2**20, "512Mi"),
        (1536 * 2**20, "1536Mi"),
        (10**9, "1000000000"),
        (128974848, "123Mi"),
        (1000, "1000"),
        (0, "0"),
        (2**40, "1Ti"),
    ],
)
def test_format_memory_round_trips(nbytes: int, text: str) -> None:
    assert format_memory(nbytes) == text
    assert parse_memory(text) == nbytes


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0"),
        (512, "512"),
        (2**10, "1Ki"),
        (512 * 2**20, "512Mi"),
        (2**30, "1Gi"),
        (1536 * 2**20, "1.5Gi"),  # exact too, in the larger unit
        (24683656 * 2**10, "23.5Gi"),  # this machine's memory, which format_memory writes 24683656Ki
        (2**30 - 10 * 2**10, "1023.9Mi"),  # rounded down: never shown as the 1Gi it does not reach
        (3 * 2**30 + 1, "3.0Gi"),  # not exact: the decimal says so
        (100 * 2**30, "100Gi"),
        (-(2**30), "-1Gi"),
    ],
)
def test_human_memory(nbytes: int, text: str) -> None:
    assert human_memory(nbytes) == text


def test_human_memory_never_rounds_up_past_what_there_is() -> None:
    for n in (2**30 - 1, 24 * 2**30 - 1, 6 * 2**20 - 1, 24683656 * 2**10):
        shown = human_memory(n)
        number, unit = float(shown[:-2]), parse_memory("1" + shown[-2:])
        assert "." in shown  # none of them is a whole number of a unit
        assert number * unit <= n < (number + 0.1) * unit
