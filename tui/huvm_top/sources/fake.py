"""A deterministic fake node for tests and demos: no library, no device, no clock.

Every :meth:`FakeSource.snapshot` advances a fake clock by one second and the counters by a fixed pattern
(GPU 0 and 1 harvest onto 2 and 3, with some host fallbacks), or plays back the snapshots it was given.
The fake "core" refuses a lend reserve larger than the GPU, so the editor's core-refusal path is testable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from huvm_top import abi
from huvm_top.hist import Log2Hists
from huvm_top.metrics import gpu_metrics, pair_metrics, reason_key, va_space_metrics
from huvm_top.model import (
    FieldError,
    GpuInfo,
    GpuPolicy,
    NodeAbsent,
    NodeInfo,
    PolicyRefused,
    PolicyState,
    Snapshot,
    SourceError,
    TraceEvent,
    VaSpace,
)
from huvm_top.policy_rules import check_policy, node_specs

GIB = 1 << 30


def _zero_gpu() -> dict[str, int]:
    return {m.key: 0 for m in gpu_metrics()}


def _zero_pair() -> dict[str, int]:
    return {m.key: 0 for m in pair_metrics()}


class FakeSource:
    """A StatsSource over a synthetic node of ``gpus`` GPUs of ``memory_gib`` GiB each."""

    def __init__(
        self,
        gpus: int = 4,
        memory_gib: int = 16,
        snapshots: Sequence[Snapshot] | None = None,
        fail_open: str | None = None,
        absent: int = 0,
    ) -> None:
        self.n = gpus
        self.memory = memory_gib * GIB
        self._playback = list(snapshots) if snapshots is not None else None
        self._fail_open = fail_open
        self.absent = absent  # the first ``absent`` opens find no node (NodeAbsent), as before a module load
        self.waits = 0
        self._step = 0
        self._lock = threading.Lock()
        self._gpus = [_zero_gpu() for _ in range(gpus)]
        self._pairs = [[_zero_pair() for _ in range(gpus)] for _ in range(gpus)]
        self._policy = self.preset("huvm")
        self._policy.generation = 1
        self.sent: list[PolicyState] = []  # every policy the fake core accepted
        self.closed = False

    # StatsSource

    def open(self) -> NodeInfo:
        if self._fail_open:
            raise SourceError(self._fail_open)
        if self.absent > 0:
            self.absent -= 1
            raise NodeAbsent("/dev/fake-uvm does not exist: the nvidia-uvm module is not loaded")
        gpus = tuple(GpuInfo(i, f"fake{i}", f"GPU-fake-{i:04d}", self.memory) for i in range(self.n))
        return NodeInfo("fake", f"fake node ({self.n} GPUs)", gpus)

    def snapshot(self) -> Snapshot:
        with self._lock:
            self._step += 1
            if self._playback is not None:
                return self._playback[min(self._step - 1, len(self._playback) - 1)]
            self._advance()
            free = tuple(max(0, self.memory // 4 - g["lent_bytes"]) for g in self._gpus)
            return Snapshot(
                timestamp_ns=self._step * 1_000_000_000,
                generation=self._policy.generation,
                gpus=tuple(dict(g) for g in self._gpus),
                pairs=tuple(tuple(dict(c) for c in row) for row in self._pairs),
                free_bytes=free,
                va_spaces=self._va_spaces(),
            )

    def _va_spaces(self) -> tuple[VaSpace, ...]:
        """One process per harvesting GPU, with that GPU's counters."""
        out = []
        for i in range(self.n // 2 or 1):
            g = self._gpus[i]
            counters = {m.key: 0 for m in va_space_metrics()}
            for key in ("evict_to_peer", "evict_to_host", "fetch_from_peer", "fetch_from_host", "harvested_bytes"):
                counters[key] = g[key]
            counters["prefetch"] = g["prefetch_local"] + g["prefetch_to_peer"]
            out.append(VaSpace(i + 1, 4000 + i, f"job{i}", 1 << i, counters))
        return tuple(out)

    def _advance(self) -> None:
        chunk = abi.chunk_size()
        s = self._step
        holders = [h for h in range(self.n) if h >= self.n // 2] or [0]
        for owner in range(self.n // 2 or 1):
            g = self._gpus[owner]
            holder = holders[(owner + s) % len(holders)]
            n_peer = 10 + owner * 5 + (s % 3)  # chunks to the peer this second
            n_host = 2 + (s % 2)
            g["faults"] += 100 + 10 * owner
            g["fault_batches"] += 4
            g["evict_to_peer"] += n_peer
            g["evict_to_host"] += n_host
            g[reason_key(abi.reason_names().index("peer_full"))] += n_host - 1
            g[reason_key(abi.reason_names().index("hysteresis"))] += 1
            g["fetch_from_peer"] += n_peer // 2
            g["fetch_from_host"] += 1
            g["prefetch_local"] += 3
            g["bytes_to_peer"] += n_peer * chunk
            g["bytes_from_peer"] += (n_peer // 2) * chunk
            g["harvested_bytes"] += (n_peer - n_peer // 2) * chunk
            h = self._gpus[holder]
            h["lent_bytes"] += (n_peer - n_peer // 2) * chunk
            h["lent_peak_bytes"] = max(h["lent_peak_bytes"], h["lent_bytes"])
            cell = self._pairs[owner][holder]
            cell["evict_chunks"] += n_peer
            cell["fetch_chunks"] += n_peer // 2
            cell["held_bytes"] += (n_peer - n_peer // 2) * chunk
            if s % 5 == 0 and cell["held_bytes"] >= chunk:  # the lender gives one chunk back
                cell["giveback_chunks"] += 1
                cell["held_bytes"] -= chunk
                h["giveback"] += 1
                h["lent_bytes"] -= chunk
                g["harvested_bytes"] -= chunk

    def get_policy(self) -> PolicyState:
        with self._lock:
            return self._policy.copy()

    def check_policy(self, policy: PolicyState) -> list[FieldError]:
        return []

    def set_policy(self, policy: PolicyState) -> PolicyState:
        errors = check_policy(policy)
        if errors:
            raise PolicyRefused(errors[0].field, f"NV_ERR_OUT_OF_RANGE ({errors[0].message})")
        for i, g in enumerate(policy.gpus):
            if g.lend_reserve_bytes > self.memory:
                raise PolicyRefused(f"gpus[{i}].lend_reserve_bytes", "NV_ERR_OUT_OF_RANGE (larger than the GPU)")
        with self._lock:
            new = policy.copy()
            new.generation = self._policy.generation + 1
            self._policy = new
            self.sent.append(new.copy())
            return new.copy()

    def preset(self, name: str) -> PolicyState:
        names = abi.preset_names()
        if name not in names or name == "custom":
            raise SourceError(f"unknown preset {name!r} (one of {', '.join(n for n in names if n != 'custom')})")
        roles = abi.role_names()
        node = {s.name: s.lo for s in node_specs()}
        node["preset"] = names.index(name)
        node["peer_usage_max_pct"] = 100
        node["preevict_batch"] = 1
        gpus: list[GpuPolicy] = []
        for i in range(self.n):
            if name == "stock":
                role = roles.index("none")
            else:
                role = roles.index("harvester") if i < self.n // 2 else roles.index("lender")
            gpus.append(GpuPolicy(f"GPU-fake-{i:04d}", role, abi.unlimited(), 0 if name != "huvm" else GIB))
        if name == "atc22":
            node["peer_select"] = abi.enum_names("HUVM_PEER_SELECT_").index("fewest_lent")
            node["nvlink_only"] = 1
        if name == "huvm":
            node["peer_select"] = abi.enum_names("HUVM_PEER_SELECT_").index("bw_weighted")
            node["nvlink_only"] = 1
            node["preevict_chunks"] = 4
            node["preevict_batch"] = 2
            node["prefetch_mode"] = abi.enum_names("HUVM_PREFETCH_").index("multipath")
            node["prefetch_chunks"] = 4
            node["hysteresis_ms"] = 50
        gen = self._policy.generation if hasattr(self, "_policy") else 0
        return PolicyState(gen, node, gpus)

    def wait(self, timeout: float) -> None:
        self.waits += 1
        time.sleep(min(timeout, 0.02))

    def close(self) -> None:
        self.closed = True


class FakeEvents:
    """An EventSource that makes a few events per poll, or hands out the events it was given."""

    description = "fake events"

    def __init__(self, events: Sequence[TraceEvent] | None = None, per_poll: int = 3) -> None:
        self._given = list(events) if events is not None else None
        self._per_poll = per_poll
        self._n = 0
        self._counts: dict[str, int] = {}
        self._hists = Log2Hists()
        self.started = False

    def start(self) -> None:
        self.started = True

    def poll(self, timeout_ms: int) -> list[TraceEvent]:
        time.sleep(timeout_ms / 1000)
        if self._given is not None:
            out, self._given = self._given, []
        else:
            names = abi.event_names()
            out = []
            for _ in range(self._per_poll):
                self._n += 1
                name = names[self._n % 5]  # no policy events
                out.append(
                    TraceEvent(self._n * 1_000_000, name, self._n % 2, 2 + self._n % 2, 0,
                               abi.chunk_size() * (1 + self._n % 3), 0x7F0000000000 + self._n * abi.chunk_size())
                )
        for ev in out:
            self._counts[ev.name] = self._counts.get(ev.name, 0) + 1
            self._hists.add(ev.name, ev.bytes)
        return out

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def histograms(self) -> dict[str, list[int]]:
        return self._hists.snapshot()

    def lost(self) -> int:
        return 0

    def close(self) -> None:
        pass
