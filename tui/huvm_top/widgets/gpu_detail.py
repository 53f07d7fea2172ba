"""One GPU in detail: who it is, its memory split, every per-GPU metric of the metric table, and its data on
each peer (as owner) and the peers' data it holds (as holder). ``enter`` on a row of the GPU table selects
the GPU shown here."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from huvm_top import fmt
from huvm_top.metrics import gpu_metrics
from huvm_top.model import NodeInfo
from huvm_top.rates import Rates
from huvm_top.widgets.gpu_table import memory_bar, right, split_memory


class GpuDetail(Vertical):
    """``gpu`` is the GPU index shown (None: none selected yet)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpu: int | None = None
        self._info: NodeInfo | None = None
        self._last: Rates | None = None
        self._keys: list[str] = []
        self.header = Static("select a GPU: enter on its row in the GPU table", id="detail-header")
        self.table: DataTable[str | Text] = DataTable(id="detail-metrics", zebra_stripes=True, cursor_type="row")

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.table

    def on_mount(self) -> None:
        self.table.add_column("metric", key="metric")
        self.table.add_column(right("value"), key="value")
        self.table.add_column("help", key="help")

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        if self.gpu is not None and all(g.index != self.gpu for g in info.gpus):
            self.gpu = None
        if self.gpu is None and info.gpus:
            self.gpu = info.gpus[0].index
        self._draw()

    def select(self, gpu: int) -> None:
        self.gpu = gpu
        self._keys = []
        self._draw()

    def update_rates(self, rates: Rates) -> None:
        self._last = rates
        self._draw()

    def _draw(self) -> None:
        info, rates, i = self._info, self._last, self.gpu
        if info is None or i is None:
            return
        g = next((x for x in info.gpus if x.index == i), None)
        if g is None:
            return
        lines = [f"gpu{g.index}  {g.name}  {g.uuid}{'' if g.present else '  (gone)'}"]
        values = rates.gpus[i] if rates is not None and i < len(rates.gpus) else {}
        if rates is not None and i < len(rates.snapshot.free_bytes):
            lent_now = int(values.get("lent_bytes", 0))
            own, lent, used = split_memory(g.memory_bytes, rates.snapshot.free_bytes[i], lent_now)
            bar = memory_bar(own, lent, g.memory_bytes, width=30)
            head = Text("\n".join(lines) + "\n")
            head.append("memory ")
            head.append(bar)
            head.append(f"  own {fmt.nbytes(own)}, lent {fmt.nbytes(lent)}, free "
                        f"{fmt.nbytes(max(g.memory_bytes - used, 0))} of {fmt.nbytes(g.memory_bytes)}; "
                        f"harvested (on peers) {fmt.nbytes(values.get('harvested_bytes', 0))}")
            self.header.update(head)
        else:
            self.header.update("\n".join(lines))
        self.border_title = f"gpu{g.index} in detail"
        rows: list[tuple[str, str, str, str]] = [
            (m.key, m.label, fmt.value(m, values.get(m.key, 0.0)), m.help) for m in gpu_metrics()]
        if rates is not None:
            for h, cell in enumerate(rates.pairs[i] if i < len(rates.pairs) else ()):
                if h != i and cell.get("held_bytes", 0):
                    rows.append((f"on{h}", f"on gpu{h}", fmt.nbytes(cell["held_bytes"]),
                                 f"gpu{i}'s data held by gpu{h}"))
            for o, row in enumerate(rates.pairs):
                if o != i and i < len(row) and row[i].get("held_bytes", 0):
                    rows.append((f"from{o}", f"from gpu{o}", fmt.nbytes(row[i]["held_bytes"]),
                                 f"gpu{o}'s data held here"))
        t = self.table
        keys = [r[0] for r in rows]
        if keys != self._keys:  # rows came or went: rebuild (else update in place, keeping the scroll)
            t.clear()
            for key, label, value, help_text in rows:
                t.add_row(label, right(value), help_text, key=key)
            self._keys = keys
        else:
            for key, _label, value, _help in rows:
                t.update_cell(key, "value", right(value))
