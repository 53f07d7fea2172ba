"""The one grammar of sizes and counts (huvm.units): what it accepts, what it refuses and why, and that
every size huvm prints reads back."""

from __future__ import annotations

import random

import pytest
from huvm.units import UNITS, format_size, human_bytes, parse_count, parse_size


@pytest.mark.parametrize(("text", "value"), [
    ("4096", 4096), ("4096B", 4096), ("8KiB", 8 << 10), ("512MiB", 512 << 20), ("8GiB", 8 << 30),
    ("2TiB", 2 << 40), ("8kB", 8000), ("8MB", 8 * 10**6), ("8GB", 8 * 10**9), ("1TB", 10**12),
    ("512 MiB", 512 << 20), ("1.5GiB", 3 << 29), ("0.5 MB", 500_000), (" 8GiB ", 8 << 30),
])
def test_accepted(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "why"), [
    ("8gb", "ambiguous unit 'gb': write GiB (2^30 bytes) or GB (10^9 bytes)"),
    ("8G", "ambiguous unit 'G'"), ("8g", "ambiguous unit 'g'"), ("8KB", "write KiB (2^10 bytes) or kB"),
    ("8K", "ambiguous unit 'K'"), ("8M", "ambiguous unit 'M'"), ("8mb", "ambiguous unit 'mb'"),
    ("8gib", "ambiguous unit 'gib'"), ("8 bytes", "unknown unit 'bytes'"), ("8b", "unknown unit 'b'"),
    ("8PiB", "unknown unit 'PiB'"), ("1e9", "not a size"), ("8_000", "not a size"), ("0x1000", "not a size"),
    ("-1", "not a size"), ("+8", "not a size"), ("", "not a size"), ("8  GiB", "not a size"),
    ("1.0000001GiB", "not a whole number of bytes"), ("0.1B", "not a whole number of bytes"),
])
def test_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="^not a") as exc:
        parse_size(text)
    assert why in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text", ["+8", "1_0", "0b11", "0x10", "1e3", "8.0", "", " ", "--1", "٣"])
def test_counts_are_decimal_digits(text: str) -> None:
    with pytest.raises(ValueError, match="not a decimal integer"):
        parse_count(text)


def test_counts() -> None:
    assert parse_count("16") == 16 and parse_count("-1") == -1 and parse_count(" 007 ") == 7


def test_printed_sizes_read_back() -> None:
    r = random.Random(15)
    for n in [0, 1, 1023, 1024, 3 << 29, 1 << 40, *(r.randrange(1 << 45) for _ in range(200)),
              *(r.randrange(1 << 20) << 20 for _ in range(100))]:
        assert parse_size(format_size(n)) == n
        number, unit = human_bytes(n).split(" ")
        assert unit in UNITS and abs(float(number) * UNITS[unit] - n) <= 0.0501 * UNITS[unit]  # one decimal
