"""History graphs, one per GPU plus the node total, of one metric over the last refreshes (bpftop style).

Each row is a label, a sparkline, its scale (the lowest and highest value it draws, in the metric's unit)
and the value now. ``g`` cycles the metric (rates of faults, evictions, fetches and give-backs; the lent
and harvested gauges).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from huvm_top import fmt
from huvm_top.metrics import Metric, gpu_metric
from huvm_top.model import NodeInfo
from huvm_top.rates import History, Rates

SERIES: tuple[str, ...] = ("faults", "evict_to_peer", "evict_to_host", "fetch_from_peer", "giveback",
                           "lent_bytes", "harvested_bytes")


class GpuGraphs(Vertical):
    """Row ``node`` (all GPUs), then ``gpu<i>``; ``metric`` is the metric drawn."""

    def __init__(self, *, id: str | None = None, size: int = 120) -> None:
        super().__init__(id=id)
        self.history = History(SERIES, size)
        self.metric_index = 0
        self._info: NodeInfo | None = None
        self._last: Rates | None = None
        self._rows: list[str] = ["node"]

    @property
    def metric(self) -> Metric:
        return gpu_metric(SERIES[self.metric_index % len(SERIES)])

    def compose(self) -> ComposeResult:
        yield self._row("node")

    def _row(self, name: str) -> Horizontal:
        return Horizontal(Label(name, classes="graph-label"),
                          Sparkline([], id=f"spark-{name}", summary_function=max),
                          Label("", id=f"scale-{name}", classes="graph-scale"),
                          Label("-", id=f"now-{name}", classes="graph-now"),
                          classes="graph-row", id=f"graph-{name}")

    def on_mount(self) -> None:
        self._title()

    def _title(self) -> None:
        m = self.metric
        self.border_title = f"history: {m.label} (g: next metric)"
        self.border_subtitle = m.help

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        wanted = ["node", *(f"gpu{g.index}" for g in info.gpus)]
        for name in self._rows:
            if name not in wanted:
                self.query_one(f"#graph-{name}").remove()
        for name in wanted:
            if name not in self._rows:
                self.mount(self._row(name))
        self._rows = wanted

    def next_metric(self) -> None:
        self.metric_index = (self.metric_index + 1) % len(SERIES)
        self._title()
        if self._last is not None:
            self._draw(self._last)

    def update_rates(self, rates: Rates) -> None:
        self.history.add(rates)
        self._last = rates
        self._draw(rates)

    def scale(self, name: str) -> tuple[float, float] | None:
        """(lowest, highest) of the series drawn in row ``name``, None before two samples."""
        series = self._series(name)
        return (min(series), max(series)) if len(series) > 1 else None

    def _series(self, name: str) -> list[float]:
        key = self.metric.key
        return self.history.series(key) if name == "node" else self.history.series(key, int(name[3:]))

    def _draw(self, rates: Rates) -> None:
        m = self.metric
        for name in self._rows:
            try:
                spark = self.query_one(f"#spark-{name}", Sparkline)
                scale = self.query_one(f"#scale-{name}", Label)
                now = self.query_one(f"#now-{name}", Label)
            except Exception:  # noqa: BLE001 - a row still being mounted: drawn on the next refresh
                continue
            series = self._series(name)
            # Textual scales a sparkline from its minimum: a flat series would draw full bars, so none is drawn
            spark.data = series if len(series) > 1 and max(series) > min(series) else []
            lo_hi = self.scale(name)
            scale.update(f"{fmt.value(m, lo_hi[0])}\u2026{fmt.value(m, lo_hi[1])}" if lo_hi else "")
            gpu = None if name == "node" else int(name[3:])
            value = rates.node_total(m.key) if gpu is None else (
                rates.gpus[gpu].get(m.key, 0.0) if gpu < len(rates.gpus) else 0.0)
            now.update(fmt.value(m, value))
