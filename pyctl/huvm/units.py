"""The one grammar of sizes and counts, for the command line, every file and every output.

Sizes: a whole number of bytes (``4096``, ``4096B``), or a number with exactly one of these units:

* IEC (powers of 2): ``KiB`` ``MiB`` ``GiB`` ``TiB``;
* SI (powers of 10): ``kB`` ``MB`` ``GB`` ``TB``.

Units are case-sensitive and a decimal fraction is allowed when the result is a whole number of bytes
(``1.5GiB``, ``0.5 MB``); one space may separate the number from the unit. Everything else is refused with
a message saying what to write instead: ``8G``, ``8gb``, ``8KB`` or ``8gib`` could each mean a power of
2 or of 10, ``1e9``, ``8_000`` and ``0x1000`` are not decimal numbers.

Counts (:func:`parse_count`): decimal digits only, optionally with a leading ``-`` (so that a negative
count is refused as out of range rather than as a malformed number); no ``+``, ``_``, ``0x``, ``0b``.

Printing uses the same units: :func:`format_size` (exact, ``8GiB``, else bytes) and :func:`human_bytes`
(``1.5 GiB``, for tables), so everything the tools print can be read back.

Rates (:func:`parse_rate`, :func:`format_rate`), in whole MB/s as the ABI's ``*_mbyte_per_s`` fields hold
them: a bare number is MB/s (``18000``), else a number with exactly one of the decimal units ``MB/s``
``GB/s`` ``TB/s`` (MB = 10^6 bytes, as for the ABI's link and PCIe bandwidths); a decimal fraction is
allowed when the result is a whole number of MB/s (``1.5GB/s``), one space may separate number and unit.
Binary units (``GiB/s``) and bits (``Gb/s``, ``Gbps``) are refused with a message saying what to write.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: unit -> bytes; the only units accepted or printed.
UNITS: dict[str, int] = {
    "": 1, "B": 1,
    "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "kB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
}
IEC = ("TiB", "GiB", "MiB", "KiB")
_SIZE_RE = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?) ?(?P<unit>[A-Za-z]*)$")
_COUNT_RE = re.compile(r"^-?[0-9]+$")
_EXAMPLES = "e.g. 4096, 512MiB, 8GiB, 8GB"

#: rate unit -> MB/s (10^6 bytes per second); the only rate units accepted or printed.
RATE_UNITS: dict[str, int] = {"": 1, "MB/s": 1, "GB/s": 1000, "TB/s": 1000**2}
_RATE_RE = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?) ?(?P<unit>[A-Za-z/]*)$")
_RATE_EXAMPLES = "e.g. 18000 (MB/s), 500MB/s, 18GB/s"


_PREFIXES: dict[str, tuple[str, str, int, int]] = {
    "k": ("KiB", "kB", 10, 3), "m": ("MiB", "MB", 20, 6), "g": ("GiB", "GB", 30, 9), "t": ("TiB", "TB", 40, 12),
}


def _unit_hint(unit: str) -> str:
    """Why a unit is refused, and what to write instead."""
    low = unit.lower()
    if low[:1] in _PREFIXES and low[1:] in ("", "b", "i", "ib"):
        iec, si, p2, p10 = _PREFIXES[low[0]]
        return f"ambiguous unit {unit!r}: write {iec} (2^{p2} bytes) or {si} (10^{p10} bytes)"
    return f"unknown unit {unit!r} (units: B, {', '.join(u for u in UNITS if len(u) > 1)})"


def parse_size(text: str) -> int:
    """"8GiB" -> 8589934592, "8GB" -> 8000000000, "4096" -> 4096; ValueError (one line) otherwise."""
    s = text.strip()
    m = _SIZE_RE.match(s)
    if m is None:
        raise ValueError(f"not a size: {text!r} ({_EXAMPLES})")
    unit = m.group("unit")
    if unit not in UNITS:
        raise ValueError(f"not a size: {text!r}: {_unit_hint(unit)}")
    value = Fraction(m.group("num")) * UNITS[unit]
    if value.denominator != 1:
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def parse_count(text: str) -> int:
    """A decimal integer as typed on the command line: "16" -> 16, "-1" -> -1; ValueError for "+8",
    "1_0", "0b11", "0x10", "1e3", "" and the like."""
    s = text.strip()
    if not _COUNT_RE.match(s):
        raise ValueError(f"not a decimal integer: {text!r}")
    return int(s)


def parse_rate(text: str) -> int:
    """"18GB/s" -> 18000, "500 MB/s" -> 500, "18000" -> 18000 (MB/s); ValueError (one line) otherwise."""
    s = text.strip()
    m = _RATE_RE.match(s)
    if m is None:
        raise ValueError(f"not a rate: {text!r} ({_RATE_EXAMPLES})")
    unit = m.group("unit")
    if unit not in RATE_UNITS:
        units = ", ".join(u for u in RATE_UNITS if u)
        raise ValueError(f"not a rate: {text!r}: unknown unit {unit!r} (units: {units}; decimal, MB = 10^6 bytes)")
    value = Fraction(m.group("num")) * RATE_UNITS[unit]
    if value.denominator != 1:
        raise ValueError(f"not a whole number of MB/s: {text!r}")
    return int(value)


def format_rate(mbyte_per_s: int) -> str:
    """The largest unit that is exact ("18GB/s", "1500MB/s"): what :func:`parse_rate` reads back."""
    for unit in ("TB/s", "GB/s"):
        mult = RATE_UNITS[unit]
        if mbyte_per_s >= mult and mbyte_per_s % mult == 0:
            return f"{mbyte_per_s // mult}{unit}"
    return f"{mbyte_per_s}MB/s"


def format_size(n: int) -> str:
    """Exact binary size when it is one ("8GiB"), else bytes ("1000000")."""
    for unit in IEC:
        mult = UNITS[unit]
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def human_bytes(n: float) -> str:
    """Approximate, for tables: "1.5 GiB", "512 B"."""
    for unit in IEC:
        mult = UNITS[unit]
        if abs(n) >= mult:
            return f"{n / mult:.1f} {unit}"
    return f"{n:.0f} B"
