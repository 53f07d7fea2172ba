"""Sparklines of node-wide rates over the last couple of minutes (bpftop style)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from huvm_top import fmt
from huvm_top.metrics import gpu_metric
from huvm_top.rates import History, Rates

SERIES: tuple[str, ...] = ("faults", "evict_to_peer", "evict_to_host", "fetch_from_peer", "giveback")


class RateSparklines(Vertical):
    """One line per series: label, sparkline, current node-wide value."""

    def __init__(self, *, id: str | None = None, size: int = 120) -> None:
        super().__init__(id=id)
        self.history = History(SERIES, size)
        self.lines = {key: Sparkline([], id=f"spark-{key}", summary_function=max) for key in SERIES}
        self.now = {key: Label("-", id=f"spark-now-{key}", classes="spark-now") for key in SERIES}

    def compose(self) -> ComposeResult:
        for key in SERIES:
            m = gpu_metric(key)
            with Horizontal(classes="spark-row"):
                yield Label(m.label, classes="spark-label")
                yield self.lines[key]
                yield self.now[key]

    def update_rates(self, rates: Rates) -> None:
        self.history.add(rates)
        for key in SERIES:
            series = self.history.series(key)
            # Textual scales a sparkline from its minimum: a flat or all-zero series would draw full bars.
            self.lines[key].data = series if len(series) > 1 and max(series) > min(series) else []
            self.now[key].update(fmt.rate(rates.node_total(key)))
