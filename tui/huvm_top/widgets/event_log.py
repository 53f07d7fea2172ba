"""Trace events from bcc (tracepoints or USDT probes): a scrolling log (filtered, saved on request), counts and
log2 histograms."""

from __future__ import annotations

from collections import deque

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import RichLog, Static

from huvm_top import abi
from huvm_top.hist import format_log2_hist
from huvm_top.model import TraceEvent


def describe(ev: TraceEvent) -> str:
    """One log line: time, event, gpu -> peer, reason, bytes, va."""
    host = abi.dest_host()
    peer = "host" if ev.peer == host else f"gpu{ev.peer}"
    reasons = abi.reason_names()
    if ev.name == "policy":
        presets = abi.preset_names()
        what = f"preset={presets[ev.reason] if ev.reason < len(presets) else ev.reason} generation={ev.bytes}"
        return f"{ev.ts_ns / 1e9:12.6f} policy   {what}"
    if ev.name == "fetch":
        fetched = abi.fetch_names()
        reason = fetched[ev.reason] if ev.reason < len(fetched) else str(ev.reason)
    else:
        reason = reasons[ev.reason] if ev.reason < len(reasons) else str(ev.reason)
    return (f"{ev.ts_ns / 1e9:12.6f} {ev.name:<8} gpu{ev.gpu} -> {peer:<5} {reason:<12} "
            f"{ev.bytes:>9} 0x{ev.va:x}")


class EventLog(Horizontal):
    """Log on the left, counts and the bytes histogram of the busiest event on the right.

    The last ``keep`` events are kept: a filter (``/``: words that must all appear in the line, e.g.
    ``evict gpu1 peer_full``) redraws the log from them, and :meth:`save` writes the lines shown to a file."""

    def __init__(self, *, id: str | None = None, enabled_note: str = "", keep: int = 5000) -> None:
        super().__init__(id=id)
        self.lines = 0
        self.filter = ""
        self.kept: deque[str] = deque(maxlen=keep)
        self.log_view = RichLog(id="event-lines", max_lines=1000, wrap=False, markup=False)
        self.summary = Static(enabled_note, id="event-summary")

    def compose(self) -> ComposeResult:
        yield self.log_view
        yield self.summary

    def _matches(self, line: str) -> bool:
        words = self.filter.lower().split()
        low = line.lower()
        return all(w in low for w in words)

    def add_events(self, events: list[TraceEvent]) -> None:
        for ev in events:
            self.kept.append(describe(ev))
        for line in [describe(ev) for ev in events[-200:]]:
            if self._matches(line):
                self.log_view.write(line)
                self.lines += 1

    def shown(self) -> list[str]:
        """The kept lines that pass the filter, oldest first."""
        return [line for line in self.kept if self._matches(line)]

    def set_filter(self, text: str) -> None:
        self.filter = text.strip()
        self.log_view.clear()
        shown = self.shown()
        for line in shown[-1000:]:
            self.log_view.write(line)
        self.lines = len(shown)
        self.border_subtitle = f"filter: {self.filter}" if self.filter else ""

    def save(self, path: str) -> int:
        """Write the lines shown (filtered) to path; returns how many. OSError if it cannot be written."""
        shown = self.shown()
        with open(path, "w", encoding="utf-8") as f:
            for line in shown:
                f.write(line + "\n")
        return len(shown)

    def set_summary(self, counts: dict[str, int], hists: dict[str, list[int]], lost: int = 0) -> None:
        parts = [" ".join(f"{k}={counts[k]}" for k in abi.event_names() if counts.get(k))]
        if lost:
            parts.append(f"(log dropped {lost}; counts are exact)")
        if counts:
            busiest = max(counts, key=lambda k: counts[k])
            lines = format_log2_hist(hists.get(busiest, []), label=f"{busiest} bytes", width=10)
            parts.extend(lines)
        self.summary.update("\n".join(parts))

    def clear(self) -> None:
        self.log_view.clear()
        self.kept.clear()
        self.lines = 0
