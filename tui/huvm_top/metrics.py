"""The metric table the TUI's columns and labels come from.

huvm generates its metric table from the ``counter|gauge UNIT: help`` comments of the ABI header
(:mod:`huvm.metrics`); this module flattens it into the keys a :class:`~huvm_top.model.Snapshot` carries:
scalars by field name, arrays by index with the index's name in the help (``host_reason[5]``: peer_full).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from huvm import metrics as huvm_metrics


@dataclass(frozen=True)
class Metric:
    """One statistic: ``key`` is the counter key in a :class:`~huvm_top.model.Snapshot`."""

    key: str
    kind: Literal["counter", "gauge"]
    unit: str
    help: str

    @property
    def label(self) -> str:
        """Column label: the key, with ``/s`` for counters (they are shown as rates)."""
        return f"{self.key}/s" if self.kind == "counter" else self.key


def _flatten(table: tuple[huvm_metrics.Metric, ...]) -> tuple[Metric, ...]:
    out: list[Metric] = []
    for m in table:
        if m.length is None:
            out.append(Metric(m.field, m.kind, m.unit, m.help))
            continue
        for i in range(m.length):
            sub = m.label_values[i] if i < len(m.label_values) else str(i)
            out.append(Metric(f"{m.field}[{i}]", m.kind, m.unit, f"{m.help}: {sub}"))
    return tuple(out)


@cache
def gpu_metrics() -> tuple[Metric, ...]:
    """Per-GPU statistics (huvm_gpu_counters_t), in header order."""
    return _flatten(huvm_metrics.GPU_METRICS)


@cache
def pair_metrics() -> tuple[Metric, ...]:
    """Per-pair statistics (huvm_pair_counters_t, owner x holder), in header order."""
    return _flatten(huvm_metrics.PAIR_METRICS)


@cache
def va_space_metrics() -> tuple[Metric, ...]:
    """Per-process statistics (huvm_va_space_info_t)."""
    return _flatten(huvm_metrics.VA_SPACE_METRICS)


def gpu_metric(key: str) -> Metric:
    for m in gpu_metrics():
        if m.key == key:
            return m
    raise KeyError(key)


def pair_metric(key: str) -> Metric:
    for m in pair_metrics():
        if m.key == key:
            return m
    raise KeyError(key)


def reason_key(reason: int) -> str:
    """Counter key of host evictions for one reason: ``host_reason[5]``."""
    return f"host_reason[{reason}]"
