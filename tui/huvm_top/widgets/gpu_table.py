"""Per-GPU table: the memory headline first (a bar, own, lent and harvested bytes), then guests' traffic
through the GPU (MB/s) and the rates of evictions, fetches, prefetches and give-backs.

The headline columns come first so that they are on screen at 80 columns; the rate columns follow and
scroll sideways. Numbers are right-aligned. Rate columns are metrics of huvm's metric table (labels are
their names; counters shown per second). ``enter`` on a row selects that GPU for the detail view.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from huvm_top import fmt
from huvm_top.metrics import Metric, gpu_metric
from huvm_top.model import NodeInfo
from huvm_top.rates import Rates

# The headline: memory split between the GPU's own data and other GPUs' data it holds (lent), and its
# data held by peers (harvested). "own" is used memory less lent bytes.
HEADLINE: tuple[tuple[str, str], ...] = (("own", "own"), ("lent_bytes", "lent"), ("harvested_bytes", "harvested"))
# First after the headline: guests' data copied into or out of the GPU, MB/s (what its lend_traffic_mbyte_per_s
# budget limits).
GUEST_TRAFFIC = ("guest_traffic", "guest MB/s")

# Rate columns after the headline, in order (the full table is on the help screen and in the detail view).
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
)

NAME_WIDTH = 14  # longer names are cut (the index column identifies the GPU; the detail view has it whole)


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """A GPU's name for the table: without the vendor word ("Tesla V100-SXM2-16GB" -> "V100-SXM2-16GB"),
    cut to width with an ellipsis."""
    for vendor in ("NVIDIA ", "Tesla "):
        if name.startswith(vendor) and len(name) > len(vendor):
            name = name[len(vendor):]
    return name if len(name) <= width else name[: width - 1] + "\u2026"
BAR_WIDTH = 10


def right(text: str) -> Text:
    return Text(text, justify="right")


def memory_bar(own: int, lent: int, total: int, width: int = BAR_WIDTH) -> Text:
    """``own`` then ``lent`` as full blocks in two colours, free memory dotted, and the used percentage."""
    if total <= 0:
        return Text("-")
    own_cells = round(width * max(own, 0) / total)
    lent_cells = min(round(width * max(lent, 0) / total), width - own_cells)
    free_cells = width - own_cells - lent_cells
    used = max(own, 0) + max(lent, 0)
    bar = Text()
    bar.append("\u2588" * own_cells, style="bold green3")
    bar.append("\u2588" * lent_cells, style="bold orange1")
    bar.append("\u00b7" * free_cells, style="grey50")
    bar.append(f" {min(100, round(100 * used / total)):>3}%")
    return bar


def split_memory(total: int, free: int, lent: int) -> tuple[int, int, int]:
    """(own, lent, used) bytes of a GPU: used = total - free; own = used - lent (never below 0)."""
    used = max(total - free, 0)
    return max(used - lent, 0), lent, used


class GpuTable(DataTable[str | Text]):
    """One row per GPU; row key ``gpu<i>``, column keys ``gpu``, ``name``, ``memory``, ``own``, then metric
    keys (``lent_bytes``, ``harvested_bytes``, the rates)."""

    def __init__(self, *, id: str | None = None) -> None:
        # the cursor row keeps the bar's colours (its cells' own styles win over the cursor's foreground)
        super().__init__(id=id, zebra_stripes=True, cursor_type="row", cursor_foreground_priority="renderable")
        self.metrics: tuple[Metric, ...] = tuple(gpu_metric(k) for k in COLUMNS)
        self._info: NodeInfo | None = None

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False  # unfocused, no row hides its memory bar under the cursor

    def on_mount(self) -> None:
        self.show_cursor = self.has_focus
        self.add_column(right("gpu"), key="gpu")
        self.add_column("name", key="name")
        self.add_column("memory", key="memory")
        for key, label in (*HEADLINE, GUEST_TRAFFIC):
            self.add_column(right(label), key=key)
        for m in self.metrics:
            self.add_column(right(m.label), key=m.key)

    def set_node(self, info: NodeInfo) -> None:
        self._info = info
        self.clear()
        for g in info.gpus:
            name = short_name(g.name)
            cells: list[str | Text] = [right(str(g.index)), name if g.present else f"{name} (gone)",
                                       right(fmt.nbytes(g.memory_bytes))]
            cells += [right("-")] * (len(HEADLINE) + 1 + len(self.metrics))
            self.add_row(*cells, key=f"gpu{g.index}")

    def update_rates(self, rates: Rates) -> None:
        if self._info is None:
            return
        free = rates.snapshot.free_bytes
        for g in self._info.gpus:
            if g.index >= len(rates.gpus):
                continue
            row = f"gpu{g.index}"
            values = rates.gpus[g.index]
            lent = int(values.get("lent_bytes", 0))
            if g.index < len(free):
                own, lent, _used = split_memory(g.memory_bytes, free[g.index], lent)
                self.update_cell(row, "memory", memory_bar(own, lent, g.memory_bytes), update_width=True)
                self.update_cell(row, "own", right(fmt.nbytes(own)), update_width=True)
            self.update_cell(row, "lent_bytes", right(fmt.nbytes(lent)), update_width=True)
            self.update_cell(row, "harvested_bytes", right(fmt.nbytes(values.get("harvested_bytes", 0))),
                             update_width=True)
            # guests' traffic through it, what its lend_traffic_mbyte_per_s budget limits
            self.update_cell(row, GUEST_TRAFFIC[0], right(f"{rates.guest_traffic_mbyte_per_s(g.index):,.0f}"),
                             update_width=True)
            for m in self.metrics:
                self.update_cell(row, m.key, right(fmt.value(m, values.get(m.key, 0.0))), update_width=True)

    def selected_gpu(self) -> int | None:
        """The GPU index of the cursor row, if any."""
        if self._info is None or not self._info.gpus or self.cursor_row < 0:
            return None
        if self.cursor_row >= len(self._info.gpus):
            return None
        return self._info.gpus[self.cursor_row].index
