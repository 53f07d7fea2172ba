"""The one grammar of sizes, counts and rates (huvm.units): what it accepts, what it refuses and why, and that
every size and rate huvm prints reads back."""

from __future__ import annotations

import random

import pytest
from huvm.units import UNITS, format_rate, format_size, human_bytes, parse_count, parse_rate, parse_size


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


@pytest.mark.parametrize(("text", "mbyte_per_s"), [
    ("18000", 18000), ("18GB/s", 18000), ("18000MB/s", 18000), ("500 MB/s", 500), ("1.5GB/s", 1500),
    ("2TB/s", 2_000_000), ("0.105GB/s", 105), (" 105MB/s ", 105), ("0", 0),
])
def test_rates_accepted(text: str, mbyte_per_s: int) -> None:
    assert parse_rate(text) == mbyte_per_s


@pytest.mark.parametrize(("text", "why"), [
    ("18GiB/s", "unknown unit 'GiB/s'"), ("18Gb/s", "unknown unit 'Gb/s'"), ("18Gbps", "unknown unit 'Gbps'"),
    ("18gb/s", "unknown unit 'gb/s'"), ("18GB", "unknown unit 'GB'"), ("18 G", "unknown unit 'G'"),
    ("1e3", "not a rate"), ("-5", "not a rate"), ("18_000", "not a rate"), ("", "not a rate"),
    ("GB/s", "not a rate"), ("0.5MB/s", "not a whole number of MB/s"), ("1.0001GB/s", "not a whole number"),
])
def test_rates_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="^not a") as exc:
        parse_rate(text)
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_printed_rates_read_back() -> None:
    assert (format_rate(18000), format_rate(1500), format_rate(2_000_000), format_rate(105)) == \
        ("18GB/s", "1500MB/s", "2TB/s", "105MB/s")
    r = random.Random(18)
    for n in [1, 999, 1000, 1 << 24, *(r.randrange(1 << 24) for _ in range(200)),
              *(r.randrange(99) * 1000 for _ in range(50))]:
        assert parse_rate(format_rate(n)) == n
