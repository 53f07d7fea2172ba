"""Peer matrix: owner (rows) x holder (columns) of one pair metric, ``held_bytes`` first; ``m`` cycles
through the pair metrics of the metric table (evictions, fetches, prefetches, give-backs per second)."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import DataTable

from huvm_top import fmt
from huvm_top.metrics import Metric, pair_metrics
from huvm_top.model import NodeInfo
from huvm_top.rates import Rates


def _order() -> tuple[Metric, ...]:
    ms = pair_metrics()
    return tuple(m for m in ms if m.kind == "gauge") + tuple(m for m in ms if m.kind == "counter")


class PeerMatrix(DataTable[str]):
    """Rows ``own<i>``, columns ``hold<j>``; the diagonal is ``-``."""

    metric_index: reactive[int] = reactive(0)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none")
        self.metrics = _order()
        self._info: NodeInfo | None = None
        self._last: Rates | None = None

    @property
    def metric(self) -> Metric:
        return self.metrics[self.metric_index % len(self.metrics)]

    def next_metric(self) -> None:
        self.metric_index = (self.metric_index + 1) % len(self.metrics)

    def watch_metric_index(self) -> None:
        self.border_title = f"{self.metric.label} (owner \u2193 holder \u2192)"
        self.border_subtitle = self.metric.help
        if self._last is not None:
            self.update_rates(self._last)

    def on_mount(self) -> None:
        self.watch_metric_index()

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        self.clear(columns=True)
        self.add_column("owner", key="owner")
        for g in info.gpus:
            self.add_column(f"gpu{g.index}", key=f"hold{g.index}")
        for g in info.gpus:
            self.add_row(f"gpu{g.index}", *(["-"] * len(info.gpus)), key=f"own{g.index}")

    def update_rates(self, rates: Rates) -> None:
        self._last = rates
        if self._info is None:
            return
        m = self.metric
        n = len(self._info.gpus)
        for o in range(min(n, len(rates.pairs))):
            for h in range(min(n, len(rates.pairs[o]))):
                text = "-" if o == h else fmt.value(m, rates.pairs[o][h].get(m.key, 0.0))
                self.update_cell(f"own{o}", f"hold{h}", text, update_width=True)
