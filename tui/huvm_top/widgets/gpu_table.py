"""Per-GPU table: memory, lent/harvested bytes and the rates of evictions, fetches, prefetches, give-backs.

Columns are metrics of huvm's metric table (labels are their names; counters shown per second).
"""

from __future__ import annotations

from textual.widgets import DataTable

from huvm_top import fmt
from huvm_top.metrics import Metric, gpu_metric
from huvm_top.model import NodeInfo
from huvm_top.rates import Rates

# Which metrics get a column, in order (the full table is on the help screen).
# Rates a tuner watches first, then the other paths, then the lent/harvested gauges.
COLUMNS: tuple[str, ...] = (
    "faults",
    "evict_to_peer",
    "evict_to_host",
    "fetch_from_peer",
    "fetch_from_host",
    "giveback",
    "preevict_to_peer",
    "remote_map",
    "prefetch_local",
    "prefetch_to_peer",
    "lent_bytes",
    "harvested_bytes",
)


NAME_WIDTH = 24  # longer names are cut (the index column identifies the GPU)


class GpuTable(DataTable[str]):
    """One row per GPU; row key ``gpu<i>``, column keys ``gpu``, ``name``, ``memory`` and metric keys."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.metrics: tuple[Metric, ...] = tuple(gpu_metric(k) for k in COLUMNS)
        self._info: NodeInfo | None = None

    def on_mount(self) -> None:
        self.add_column("gpu", key="gpu")
        self.add_column("name", key="name")
        self.add_column("used/total", key="memory")
        for m in self.metrics:
            self.add_column(m.label, key=m.key)

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        self.clear()
        for g in info.gpus:
            name = g.name if len(g.name) <= NAME_WIDTH else g.name[: NAME_WIDTH - 1] + "\u2026"
            cells = [str(g.index), name if g.present else f"{name} (gone)", fmt.nbytes(g.memory_bytes)]
            cells += ["-"] * len(self.metrics)
            self.add_row(*cells, key=f"gpu{g.index}")

    def update_rates(self, rates: Rates) -> None:
        if self._info is None:
            return
        free = rates.snapshot.free_bytes
        for g in self._info.gpus:
            if g.index >= len(rates.gpus):
                continue
            row = f"gpu{g.index}"
            if g.index < len(free):
                used = g.memory_bytes - free[g.index]
                self.update_cell(row, "memory", f"{fmt.nbytes(used)}/{fmt.nbytes(g.memory_bytes)}", update_width=True)
            values = rates.gpus[g.index]
            for m in self.metrics:
                self.update_cell(row, m.key, fmt.value(m, values.get(m.key, 0.0)), update_width=True)
