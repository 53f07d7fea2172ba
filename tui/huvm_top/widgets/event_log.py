"""Trace events from bcc (tracepoints or USDT probes): a scrolling log, counts and log2 histograms."""

from __future__ import annotations

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
        reason = "remote_map" if ev.reason == 1 else "migrate"
    else:
        reason = reasons[ev.reason] if ev.reason < len(reasons) else str(ev.reason)
    return (f"{ev.ts_ns / 1e9:12.6f} {ev.name:<8} gpu{ev.gpu} -> {peer:<5} {reason:<12} "
            f"{ev.bytes:>9} 0x{ev.va:x}")


class EventLog(Horizontal):
    """Log on the left, counts and the bytes histogram of the busiest event on the right."""

    def __init__(self, *, id: str | None = None, enabled_note: str = "") -> None:
        super().__init__(id=id)
        self.lines = 0
        self.log_view = RichLog(id="event-lines", max_lines=1000, wrap=False, markup=False)
        self.summary = Static(enabled_note, id="event-summary")

    def compose(self) -> ComposeResult:
        yield self.log_view
        yield self.summary

    def add_events(self, events: list[TraceEvent]) -> None:
        for ev in events[-200:]:
            self.log_view.write(describe(ev))
            self.lines += 1

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
        self.lines = 0
