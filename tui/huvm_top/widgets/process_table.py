"""Processes (LIST_VA_SPACES): per address space, its owner and the rates of its evictions, fetches and
prefetches, and how much of its data peers hold now (nvitop's process list, for huvm's paths). Columns are
the metrics of huvm_va_space_info_t from the metric table."""

from __future__ import annotations

from textual.widgets import DataTable

from huvm_top import fmt
from huvm_top.metrics import Metric, va_space_metrics
from huvm_top.rates import Rates


def gpu_list(mask: int) -> str:
    """Bit mask of registered GPUs -> ``0,1,3``."""
    return ",".join(str(i) for i in range(32) if mask >> i & 1) or "-"


class ProcessTable(DataTable[str]):
    """Rows ``va<id>``, sorted by data held on peers (most harvested first)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.metrics: tuple[Metric, ...] = va_space_metrics()
        self._rows: tuple[int, ...] = ()

    def on_mount(self) -> None:
        self.add_column("pid", key="pid")
        self.add_column("comm", key="comm")
        self.add_column("gpus", key="gpus")
        for m in self.metrics:
            self.add_column(m.label, key=m.key)

    def update_rates(self, rates: Rates) -> None:
        vas = sorted(rates.snapshot.va_spaces, key=lambda v: (-v.counters.get("harvested_bytes", 0), v.id))
        order = tuple(v.id for v in vas)
        if order != self._rows:  # processes came, went or changed places: rebuild the rows
            self.clear()
            for v in vas:
                self.add_row(str(v.pid), v.comm, gpu_list(v.registered_gpus), *(["-"] * len(self.metrics)),
                             key=f"va{v.id}")
            self._rows = order
        for v in vas:
            values = rates.va_spaces.get(v.id, {})
            for m in self.metrics:
                self.update_cell(f"va{v.id}", m.key, fmt.value(m, values.get(m.key, 0.0)), update_width=True)
