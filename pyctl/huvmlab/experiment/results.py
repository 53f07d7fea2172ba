"""What an experiment produces, as plain typed rows (the runner fills them, the writers consume them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunKey:
    """One simulated run: a policy (or "ideal"), a sweep value (None without a sweep), a repetition."""

    policy: str
    sweep_value: Any
    repetition: int

    @property
    def run_id(self) -> str:
        sweep = "" if self.sweep_value is None else f"@{self.sweep_value}"
        return f"{self.policy}{sweep}#{self.repetition}"


@dataclass(frozen=True)
class TenantRow:
    run: RunKey
    tenant: str
    gpu: int
    foreground: bool
    runtime_ns: int
    values: dict[str, int]  # the simulator's per-tenant outcome fields (faults, stalls, ...)
    role: str = "harvester"  # harvester | lender | idle (see runner.tenant_role)

    @property
    def ops_per_s(self) -> float:
        """Throughput over its run: the measure of a tenant that runs until the foreground finishes."""
        return self.values.get("ops_done", 0) * 1e9 / self.runtime_ns if self.runtime_ns else 0.0

    @property
    def stall_ns(self) -> int:
        """Every stall: faults (with their evictions), remote accesses, prefetches in flight, allocations."""
        return sum(self.values.get(k, 0) for k in ("fault_stall_ns", "remote_stall_ns", "inflight_wait_ns",
                                                    "alloc_stall_ns"))

    @property
    def work_rate(self) -> float:
        """Share of its run spent computing (its ops' time / its runtime): its throughput, whatever the
        length of its ops or of the run. 1.0 when nothing ever stalled it."""
        return self.values.get("compute_ns", 0) / self.runtime_ns if self.runtime_ns else 0.0

    def slowdown_vs(self, alone: TenantRow) -> float | None:
        """How much slower than ``alone`` (the same tenant alone on the node): runtime ratio for a tenant
        that finishes, throughput (:attr:`work_rate`) ratio for one that runs until the others finish (1.0:
        no cost)."""
        if not self.foreground:
            return alone.work_rate / self.work_rate if self.work_rate and alone.work_rate else None
        return self.runtime_ns / alone.runtime_ns if alone.runtime_ns else None


@dataclass(frozen=True)
class TrafficRow:
    run: RunKey
    path: str  # host_to_gpu, gpu_to_host, gpu_to_gpu, remote_read
    src: str  # "host" or GPU index as text
    dst: str
    bytes: int


@dataclass(frozen=True)
class SampleRow:
    run: RunKey
    t_ns: int
    gpu: int
    own_bytes: int
    guest_bytes: int
    free_bytes: int
    peer_bytes: int
    host_bytes: int


@dataclass(frozen=True)
class CounterRow:
    run: RunKey
    scope: str  # gpu | pair
    gpu: int  # GPU (owner for pairs)
    peer: int  # holder for pairs, -1 for gpu scope
    metric: str  # metric field (host_reason as host_reason.<reason>)
    value: int


@dataclass
class RunEvents:
    """The events recorded during one run (``[record] events``): rows as the event table's columns
    (:data:`huvmlab.traces.events.EVENT_SCHEMA`), the records the perf buffer dropped, the per-event counts the
    kernel kept, the source; ``window_ns``: the CLOCK_MONOTONIC window of the run's counters where they cover
    only part of the recording (the emulated node: between its settled GET_STATS), else None."""

    rows: list[dict[str, Any]]
    lost: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    source: str = ""
    window_ns: tuple[int, int] | None = None


@dataclass
class RunResult:
    key: RunKey
    sim_time_ns: int
    tenants: list[TenantRow] = field(default_factory=list)
    traffic: list[TrafficRow] = field(default_factory=list)
    samples: list[SampleRow] = field(default_factory=list)
    counters: list[CounterRow] = field(default_factory=list)
    policy_settings: dict[str, str] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=dict)  # the node it ran on (huvmlab.experiment.executor.NodeRecord)
    events: RunEvents | None = None  # the recorded events, with [record] events

    def foreground_runtime_ns(self) -> int:
        """The run's figure of merit: the slowest foreground tenant's runtime (the makespan)."""
        fg = [t.runtime_ns for t in self.tenants if t.foreground]
        return max(fg) if fg else 0


@dataclass
class ExperimentResult:
    name: str
    description: str
    node: str
    sweep_key: str | None
    runs: list[RunResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: (tenant, sweep value) -> the tenant alone on the node under stock (sweep value None unless the sweep
    #: changes the tenants): the baseline of every lender's slowdown; (tenant, sweep value, run_id) -> a
    #: background tenant alone over that run's window
    alone: dict[tuple[Any, ...], TenantRow] = field(default_factory=dict)

    def alone_row(self, tenant: str, sweep_value: Any, run_id: str | None = None) -> TenantRow | None:
        for key in ((tenant, sweep_value, run_id), (tenant, None, run_id), (tenant, sweep_value), (tenant, None)):
            if key in self.alone:
                return self.alone[key]
        return None

    def run(self, policy: str, sweep_value: Any = None, repetition: int = 0) -> RunResult | None:
        for r in self.runs:
            if r.key == RunKey(policy, sweep_value, repetition):
                return r
        return None

    def ideal(self, sweep_value: Any, repetition: int = 0) -> RunResult | None:
        return self.run("ideal", sweep_value, repetition) or self.run("ideal", None, repetition)

    @property
    def policies(self) -> list[str]:
        """Policies in file order, the ideal run last (the side-by-side order: stock, ..., ideal)."""
        names = list(dict.fromkeys(r.key.policy for r in self.runs if r.key.policy != "ideal"))
        return names + (["ideal"] if any(r.key.policy == "ideal" for r in self.runs) else [])

    @property
    def sweep_values(self) -> list[Any]:
        return list(dict.fromkeys(r.key.sweep_value for r in self.runs if r.key.policy != "ideal")) or [None]
