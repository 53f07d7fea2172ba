"""Parsing and printing of sizes ("8GiB", "512 MiB", "unlimited") and durations for the CLI and files."""

from __future__ import annotations

import re

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1000, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(?P<num>\d+(\.\d+)?)\s*(?P<unit>[a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """"8GiB" -> 8589934592; "2M" -> 2 MiB (binary unless the unit says KB/MB/GB/TB); ValueError if bad."""
    m = _SIZE_RE.match(text)
    unit = m.group("unit").lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 512MiB, 8GiB)")
    value = float(m.group("num")) * _UNITS[unit] if "." in m.group("num") else int(m.group("num")) * _UNITS[unit]
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def format_size(n: int) -> str:
    """Exact binary size when it is one ("8GiB"), else bytes."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def human_bytes(n: float) -> str:
    """Approximate, for tables: 1.5 GiB."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= mult:
            return f"{n / mult:.1f} {unit}"
    return f"{n:.0f} B"
