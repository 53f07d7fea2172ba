"""huvm-top: live fault, eviction and migration figures of a huvm node, and a policy editor.

The app only draws: every blocking call (ioctl, simulator step, bcc read) runs in a thread worker over a
source adapter (:mod:`huvm_top.sources`), and results come back as messages or through call_from_thread.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Header, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from huvm_top.messages import EventsArrived, SourceFailed, SourceOpened, SourceWaiting, StatsUpdated
from huvm_top.model import NodeAbsent, NodeInfo, PolicyRefused, PolicyState, Snapshot, SourceError
from huvm_top.rates import Rates, compute_rates
from huvm_top.record import Recorder
from huvm_top.screens.help_screen import HelpScreen
from huvm_top.screens.policy_editor import PolicyEditor
from huvm_top.screens.preset_confirm import PresetConfirm, policy_diff
from huvm_top.sources.base import EventSource, StatsSource
from huvm_top.widgets.event_log import EventLog
from huvm_top.widgets.fallback_table import FallbackTable
from huvm_top.widgets.gpu_detail import GpuDetail
from huvm_top.widgets.gpu_graphs import GpuGraphs
from huvm_top.widgets.gpu_table import GpuTable
from huvm_top.widgets.peer_matrix import PeerMatrix
from huvm_top.widgets.process_table import ProcessTable
from huvm_top.widgets.status_line import StatusLine

PRESET_KEYS: tuple[str, ...] = ("stock", "atc22", "huvm")  # keys 1, 2, 3
VIEWS: tuple[str, ...] = ("tab-graphs", "tab-detail", "tab-peers", "tab-processes", "tab-events")
WAIT_S = 2.0  # longest wait between two tries to attach (udev or inotify wake the wait earlier)


class HuvmTop(App[int]):
    """The app; ``return_code`` is 0, or 1 when the source failed."""

    CSS_PATH = "app.tcss"
    TITLE = "huvm-top"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("p", "policy", "policy"),
        Binding("space", "toggle_pause", "pause"),
        Binding("1", "preset('stock')", "stock"),
        Binding("2", "preset('atc22')", "atc22"),
        Binding("3", "preset('huvm')", "huvm"),
        Binding("v", "next_view", "view"),
        Binding("g", "next_graph", "graph"),
        Binding("m", "next_metric", "matrix", show=False),
        Binding("s", "sort_processes", "sort", show=False),
        Binding("slash", "filter", "filter"),
        Binding("w", "save_events", "save log", show=False),
        Binding("c", "clear_events", "clear log", show=False),
        Binding("escape", "leave_filter", "", show=False),
        Binding("question_mark", "help", "help"),
    ]

    paused: reactive[bool] = reactive(False)

    def __init__(self, source: StatsSource, events: EventSource | None = None, interval: float = 1.0,
                 recorder: Recorder | None = None) -> None:
        super().__init__()
        self.source = source
        self.events = events
        self.interval = interval
        self.recorder = recorder
        self.info: NodeInfo | None = None
        self.policy: PolicyState | None = None
        self.rates: Rates | None = None
        self.error: str | None = None
        self.waiting: str | None = None  # the headline while the node is not there
        self.refreshes = 0
        self._prev: Snapshot | None = None
        self._polling = False
        self._timer: Timer | None = None
        self._tracing = False
        self._recorded_header = False

    # layout

    def compose(self) -> ComposeResult:
        # The main screen's widgets are kept as attributes: other screens may be on top when data arrives.
        note = "" if self.events is not None else "event log: start with --bcc (root) to trace huvm events"
        self.status_line = StatusLine(id="status")
        self.waiting_note = Static("", id="waiting")
        self.gpu_table = GpuTable(id="gpus")
        self.graphs = GpuGraphs(id="graphs")
        self.detail = GpuDetail(id="detail")
        self.matrix = PeerMatrix(id="matrix")
        self.fallbacks = FallbackTable(id="fallbacks")
        self.processes = ProcessTable(id="processes")
        self.event_log = EventLog(id="events", enabled_note=note)
        yield Header()
        yield self.status_line
        yield self.waiting_note
        with Vertical(id="main"):
            yield self.gpu_table
            with TabbedContent(id="views", initial="tab-graphs"):
                with TabPane("graphs", id="tab-graphs"):
                    yield self.graphs
                with TabPane("gpu detail", id="tab-detail"):
                    yield self.detail
                with TabPane("peers", id="tab-peers"), Horizontal(id="middle"):
                    yield self.matrix
                    yield self.fallbacks
                with TabPane("processes", id="tab-processes"):
                    yield Input(placeholder="filter: pid or command (/ to edit, enter or esc to leave)",
                                id="process-filter", compact=True)
                    yield self.processes
                with TabPane("events", id="tab-events"):
                    yield Input(placeholder="filter: words of the line, e.g. evict gpu1 peer_full "
                                            "(/ to edit; w saves the lines shown)", id="event-filter", compact=True)
                    yield self.event_log
        yield Footer()

    def on_mount(self) -> None:
        self.status_line.interval = self.interval
        self.gpu_table.border_title = "GPUs: memory, then counters per second (enter: detail)"
        self.fallbacks.border_title = "evictions to host by reason, per second"
        self.processes.border_title = "processes (va_spaces)"
        self.event_log.border_title = "events"
        self.waiting_note.display = False
        self._open()

    # the source

    @work(thread=True, exclusive=True, group="open")
    def _open(self) -> None:
        """Attach; while the node is not there (module not loaded), say so and wait for it."""
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                info = self.source.open()
                policy = self.source.get_policy()
            except NodeAbsent as exc:
                self.post_message(SourceWaiting(exc.headline, str(exc)))
                self.source.wait(WAIT_S)  # woken early by udev/inotify when the module or its device changes
                continue
            except SourceError as exc:
                self.post_message(SourceFailed(str(exc), fatal=True))
                return
            except Exception as exc:  # noqa: BLE001 - a monitor reports, it does not dump a traceback
                self.post_message(SourceFailed(f"{type(exc).__name__}: {exc}", fatal=True))
                return
            if self.recorder is not None and not self._recorded_header:
                self.recorder.header(info, policy)
                self._recorded_header = True
            self.call_from_thread(self._opened, info, policy)
            return

    def on_source_waiting(self, message: SourceWaiting) -> None:
        self.waiting = message.headline
        self.info = None
        self.status_line.source = message.headline
        self.status_line.error = ""
        self.waiting_note.update(f"{message.headline}\n\n{message.detail}\n\nhuvm-top attaches by itself when "
                                 f"the node appears (q quits)")
        self.waiting_note.display = True
        self.query_one("#main").display = False

    def _opened(self, info: NodeInfo, policy: PolicyState) -> None:
        self.info = info
        self.policy = policy
        self.waiting = None
        self._prev = None  # a reloaded module starts its counters again: no rate across the gap
        self.waiting_note.display = False
        self.query_one("#main").display = True
        self.sub_title = info.description
        status = self.status_line
        status.source = info.description
        status.generation = policy.generation
        status.preset = policy.node.get("preset", -1)
        for table in (self.gpu_table, self.fallbacks, self.matrix, self.graphs, self.detail):
            table.set_node(info)
        self.post_message(SourceOpened(info))
        if self._timer is None:
            self._timer = self.set_interval(self.interval, self._tick)
        self._tick()
        if self.events is not None and not self._tracing:
            self._tracing = True
            self._trace()

    def on_source_failed(self, message: SourceFailed) -> None:
        self.error = message.error
        self.status_line.error = message.error
        if message.fatal:
            self.exit(1, return_code=1, message=f"huvm-top: error: {message.error}")

    def _tick(self) -> None:
        if self.paused or self._polling or self.info is None:
            return
        self._polling = True
        self._poll()

    @work(thread=True, exclusive=True, group="stats")
    def _poll(self) -> None:
        t0 = time.perf_counter()
        try:
            snap = self.source.snapshot()
        except NodeAbsent as exc:  # the module went away: wait for it again
            self.post_message(SourceWaiting(exc.headline, str(exc)))
            self.call_from_thread(self._open)
            self._polling = False
            return
        except Exception as exc:  # noqa: BLE001 - shown on the status line; the next tick tries again
            self._polling = False
            text = str(exc) if isinstance(exc, SourceError) else f"{type(exc).__name__}: {exc}"
            self.post_message(SourceFailed(text, fatal=False))
            return
        if self._prev is not None and snap.timestamp_ns == self._prev.timestamp_ns:
            self._polling = False  # the same instant again (a stopped simulation): nothing new to draw
            return
        if self.recorder is not None:
            self.recorder.add(snap)
        rates = compute_rates(self._prev, snap)
        self._prev = snap
        self.post_message(StatsUpdated(rates, (time.perf_counter() - t0) * 1000))

    def on_stats_updated(self, message: StatsUpdated) -> None:
        self._polling = False
        self.rates = message.rates
        self.refreshes += 1
        status = self.status_line
        status.latency_ms = message.latency_ms
        status.error = ""
        gen = message.rates.snapshot.generation
        if gen != status.generation:
            status.generation = gen
            self._refresh_policy()
        if self.info is None:  # waiting for the node again: this snapshot is from before it went
            return
        for widget in (self.gpu_table, self.fallbacks, self.processes, self.matrix, self.graphs, self.detail):
            widget.update_rates(message.rates)

    @work(thread=True, exclusive=True, group="policy-read")
    def _refresh_policy(self) -> None:
        try:
            policy = self.source.get_policy()
        except SourceError:
            return
        self.call_from_thread(self._policy_now, policy)

    def _policy_now(self, policy: PolicyState) -> None:
        self.policy = policy
        status = self.status_line
        status.generation = policy.generation
        status.preset = policy.node.get("preset", -1)

    # events (bcc)

    @work(thread=True, exclusive=True, group="trace")
    def _trace(self) -> None:
        assert self.events is not None
        worker = get_current_worker()
        try:
            self.events.start()
        except SourceError as exc:
            self.post_message(SourceFailed(f"tracing: {exc}", fatal=False))
            self.call_from_thread(self._trace_note, f"tracing off: {exc}")
            return
        self.call_from_thread(self._trace_note, self.events.description)
        while not worker.is_cancelled:
            batch = []
            deadline = time.monotonic() + 0.25  # batch, so a burst is one message
            try:
                while time.monotonic() < deadline and not worker.is_cancelled:
                    batch.extend(self.events.poll(100))
                if batch and self.recorder is not None:
                    self.recorder.add_events(batch)
                if batch and not self.paused:
                    self.post_message(EventsArrived(batch, self.events.counts(), self.events.histograms(),
                                                    self.events.lost()))
            except Exception as exc:  # noqa: BLE001 - tracing stops, the rest of the screen goes on
                self.call_from_thread(self._trace_note, f"tracing stopped: {exc}")
                return

    def _trace_note(self, text: str) -> None:
        self.event_log.border_subtitle = text

    def on_events_arrived(self, message: EventsArrived) -> None:
        log = self.event_log
        log.add_events(message.events)
        log.set_summary(message.counts, message.histograms, message.lost)

    # actions

    MAIN_ONLY = frozenset({"policy", "preset", "toggle_pause", "next_metric", "clear_events", "help", "next_view",
                           "next_graph", "sort_processes", "filter", "save_events", "leave_filter"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Main-screen keys do nothing (and leave the footer) while the editor, help or a question is open."""
        if action in self.MAIN_ONLY and len(self.screen_stack) > 1:
            return False
        return True

    def watch_paused(self, paused: bool) -> None:
        self.status_line.paused = paused

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_next_metric(self) -> None:
        self.matrix.next_metric()
        self.show_view("tab-peers")

    def action_next_graph(self) -> None:
        self.graphs.next_metric()
        self.show_view("tab-graphs")

    def show_view(self, view: str) -> None:
        self.query_one("#views", TabbedContent).active = view

    def action_next_view(self) -> None:
        tabs = self.query_one("#views", TabbedContent)
        tabs.active = VIEWS[(VIEWS.index(tabs.active) + 1) % len(VIEWS)] if tabs.active in VIEWS else VIEWS[0]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """enter on a GPU row: that GPU in the detail view."""
        if event.data_table is self.gpu_table:
            gpu = self.gpu_table.selected_gpu()
            if gpu is not None:
                self.detail.select(gpu)
                self.show_view("tab-detail")

    def action_sort_processes(self) -> None:
        self.processes.next_sort()
        self.show_view("tab-processes")

    def action_filter(self) -> None:
        """Edit the filter of the event log (events view) or of the processes (any other view)."""
        tabs = self.query_one("#views", TabbedContent)
        if tabs.active != "tab-events":
            tabs.active = "tab-processes"
        self.query_one("#event-filter" if tabs.active == "tab-events" else "#process-filter", Input).focus()

    def action_leave_filter(self) -> None:
        focused = self.focused
        if isinstance(focused, Input) and focused.id in ("process-filter", "event-filter"):
            (self.event_log.log_view if focused.id == "event-filter" else self.processes).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "process-filter":
            self.processes.set_filter(event.value)
        elif event.input.id == "event-filter":
            self.event_log.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id in ("process-filter", "event-filter"):
            self.action_leave_filter()

    def action_save_events(self) -> None:
        path = time.strftime("huvm-top-events-%Y%m%d-%H%M%S.log")
        try:
            n = self.event_log.save(path)
        except OSError as exc:
            self.notify(f"cannot save the event log: {path}: {exc.strerror}", severity="error")
            return
        self.notify(f"{n} event lines saved to {path}")

    def action_clear_events(self) -> None:
        self.event_log.clear()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_policy(self) -> None:
        if self.info is None or self.policy is None:
            self.notify("not connected yet", severity="warning")
            return
        self.push_screen(PolicyEditor(self.source, self.info, self.policy), self._editor_closed)

    def _editor_closed(self, applied: PolicyState | None) -> None:
        if applied is not None:
            self._policy_now(applied)

    def action_preset(self, name: str) -> None:
        if self.info is None:
            return
        self._preview_preset(name)

    @work(thread=True, exclusive=True, group="policy")
    def _preview_preset(self, name: str) -> None:
        """What the preset would change: asked of the source, shown for confirmation, nothing sent yet."""
        try:
            current = self.source.get_policy()
            policy = self.source.preset(name)
        except Exception as exc:  # noqa: BLE001 - SourceError (a replay, no node), or worse: a notification
            self.call_from_thread(self.notify, f"preset {name}: {exc}", severity="error")
            return
        diff = policy_diff(current, policy, self.info)

        def answered(yes: bool | None) -> None:
            if yes:
                self._apply_preset(name, policy)

        self.call_from_thread(self.push_screen, PresetConfirm(name, diff), answered)

    @work(thread=True, exclusive=True, group="policy")
    def _apply_preset(self, name: str, policy: PolicyState) -> None:
        try:
            new = self.source.set_policy(policy)
        except PolicyRefused as exc:
            self.call_from_thread(self.notify, f"preset {name} refused: {exc.field}: {exc.message}",
                                  severity="error")
            return
        except Exception as exc:  # noqa: BLE001 - SourceError, or anything else: a notification, not a crash
            self.call_from_thread(self.notify, f"preset {name}: {exc}", severity="error")
            return
        self.call_from_thread(self._policy_now, new)
        self.call_from_thread(self.notify, f"preset {name} applied (generation {new.generation})")

    def on_unmount(self) -> None:
        for closable in (self.events, self.source, self.recorder):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # noqa: BLE001 - closing must not hide the exit status
                    pass


def main(argv: Sequence[str] | None = None) -> int:
    """huvm-top (the console script enters through :mod:`huvm_top.main`); see :mod:`huvm_top.cli` for the options."""
    from huvm_top import cli

    try:
        opts = cli.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        source, events = cli.make_sources(opts)
    except cli.CliError as exc:
        sys.stderr.write(f"huvm-top: error: {exc}\n")
        return exc.status
    except Exception as exc:  # last resort: a bug, not bad input (that is a CliError above)
        if opts.debug:
            import traceback

            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        sys.stderr.write(f"huvm-top: error: internal error: {type(exc).__name__}{': ' + first if first else ''} "
                         f"(a huvm bug: please report it with the command line"
                         f"{'' if opts.debug else '; --debug prints the traceback'})\n")
        return 1
    recorder = None
    if opts.record:
        try:
            recorder = Recorder(opts.record)
        except SourceError as exc:
            source.close()
            sys.stderr.write(f"huvm-top: error: {exc}\n")
            return 1
    app = HuvmTop(source, events, opts.interval, recorder)
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
