"""Counter snapshots, deltas and rates, per GPU and per GPU pair, driven by the metric table.

The one delta/rate rule of huvm (huvmctl stats, experiments and huvm-top all use it): a counter's change is
new - old, except after a reset (new < old: RESET_STATS, a module reload, a restarted simulation) where it is
the count since the reset, new; a gauge's "change" is its current value. A rate divides a counter's change
by the seconds between the two snapshots on the node's own clock; with no earlier sample or no time between
them it is 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .abi import CHUNK_SIZE
from .metrics import GPU_METRICS, PAIR_METRICS, Kind, Metric


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


def counter_delta(old: int, new: int) -> int:
    """A counter's increase from old to new; after a reset in between (new < old) the count since it, new."""
    return new - old if new >= old else new


def change(kind: Kind, old: Value, new: Value) -> Value:
    """One metric's change between two samples: counters as :func:`counter_delta` (element-wise for arrays),
    gauges their new value."""
    if kind == "gauge":
        return new
    if isinstance(new, tuple) and isinstance(old, tuple):
        return tuple(counter_delta(o, n) for o, n in zip(old, new, strict=True))
    assert isinstance(new, int) and isinstance(old, int)
    return counter_delta(old, new)


def rate_map(kinds: Mapping[str, Kind], old: Mapping[str, int] | None, new: Mapping[str, int],
             seconds: float) -> dict[str, float]:
    """Per key of ``kinds``: a counter's per-second rate from old to new (0.0 without an earlier sample or
    without time between them), a gauge's current value. A key missing from a sample reads as 0."""
    out: dict[str, float] = {}
    for key, kind in kinds.items():
        value = new.get(key, 0)
        if kind == "gauge":
            out[key] = float(value)
        elif old is None or seconds <= 0:
            out[key] = 0.0
        else:
            out[key] = counter_delta(old.get(key, 0), value) / seconds
    return out


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
            out.append(GpuCounters(g.gpu, {m.field: change(m.kind, o.values[m.field], g.values[m.field]) if o
                                           else g.values[m.field] for m in GPU_METRICS}))
        return tuple(out)

    @property
    def pairs(self) -> tuple[PairCounters, ...]:
        out = []
        for p in self.after.pairs:
            o = self.before.pair(p.owner, p.holder)
            vals = {m.field: counter_delta(o.values[m.field], p.values[m.field]) if m.kind == "counter"
                    else p.values[m.field] for m in PAIR_METRICS}
            out.append(PairCounters(p.owner, p.holder, vals))
        return tuple(out)

    def rates(self) -> tuple[dict[str, float], ...]:
        """Per GPU: counter metric -> per second (gauges left out; arrays summed); empty when no time passed."""
        s = self.seconds
        if s <= 0:
            return tuple({} for _ in self.after.gpus)
        kinds: dict[str, Kind] = {m.field: "counter" for m in GPU_METRICS if m.kind == "counter"}
        old = {g.gpu: g for g in self.before.gpus}
        out = []
        for g in self.after.gpus:
            o = old.get(g.gpu)
            out.append(rate_map(kinds, {k: o.scalar(k) for k in kinds} if o else None,
                                {k: g.scalar(k) for k in kinds}, s))
        return tuple(out)

    def pair_rates(self) -> dict[tuple[int, int], dict[str, float]]:
        s = self.seconds
        if s <= 0:
            return {}
        kinds: dict[str, Kind] = {m.field: "counter" for m in PAIR_METRICS if m.kind == "counter"}
        return {(p.owner, p.holder): rate_map(kinds, self.before.pair(p.owner, p.holder).values, p.values, s)
                for p in self.after.pairs}


# ---- lending figures (issue 14 item 1): per GPU from the counters, per tenant from an experiment ----

@dataclass(frozen=True)
class GpuLending:
    """What one GPU lends and borrows, from the core's counters (any backend)."""

    gpu: int
    lent_bytes: int             # other GPUs' data in its memory now
    lent_peak_bytes: int        # the most it lent since the last reset
    borrowed_bytes: int         # its data in peers' memory now (harvested_bytes)
    lent_chunks: int            # peers' chunks it took in (evicted or prefetched onto it)
    given_back_chunks: int      # chunks it gave back to host to reclaim its memory
    borrowed_chunks: int        # its chunks it evicted to peers
    fetched_back_chunks: int    # its chunks it fetched back from peers
    guest_traffic_chunks: int = 0   # guests' chunks copied into or out of it (guest_traffic_chunks())


#: the pair counters whose chunks are guests' traffic through the holder: what a lender's budget
#: (lend_traffic_mbyte_per_s) measures, as the core's huvm_guest_traffic_total sums them
GUEST_TRAFFIC_FIELDS: tuple[str, ...] = ("evict_chunks", "prefetch_chunks", "fetch_chunks", "giveback_chunks")


def guest_traffic_chunks(pairs: Sequence[PairCounters]) -> dict[int, int]:
    """Per holder: the guests' chunks copied into or out of it (evicted or prefetched onto it, fetched or given
    back from it), from the pair counters, the sum the core's ``huvm_guest_traffic_total`` takes for a lender's
    guest-traffic budget (``tests/python/test_stats_lending.py`` checks the two agree)."""
    out: dict[int, int] = {}
    for p in pairs:
        if p.owner != p.holder:
            out[p.holder] = out.get(p.holder, 0) + sum(p.values[f] for f in GUEST_TRAFFIC_FIELDS)
    return out


def guest_traffic_mbyte_per_s(delta: StatsDelta) -> dict[int, float]:
    """Per GPU: the guests' traffic through it over the interval in MB/s (10^6 bytes, as the budget), an
    average (the budget holds over a 20 ms window); empty when no time passed."""
    s = delta.seconds
    if s <= 0:
        return {}
    chunks = guest_traffic_chunks(delta.pairs)
    return {g.gpu: chunks.get(g.gpu, 0) * CHUNK_SIZE / 1e6 / s for g in delta.after.gpus}


def gpu_lending(snap: StatsSnapshot) -> list[GpuLending]:
    """Per GPU: lent and borrowed now, lent at peak, and the chunk movements behind them."""
    taken_in = {g.gpu: 0 for g in snap.gpus}
    for p in snap.pairs:
        taken_in[p.holder] = taken_in.get(p.holder, 0) + p.values["evict_chunks"] + p.values["prefetch_chunks"]
    traffic = guest_traffic_chunks(snap.pairs)
    return [GpuLending(g.gpu, g.scalar("lent_bytes"), g.scalar("lent_peak_bytes"), g.scalar("harvested_bytes"),
                       taken_in.get(g.gpu, 0), g.scalar("giveback"), g.scalar("evict_to_peer"),
                       g.scalar("fetch_from_peer"), traffic.get(g.gpu, 0)) for g in snap.gpus]


@dataclass(frozen=True)
class TenantFigures:
    """One tenant under one policy: a harvester's speedup over its own runtime under stock, a lender's
    slowdown against running alone (runtime ratio, or throughput ratio for one that runs until the others
    finish; 1.0: lending cost it nothing)."""

    policy: str
    sweep_value: str | None
    tenant: str
    gpu: int
    role: str                   # harvester | lender | idle
    foreground: bool
    runtime_ns: int
    ops_per_s: float
    harvester_speedup: float | None
    lender_slowdown: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tenant_figures(rows: Sequence[Mapping[str, Any]]) -> list[TenantFigures]:
    """From an experiment's per-tenant rows (``summary.json``'s ``tenants``, written by
    :func:`huvmlab.experiment.output.tenant_dicts`): every policy but ``ideal``, in their order."""
    stock = {(r["tenant"], r.get("sweep_value")): r for r in rows if r["policy"] == "stock"}
    out: list[TenantFigures] = []
    for r in rows:
        if r["policy"] == "ideal":
            continue
        role = str(r.get("role", "harvester"))
        speedup = None
        base = stock.get((r["tenant"], r.get("sweep_value")))
        if role == "harvester" and r["foreground"] and base is not None and r["runtime_ns"]:
            speedup = base["runtime_ns"] / r["runtime_ns"]
        slow = r.get("slowdown_vs_alone") if role == "lender" else None
        out.append(TenantFigures(str(r["policy"]), r.get("sweep_value"), str(r["tenant"]), int(r["gpu"]), role,
                                 bool(r["foreground"]), int(r["runtime_ns"]), float(r.get("ops_per_s", 0.0)),
                                 speedup, None if slow is None else float(slow)))
    return out


def tenant_figures_from_run(outdir: str | Path) -> list[TenantFigures]:
    """The tenant figures of an experiment's output folder (its ``summary.json``)."""
    from .errors import ConfigError

    path = Path(outdir) / "summary.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{outdir}: no summary.json (not an experiment's output folder)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    rows = doc.get("tenants") if isinstance(doc, dict) else None
    need = ("policy", "tenant", "gpu", "foreground", "runtime_ns")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in need) for r in rows):
        raise ConfigError(f"{path}: no per-tenant rows (written by an older huvm?); run the experiment again")
    return tenant_figures(rows)

