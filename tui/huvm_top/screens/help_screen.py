"""Help: the key bindings and the metric table (name, kind, unit, help) the columns come from."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from huvm_top.metrics import gpu_metrics, pair_metrics, va_space_metrics

KEYS = """\
[b]keys[/b]  q quit   p policy editor   space pause   1/2/3 preset stock/atc22/huvm (shows the change; y applies)
      v next view (graphs, gpu detail, peers, processes, events)   enter on a GPU row: its detail
      g next graph metric   m next peer-matrix metric   s sort processes   / filter processes or events
      w save the event log shown   c clear the event log   ? this help   esc close
[b]policy editor[/b]  tab/shift+tab move   enter open a choice   ctrl+s apply   ctrl+r reload   esc back
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(KEYS, id="help-keys")
            yield DataTable(id="help-metrics", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#help-metrics", DataTable)
        table.add_columns("scope", "metric", "kind", "unit", "help")
        for scope, ms in (("gpu", gpu_metrics()), ("pair", pair_metrics()), ("va_space", va_space_metrics())):
            for m in ms:
                table.add_row(scope, m.key, m.kind, m.unit, m.help)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
