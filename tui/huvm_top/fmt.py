"""How numbers look in the tables: rates with k/M suffixes, bytes in binary units (huvm.units)."""

from __future__ import annotations

from huvm import units

from huvm_top.metrics import Metric


def rate(value: float) -> str:
    """A per-second rate: ``0``, ``2.5``, ``310``, ``12.4k``, ``3.1M``."""
    if value == 0:
        return "0"
    if abs(value) < 10:
        return f"{value:.1f}"
    if abs(value) < 1000:
        return f"{value:.0f}"
    if abs(value) < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def nbytes(value: float) -> str:
    """Bytes for a table cell: ``0``, ``512.0 MiB``, ``1.5 GiB``."""
    return "0" if value == 0 else units.human_bytes(value)


def value(metric: Metric, v: float) -> str:
    """A metric's value: gauges in bytes as bytes, counters as rates (bytes counters as bytes/s)."""
    if metric.kind == "gauge":
        return nbytes(v) if metric.unit == "bytes" else f"{v:.0f}"
    if metric.unit == "bytes":
        return "0" if v == 0 else units.human_bytes(v) + "/s"
    return rate(v)
