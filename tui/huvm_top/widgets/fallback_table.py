"""Host fallbacks by reason: per GPU, evictions that went to host memory per second, one column per
``HUVM_REASON_*`` (from the metric table's ``host_reason`` entries; ``peer`` never goes to host)."""

from __future__ import annotations

from textual.widgets import DataTable

from huvm_top import abi, fmt
from huvm_top.metrics import Metric, gpu_metric, reason_key
from huvm_top.model import NodeInfo
from huvm_top.rates import Rates


class FallbackTable(DataTable[str]):
    """Rows ``gpu<i>``, columns ``host_reason[<r>]`` labelled by reason name."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="none")
        names = abi.reason_names()
        self.metrics: tuple[Metric, ...] = tuple(
            gpu_metric(reason_key(r)) for r in range(len(names)) if names[r] != "peer"
        )
        self._labels = {reason_key(r): names[r] for r in range(len(names))}
        self._info: NodeInfo | None = None

    def on_mount(self) -> None:
        self.add_column("gpu", key="gpu")
        for m in self.metrics:
            self.add_column(self._labels[m.key], key=m.key)

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        self.clear()
        for g in info.gpus:
            self.add_row(str(g.index), *(["-"] * len(self.metrics)), key=f"gpu{g.index}")

    def update_rates(self, rates: Rates) -> None:
        if self._info is None:
            return
        for g in self._info.gpus:
            if g.index < len(rates.gpus):
                for m in self.metrics:
                    self.update_cell(f"gpu{g.index}", m.key, fmt.rate(rates.gpus[g.index].get(m.key, 0.0)),
                                     update_width=True)
