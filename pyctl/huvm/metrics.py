"""The metric table: every statistic huvm reports, read from the ABI header's field comments.

A statistics field in ``uvm_huvm_ioctl.h`` carries a comment ``counter|gauge UNIT: help``. This table,
built at import time from those comments, is the single source for the CLI's columns, the Prometheus
exporter's names and help, experiment outputs and the TUI. Adding a counter to the header adds it
everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from . import abi, header

Scope = Literal["gpu", "pair", "va_space"]
Kind = Literal["counter", "gauge"]

STRUCTS: dict[Scope, str] = {
    "gpu": "huvm_gpu_counters_t",
    "pair": "huvm_pair_counters_t",
    "va_space": "huvm_va_space_info_t",
}

_COMMENT_RE = re.compile(r"^(?P<kind>counter|gauge)\s+(?P<unit>\w+)\s*:\s*(?P<help>.*)$", re.S)


@dataclass(frozen=True)
class Metric:
    """One statistic: a field of a counters struct."""

    scope: Scope
    field: str
    kind: Kind
    unit: str
    help: str
    length: int | None = None  # array fields (host_reason[HUVM_REASON_COUNT]); None for scalars
    label: str | None = None  # label naming the array index ("reason")
    label_values: tuple[str, ...] = ()

    @property
    def base_name(self) -> str:
        """Field name with the unit as suffix, Prometheus style (bytes_from_peer -> from_peer_bytes)."""
        name = self.field
        if name.startswith(self.unit + "_"):
            name = name[len(self.unit) + 1 :] + "_" + self.unit
        elif name != self.unit and not name.endswith("_" + self.unit):
            name = name + "_" + self.unit
        return name

    @property
    def prom_name(self) -> str:
        """Prometheus metric name, e.g. huvm_evict_to_peer_chunks_total, huvm_pair_held_bytes."""
        prefix = {"gpu": "huvm_", "pair": "huvm_pair_", "va_space": "huvm_va_space_"}[self.scope]
        return prefix + self.base_name + ("_total" if self.kind == "counter" else "")

    @property
    def column(self) -> str:
        """Short column header for tables."""
        return self.field


def _reason_names() -> tuple[str, ...]:
    names = abi.enum_names("HUVM_REASON_")
    return tuple(names.get(i, str(i)) for i in range(abi.lib.HUVM_REASON_COUNT))


def _label_for(field: str, length: int) -> tuple[str, tuple[str, ...]]:
    if field == "host_reason":
        return "reason", _reason_names()[:length]
    return "index", tuple(str(i) for i in range(length))


def _build() -> tuple[Metric, ...]:
    out: list[Metric] = []
    for scope, struct in STRUCTS.items():
        for f in header.fields_of(struct):
            m = _COMMENT_RE.match(f.comment)
            if not m:
                continue
            kind: Kind = "counter" if m.group("kind") == "counter" else "gauge"
            if f.dims:
                label, values = _label_for(f.name, f.dims[0])
                out.append(Metric(scope, f.name, kind, m.group("unit"), m.group("help").strip(),
                                  f.dims[0], label, values))
            else:
                out.append(Metric(scope, f.name, kind, m.group("unit"), m.group("help").strip()))
    return tuple(out)


METRICS: tuple[Metric, ...] = _build()
GPU_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.scope == "gpu")
PAIR_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.scope == "pair")
VA_SPACE_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS if m.scope == "va_space")
REASON_NAMES: tuple[str, ...] = _reason_names()


def host_reasons() -> dict[int, str]:
    """``host_reason[]`` index -> name, for the reasons an eviction to host can have: every HUVM_REASON_*
    except ``peer`` (the decision to go to a peer is not a reason to go to host; its slot stays 0). The
    exporter's ``reason`` label values and the JSON documents' reason keys."""
    return {i: n for i, n in enumerate(REASON_NAMES) if i != abi.lib.HUVM_REASON_PEER}


def by_field(scope: Scope, field: str) -> Metric:
    for m in METRICS:
        if m.scope == scope and m.field == field:
            return m
    raise KeyError(f"no {scope} metric {field!r}")
