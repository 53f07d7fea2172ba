"""Scenarios on the simulated node: run one policy, or ideal / stock / huvm-atc22 / huvm side by side.

    from huvm.sim import NodeConfig, TenantSpec, run_comparison, workloads
    node = NodeConfig.preset("aws-p3.8xlarge")
    tenants = [TenantSpec(0, workloads.pagerank(41_700_000, 1_468_000_000, 5), role="harvester"),
               TenantSpec(1, static_bytes=4 << 30, role="lender")]
    cmp = run_comparison(node, tenants)
    for row in cmp.rows(): print(row)

Policies: ``ideal`` (unlimited GPU memory: compute plus cold first-touch faults only), ``stock`` (host-only
UVM), ``huvm-atc22`` (the published prototype's settings), ``huvm`` (ours). Results are deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .config import NodeConfig
from .errors import SimConfigError
from .node import SimNode
from .tenants import TenantSpec

POLICIES: tuple[str, ...] = ("ideal", "stock", "huvm-atc22", "huvm")


@dataclass(frozen=True)
class TenantResult:
    index: int
    name: str
    gpu: int
    runtime_ns: int
    steps_done: int
    step_end_ns: tuple[int, ...]
    compute_ns: int
    fault_stall_ns: int
    remote_stall_ns: int
    inflight_wait_ns: int
    faults: int
    fault_batches: int
    first_touches: int
    touches: int
    resident_chunks: int
    peer_chunks: int
    host_chunks: int
    done: bool
    ratio_to_ideal: float | None = None
    ops_done: int = 0
    alloc_stall_ns: int = 0         # stalled making room for its cudaMalloc allocations (start-up included)
    background: bool = False
    lend_stall_ns: int = 0          # time its ops lost to guests' copies in its GPU's memory (lending's cost)
    link_stall_ns: int = 0          # time its ops waited for their collectives beyond compute
    op_end_ns: tuple[int, ...] = ()     # every op's end (record_ops tenants only)

    @property
    def ops_per_s(self) -> float:
        """Throughput over its run: what a lender that runs until the others finish is measured by."""
        return self.ops_done * 1e9 / self.runtime_ns if self.runtime_ns else 0.0

    @property
    def work_rate(self) -> float:
        """Share of its run spent computing (its ops' time / its runtime): its throughput whatever the length
        of its ops or of the run; 1.0 when nothing stalled it."""
        return self.compute_ns / self.runtime_ns if self.runtime_ns else 0.0

    @property
    def stall_ns(self) -> int:
        """Every stall: faults (with their evictions), remote accesses, prefetches in flight, allocations, and
        the HBM time guests' copies took from it (lending)."""
        return (self.fault_stall_ns + self.remote_stall_ns + self.inflight_wait_ns + self.alloc_stall_ns +
                self.lend_stall_ns)

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["step_end_ns"] = list(self.step_end_ns)
        d["op_end_ns"] = list(self.op_end_ns)
        return d


@dataclass(frozen=True)
class MemorySeries:
    """Memory over time, bytes: ``t_ns`` (n,), the rest (n, gpus)."""

    t_ns: npt.NDArray[np.uint64]
    own_bytes: npt.NDArray[np.uint64]
    guest_bytes: npt.NDArray[np.uint64]
    free_bytes: npt.NDArray[np.uint64]
    peer_bytes: npt.NDArray[np.uint64]
    host_bytes: npt.NDArray[np.uint64]

    def to_dict(self) -> dict[str, Any]:
        return {k: v.tolist() for k, v in vars(self).items()}


@dataclass(frozen=True)
class SimResult:
    policy: str
    node: str
    tenants: tuple[TenantResult, ...]
    stats: dict[str, Any]           # GET_STATS, shaped like HUVM_GET_STATS_PARAMS
    traffic: dict[str, Any]         # bytes per path (huvm_sim_traffic_t)
    samples: MemorySeries
    sim_time_ns: int
    wall_s: float
    touches: int

    @property
    def touches_per_s(self) -> float:
        return self.touches / self.wall_s if self.wall_s > 0 else float("inf")

    def tenant(self, key: int | str) -> TenantResult:
        for t in self.tenants:
            if t.index == key or t.name == key:
                return t
        raise KeyError(key)

    def traffic_bytes(self) -> dict[str, int]:
        """Totals per path: pcie_h2d, pcie_d2h, nvlink (migrations), nvlink_remote (remote-mapped reads)."""
        tr = self.traffic
        return {
            "pcie_h2d": int(sum(tr["host_to_gpu"])),
            "pcie_d2h": int(sum(tr["gpu_to_host"])),
            "nvlink": int(sum(sum(r) for r in tr["gpu_to_gpu"])),
            "nvlink_remote": int(sum(sum(r) for r in tr["remote_read"])),
        }

    def counter_total(self, name: str) -> int:
        return int(sum(g[name] for g in self.stats["gpus"]))

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "policy": self.policy, "node": self.node, "sim_time_ns": self.sim_time_ns,
            "wall_s": self.wall_s, "touches": self.touches,
            "tenants": [t.to_dict() for t in self.tenants], "stats": self.stats, "traffic": self.traffic,
            "traffic_bytes": self.traffic_bytes(),
        }
        if samples:
            d["samples"] = self.samples.to_dict()
        return d


@dataclass(frozen=True)
class Comparison:
    results: dict[str, SimResult] = field(default_factory=dict)

    def __getitem__(self, policy: str) -> SimResult:
        return self.results[policy]

    def rows(self) -> list[dict[str, Any]]:
        """One row per (tenant, policy): runtime, ratio to ideal, speedup over stock, key counters."""
        out: list[dict[str, Any]] = []
        stock = self.results.get("stock")
        for pol, res in self.results.items():
            for t in res.tenants:
                base = stock.tenants[t.index].runtime_ns if stock and t.ratio_to_ideal is not None else None
                g = res.stats["gpus"][t.gpu]
                out.append({
                    "tenant": t.name, "gpu": t.gpu, "policy": pol, "runtime_s": t.runtime_ns / 1e9,
                    "ratio_to_ideal": t.ratio_to_ideal,
                    "speedup_vs_stock": (base / t.runtime_ns) if base and t.runtime_ns else None,
                    "faults": t.faults, "evict_to_peer": g["evict_to_peer"], "evict_to_host": g["evict_to_host"],
                    "fetch_from_peer": g["fetch_from_peer"], "giveback": g["giveback"],
                })
        return out

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        return {p: r.to_dict(samples=samples) for p, r in self.results.items()}


def _roles(tenants: Sequence[TenantSpec]) -> dict[int, str]:
    roles: dict[int, str] = {}
    for i, t in enumerate(tenants):
        if t.role is None:
            continue
        if t.gpu in roles and roles[t.gpu] != t.role:
            raise SimConfigError(f"GPU {t.gpu} is given roles {roles[t.gpu]!r} and {t.role!r}",
                                 field=f"tenants[{i}].role")
        roles[t.gpu] = t.role
    return roles


def run_scenario(node: NodeConfig | str, tenants: Sequence[TenantSpec], policy: str = "huvm", *,
                 policy_overrides: Mapping[str, int] | None = None, sample_interval_ns: int = 100_000,
                 max_samples: int = 2048, until_ns: int | None = None,
                 ideal: SimResult | None = None,
                 gpu_policy_overrides: Mapping[str, int] | None = None) -> SimResult:
    """Run ``tenants`` on the node under ``policy`` (one of :data:`POLICIES`). ``policy_overrides`` replace
    node-wide policy fields (huvm presets only; e.g. ``{"fetch_mode": 1}``), ``gpu_policy_overrides`` per-GPU
    fields of every GPU (``{"flags": 0}``; the tenants' lending keys still win on their GPUs). ``ideal``: a
    result of the ideal run whose tenant runtimes fill ``ratio_to_ideal``."""
    if policy not in POLICIES:
        raise SimConfigError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}", field="policy")
    if not tenants:
        raise SimConfigError("a scenario needs at least one tenant", field="tenants")
    cfg = NodeConfig.preset(node) if isinstance(node, str) else node
    preset = "stock" if policy in ("ideal", "stock") else policy
    sim = SimNode(cfg, preset, unlimited=policy == "ideal", sample_interval_ns=sample_interval_ns,
                  max_samples=max_samples)
    try:
        for t in tenants:
            sim.add_tenant(t)
        if preset != "stock":
            gpu_over: dict[int, dict[str, int]] = {
                g: dict(gpu_policy_overrides) for g in range(cfg.gpu_count)} if gpu_policy_overrides else {}
            for t in tenants:
                if t.lend_reserve_bytes is not None:
                    gpu_over.setdefault(t.gpu, {})["lend_reserve_bytes"] = t.lend_reserve_bytes
                if t.lend_limit_bytes is not None:
                    gpu_over.setdefault(t.gpu, {})["lend_limit_bytes"] = t.lend_limit_bytes
                if t.lend_traffic_mbyte_per_s is not None:
                    gpu_over.setdefault(t.gpu, {})["lend_traffic_mbyte_per_s"] = t.lend_traffic_mbyte_per_s
            roles = _roles(tenants)
            if roles or policy_overrides or gpu_over:
                sim.set_policy(roles=roles, overrides=policy_overrides, gpu_overrides=gpu_over)
        t0 = time.perf_counter()
        sim.run(until_ns)
        wall = time.perf_counter() - t0
        results = []
        touches = 0
        for i, spec in enumerate(tenants):
            r = sim.tenant_result(i)
            touches += r["touches"]
            ratio = None
            measured = spec.trace is not None and not spec.background     # background/idle: no own runtime
            if measured and ideal is not None and i < len(ideal.tenants) and ideal.tenants[i].runtime_ns:
                ratio = r["runtime_ns"] / ideal.tenants[i].runtime_ns
            elif measured and policy == "ideal" and r["runtime_ns"]:
                ratio = 1.0
            results.append(TenantResult(
                index=i, name=spec.label, gpu=spec.gpu, runtime_ns=r["runtime_ns"], steps_done=r["steps_done"],
                step_end_ns=tuple(sim.step_ends_ns(i)), compute_ns=r["compute_ns"],
                fault_stall_ns=r["fault_stall_ns"], remote_stall_ns=r["remote_stall_ns"],
                inflight_wait_ns=r["inflight_wait_ns"], faults=r["faults"], fault_batches=r["fault_batches"],
                first_touches=r["first_touches"], touches=r["touches"], resident_chunks=r["resident_chunks"],
                peer_chunks=r["peer_chunks"], host_chunks=r["host_chunks"], done=bool(r["done"]),
                ratio_to_ideal=ratio, ops_done=r["ops_done"], alloc_stall_ns=r["alloc_stall_ns"],
                background=spec.background, lend_stall_ns=r["lend_stall_ns"], link_stall_ns=r["link_stall_ns"],
                op_end_ns=tuple(sim.op_ends_ns(i)) if spec.record_ops else ()))
        s = sim.samples()
        return SimResult(policy=policy, node=cfg.name, tenants=tuple(results), stats=sim.stats(),
                         traffic=sim.traffic(), samples=MemorySeries(**s), sim_time_ns=sim.now_ns, wall_s=wall,
                         touches=touches)
    finally:
        sim.close()


def run_comparison(node: NodeConfig | str, tenants: Sequence[TenantSpec],
                   policies: Sequence[str] = POLICIES, **kw: Any) -> Comparison:
    """Run the same tenants under each policy (ideal first, so every result has ratios to ideal)."""
    for p in policies:
        if p not in POLICIES:
            raise SimConfigError(f"unknown policy {p!r}; known: {', '.join(POLICIES)}", field="policies")
    out: dict[str, SimResult] = {}
    ideal = run_scenario(node, tenants, "ideal", **kw)
    if "ideal" in policies:
        out["ideal"] = ideal
    for p in policies:
        if p != "ideal":
            out[p] = run_scenario(node, tenants, p, ideal=ideal, **kw)
    return Comparison(out)
