"""Rates between two snapshots, by huvm's own rule (:func:`huvm.stats.rate_map`, the one the CLI uses):
counters become per-second rates, gauges keep their current value, and a counter that went down (the stats
were reset between the snapshots) counts from zero: its delta is its new value, never negative.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from huvm import stats as hstats
from huvm.metrics import Kind

from huvm_top import abi
from huvm_top.metrics import Metric, gpu_metrics, pair_metrics, va_space_metrics
from huvm_top.model import Counters, Snapshot

NS_PER_S = 1_000_000_000

#: the library's counter delta (a reset in between counts from zero)
counter_delta = hstats.counter_delta


def rate_map(
    prev: Mapping[str, int] | None, cur: Mapping[str, int], dt_s: float, metrics: Iterable[Metric]
) -> dict[str, float]:
    """Per-second rates of counters (0.0 without a previous sample) and current values of gauges."""
    kinds: dict[str, Kind] = {m.key: m.kind for m in metrics}
    return hstats.rate_map(kinds, prev, cur, dt_s)


@dataclass(frozen=True)
class Rates:
    """What one refresh shows: the snapshot, rates per GPU and per pair, and the interval they span."""

    snapshot: Snapshot
    dt_s: float
    gpus: tuple[dict[str, float], ...]
    pairs: tuple[tuple[dict[str, float], ...], ...]
    first: bool  # no previous snapshot: counters show 0/s
    va_spaces: dict[int, dict[str, float]] = field(default_factory=dict)  # by va_space id

    def node_total(self, key: str) -> float:
        """Sum over GPUs of one per-GPU rate or gauge."""
        return sum(g.get(key, 0.0) for g in self.gpus)

    def guest_traffic_mbyte_per_s(self, holder: int) -> float:
        """Guests' data copied into or out of ``holder`` per second, MB/s (10^6 bytes, as its lend_traffic_mbyte_per_s
        budget): the pair counters the core's budget sums (:data:`huvm.stats.GUEST_TRAFFIC_FIELDS`)."""
        chunks = sum(row[holder].get(f, 0.0) for o, row in enumerate(self.pairs) if o != holder and holder < len(row)
                     for f in hstats.GUEST_TRAFFIC_FIELDS)
        return chunks * abi.chunk_size() / 1e6


def compute_rates(prev: Snapshot | None, cur: Snapshot) -> Rates:
    """Rates from ``prev`` to ``cur``. A previous snapshot with another GPU count is ignored."""
    if prev is not None and len(prev.gpus) != len(cur.gpus):
        prev = None
    dt_s = (cur.timestamp_ns - prev.timestamp_ns) / NS_PER_S if prev is not None else 0.0
    gm, pm = gpu_metrics(), pair_metrics()
    gpus = tuple(
        rate_map(prev.gpus[i] if prev is not None else None, g, dt_s, gm) for i, g in enumerate(cur.gpus)
    )
    pairs = tuple(
        tuple(
            rate_map(_pair(prev, o, h), cell, dt_s, pm)
            for h, cell in enumerate(row)
        )
        for o, row in enumerate(cur.pairs)
    )
    old = {v.id: v.counters for v in prev.va_spaces} if prev is not None else {}
    vm = va_space_metrics()
    # A process that appeared since the previous snapshot has no rate yet (its counters are since its start).
    vas = {v.id: rate_map(old.get(v.id), v.counters, dt_s, vm) for v in cur.va_spaces}
    return Rates(cur, dt_s, gpus, pairs, prev is None or dt_s <= 0, vas)


def _pair(snap: Snapshot | None, owner: int, holder: int) -> Counters | None:
    if snap is None or owner >= len(snap.pairs) or holder >= len(snap.pairs[owner]):
        return None
    return snap.pairs[owner][holder]


class History:
    """The last ``size`` values of a few series, node-wide and per GPU, for the graphs."""

    def __init__(self, keys: Sequence[str], size: int = 120) -> None:
        self.keys = tuple(keys)
        self.size = size
        self._data: dict[str, deque[float]] = {k: deque(maxlen=size) for k in self.keys}
        self._gpus: dict[tuple[str, int], deque[float]] = {}

    def add(self, rates: Rates) -> None:
        if rates.first:
            return
        for key in self.keys:
            self._data[key].append(rates.node_total(key))
            for i, g in enumerate(rates.gpus):
                self._gpus.setdefault((key, i), deque(maxlen=self.size)).append(g.get(key, 0.0))

    def series(self, key: str, gpu: int | None = None) -> list[float]:
        """The node-wide series of key, or GPU ``gpu``'s."""
        if gpu is None:
            return list(self._data[key])
        return list(self._gpus.get((key, gpu), ()))
