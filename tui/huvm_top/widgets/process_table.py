"""Processes (LIST_VA_SPACES): per address space, its owner and the rates of its evictions, fetches and
prefetches, and how much of its data peers hold now (nvitop's process list, for huvm's paths). Columns are
the metrics of huvm_va_space_info_t from the metric table.

``s`` cycles the sort column (data on peers first by default); a filter (``/``) keeps the processes whose
pid or command contains the text.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from huvm_top import fmt
from huvm_top.metrics import Metric, va_space_metrics
from huvm_top.model import VaSpace
from huvm_top.rates import Rates


def gpu_list(mask: int) -> str:
    """Bit mask of registered GPUs -> ``0,1,3``."""
    return ",".join(str(i) for i in range(32) if mask >> i & 1) or "-"


class ProcessTable(DataTable[str | Text]):
    """Rows ``va<id>``, sorted by ``sort_key`` (a metric key, ``pid`` or ``comm``), filtered by ``filter``."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.metrics: tuple[Metric, ...] = va_space_metrics()
        self.sort_keys: tuple[str, ...] = ("harvested_bytes", *(m.key for m in self.metrics
                                                                if m.key != "harvested_bytes"), "pid", "comm")
        self.sort_key = self.sort_keys[0]
        self.filter = ""
        self._rows: tuple[int, ...] = ()
        self._last: Rates | None = None

    def on_mount(self) -> None:
        self.add_column(Text("pid", justify="right"), key="pid")
        self.add_column("comm", key="comm")
        self.add_column("gpus", key="gpus")
        for m in self.metrics:
            self.add_column(Text(m.label, justify="right"), key=m.key)
        self._caption()

    def _caption(self) -> None:
        order = "\u2191" if self.sort_key in ("pid", "comm") else "\u2193"
        flt = f" \u00b7 filter: {self.filter}" if self.filter else ""
        self.border_subtitle = f"sort: {self.sort_key} {order} (s){flt} (/)"

    def next_sort(self) -> None:
        self.sort_key = self.sort_keys[(self.sort_keys.index(self.sort_key) + 1) % len(self.sort_keys)]
        self._refresh_now()

    def set_filter(self, text: str) -> None:
        self.filter = text.strip()
        self._refresh_now()

    def _refresh_now(self) -> None:
        self._caption()
        if self._last is not None:
            self.update_rates(self._last)

    def _order(self, rates: Rates, v: VaSpace) -> tuple[float | str, ...]:
        if self.sort_key == "pid":
            return (v.pid, v.id)
        if self.sort_key == "comm":
            return (v.comm, v.pid)
        value = rates.va_spaces.get(v.id, {}).get(self.sort_key, float(v.counters.get(self.sort_key, 0)))
        return (-value, v.id)

    def shown(self, rates: Rates) -> list[VaSpace]:
        """The processes shown, in order."""
        text = self.filter.lower()
        vas = [v for v in rates.snapshot.va_spaces if not text or text in v.comm.lower() or text in str(v.pid)]
        return sorted(vas, key=lambda v: self._order(rates, v))

    def update_rates(self, rates: Rates) -> None:
        self._last = rates
        vas = self.shown(rates)
        order = tuple(v.id for v in vas)
        if order != self._rows:  # processes came, went, changed places or were filtered: rebuild the rows
            self.clear()
            for v in vas:
                self.add_row(Text(str(v.pid), justify="right"), v.comm, gpu_list(v.registered_gpus),
                             *([Text("-", justify="right")] * len(self.metrics)), key=f"va{v.id}")
            self._rows = order
        for v in vas:
            values = rates.va_spaces.get(v.id, {})
            for m in self.metrics:
                self.update_cell(f"va{v.id}", m.key, Text(fmt.value(m, values.get(m.key, 0.0)), justify="right"),
                                 update_width=True)
