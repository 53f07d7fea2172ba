"""Counter snapshots, deltas and rates, per GPU and per GPU pair, driven by the metric table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .metrics import GPU_METRICS, PAIR_METRICS, Metric


def _read(struct: Any, m: Metric) -> int | tuple[int, ...]:
    v = getattr(struct, m.field)
    if m.length is not None:
        return tuple(int(v[i]) for i in range(m.length))
    return int(v)


Value = int | tuple[int, ...]


@dataclass(frozen=True)
class GpuCounters:
    gpu: int
    values: Mapping[str, Value]  # metric field -> value (arrays as tuples)

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def scalar(self, name: str) -> int:
        v = self.values[name]
        return sum(v) if isinstance(v, tuple) else v


@dataclass(frozen=True)
class PairCounters:
    owner: int
    holder: int
    values: Mapping[str, int]

    def __getitem__(self, name: str) -> int:
        return self.values[name]


@dataclass(frozen=True)
class StatsSnapshot:
    """One GET_STATS: counters at timestamp_ns (monotonic; simulated time on the simulator)."""

    timestamp_ns: int
    generation: int
    gpus: tuple[GpuCounters, ...]
    pairs: tuple[PairCounters, ...] = field(default=())  # pairs with any non-zero value

    @classmethod
    def from_params(cls, p: Any) -> StatsSnapshot:
        n = int(p.gpu_count)
        gpus = tuple(GpuCounters(i, {m.field: _read(p.gpus[i], m) for m in GPU_METRICS}) for i in range(n))
        pairs = []
        for a in range(n):
            for b in range(n):
                values = {m.field: int(getattr(p.pairs[a][b], m.field)) for m in PAIR_METRICS}
                if a != b and any(values.values()):
                    pairs.append(PairCounters(a, b, values))
        return cls(int(p.timestamp_ns), int(p.generation), gpus, tuple(pairs))

    def pair(self, owner: int, holder: int) -> PairCounters:
        for pc in self.pairs:
            if pc.owner == owner and pc.holder == holder:
                return pc
        return PairCounters(owner, holder, {m.field: 0 for m in PAIR_METRICS})

    def total(self, name: str) -> int:
        return sum(g.scalar(name) for g in self.gpus)

    def delta(self, earlier: StatsSnapshot) -> StatsDelta:
        """Counters: self - earlier (a reset in between counts from zero); gauges: self's values."""
        return StatsDelta(earlier, self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "timestamp_ns": self.timestamp_ns,
            "generation": self.generation,
            "gpus": [{"gpu": g.gpu, **{k: list(v) if isinstance(v, tuple) else v for k, v in g.values.items()}}
                     for g in self.gpus],
            "pairs": [{"owner": p.owner, "holder": p.holder, **p.values} for p in self.pairs],
        }


def _sub(m: Metric, new: Value, old: Value) -> Value:
    if m.kind == "gauge":
        return new
    if isinstance(new, tuple) and isinstance(old, tuple):
        return tuple(n - o if n >= o else n for n, o in zip(new, old, strict=True))
    assert isinstance(new, int) and isinstance(old, int)
    return new - old if new >= old else new


def _sub_int(m: Metric, new: int, old: int) -> int:
    if m.kind == "gauge":
        return new
    return new - old if new >= old else new


@dataclass(frozen=True)
class StatsDelta:
    """The change between two snapshots, with per-second rates."""

    before: StatsSnapshot
    after: StatsSnapshot

    @property
    def seconds(self) -> float:
        return max(self.after.timestamp_ns - self.before.timestamp_ns, 0) / 1e9

    @property
    def gpus(self) -> tuple[GpuCounters, ...]:
        out = []
        old = {g.gpu: g for g in self.before.gpus}
        for g in self.after.gpus:
            o = old.get(g.gpu)
            out.append(GpuCounters(g.gpu, {m.field: _sub(m, g.values[m.field], o.values[m.field]) if o
                                           else g.values[m.field] for m in GPU_METRICS}))
        return tuple(out)

    @property
    def pairs(self) -> tuple[PairCounters, ...]:
        out = []
        for p in self.after.pairs:
            o = self.before.pair(p.owner, p.holder)
            vals = {m.field: _sub_int(m, p.values[m.field], o.values[m.field]) for m in PAIR_METRICS}
            out.append(PairCounters(p.owner, p.holder, vals))
        return tuple(out)

    def rates(self) -> tuple[dict[str, float], ...]:
        """Per GPU: counter metric -> per second (gauges left out); empty when no time passed."""
        s = self.seconds
        if s <= 0:
            return tuple({} for _ in self.after.gpus)
        return tuple({m.field: g.scalar(m.field) / s for m in GPU_METRICS if m.kind == "counter"}
                     for g in self.gpus)

    def pair_rates(self) -> dict[tuple[int, int], dict[str, float]]:
        s = self.seconds
        if s <= 0:
            return {}
        return {(p.owner, p.holder): {m.field: p.values[m.field] / s for m in PAIR_METRICS if m.kind == "counter"}
                for p in self.pairs}
