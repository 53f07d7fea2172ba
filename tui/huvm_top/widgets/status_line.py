"""One line under the header: source, policy generation and preset, poll interval and latency, pause."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static

from huvm_top import abi


class StatusLine(Static):
    source: reactive[str] = reactive("connecting...")
    generation: reactive[int] = reactive(-1)
    preset: reactive[int] = reactive(-1)
    interval: reactive[float] = reactive(1.0)
    latency_ms: reactive[float] = reactive(0.0)
    paused: reactive[bool] = reactive(False)
    error: reactive[str] = reactive("")

    def render(self) -> str:
        presets = abi.preset_names()
        preset = presets[self.preset] if 0 <= self.preset < len(presets) else "?"
        parts = [self.source]
        if self.generation >= 0:
            parts.append(f"policy gen {self.generation} ({preset})")
        parts.append(f"every {self.interval:g}s, read {self.latency_ms:.1f} ms")
        if self.paused:
            parts.append("PAUSED")
        if self.error:
            parts.append(f"error: {self.error}")
        return " \u2502 ".join(parts)
