"""log2 histograms as bcc keeps and prints them (``bpf_log2l`` slots, ``print_log2_hist`` layout)."""

from __future__ import annotations

from collections.abc import Sequence


def log2_slot(value: int) -> int:
    """bcc's ``bpf_log2l``: 0 for 0, else floor(log2(value)) + 1 (slot i holds [2**(i-1), 2**i - 1])."""
    return value.bit_length() if value > 0 else 0


def slot_range(slot: int) -> tuple[int, int]:
    return (1 << slot) >> 1, (1 << slot) - 1


def format_log2_hist(slots: Sequence[int], label: str = "bytes", width: int = 24) -> list[str]:
    """Lines like bcc's ``print_log2_hist``: ``     low -> high      : count    |****    |``."""
    used = [i for i, c in enumerate(slots) if c]
    if not used:
        return []
    top = max(slots)
    lines = [f"{label:>20} : count   distribution"]
    for i in range(used[0], used[-1] + 1):
        low, high = slot_range(i)
        stars = int(width * slots[i] / top) if top else 0
        lines.append(f"{low:>9} -> {high:<9}: {slots[i]:<7} |{'*' * stars:<{width}}|")
    return lines


class Log2Hists:
    """Per-name log2 histograms, filled from Python (the fake and the USDT fallback)."""

    def __init__(self, slots: int = 65) -> None:
        self._slots = slots
        self._data: dict[str, list[int]] = {}

    def add(self, name: str, value: int) -> None:
        hist = self._data.setdefault(name, [0] * self._slots)
        hist[min(log2_slot(value), self._slots - 1)] += 1

    def snapshot(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self._data.items()}
