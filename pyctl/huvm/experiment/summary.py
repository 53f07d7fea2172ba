"""Summaries of an experiment: the side-by-side tables (policy x tenant, ratios to ideal and to stock)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

from .results import ExperimentResult, RunResult


@dataclass(frozen=True)
class PolicyRow:
    """One policy at one sweep value, averaged over repetitions."""

    sweep_value: Any
    policy: str
    runtime_s: float  # makespan of the foreground tenants
    ratio_to_ideal: float | None  # runtime / ideal runtime (1.0 = as fast as unlimited memory)
    speedup_vs_stock: float | None  # stock runtime / runtime
    evict_to_peer: int
    evict_to_host: int
    fetch_from_peer: int
    fetch_from_host: int
    nvlink_bytes: int
    pcie_bytes: int
    repetitions: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _counter(run: RunResult, metric: str) -> int:
    return sum(c.value for c in run.counters if c.scope == "gpu" and c.metric == metric)


def _traffic(run: RunResult, paths: tuple[str, ...]) -> int:
    return sum(t.bytes for t in run.traffic if t.path in paths)


def _runs(res: ExperimentResult, policy: str, value: Any) -> list[RunResult]:
    """Runs of policy at a sweep value; a policy (or ideal) that the sweep does not vary ran once, under the
    first sweep value (or None), and stands for every value."""
    exact = [r for r in res.runs if r.key.policy == policy and r.key.sweep_value == value]
    if exact:
        return exact
    first = res.sweep_values[0]
    return [r for r in res.runs if r.key.policy == policy and r.key.sweep_value in (first, None)]


def policy_rows(res: ExperimentResult) -> list[PolicyRow]:
    rows: list[PolicyRow] = []
    for value in res.sweep_values:
        ideal_runs = _runs(res, "ideal", value)
        ideal = mean(r.foreground_runtime_ns() for r in ideal_runs) if ideal_runs else None
        stock_runs = _runs(res, "stock", value)
        stock = mean(r.foreground_runtime_ns() for r in stock_runs) if stock_runs else None
        for policy in res.policies:
            runs = _runs(res, policy, value)
            if not runs:
                continue
            rt = mean(r.foreground_runtime_ns() for r in runs)
            rows.append(PolicyRow(
                value, policy, rt / 1e9,
                rt / ideal if ideal else None,
                stock / rt if stock and rt else None,
                round(mean(_counter(r, "evict_to_peer") for r in runs)),
                round(mean(_counter(r, "evict_to_host") for r in runs)),
                round(mean(_counter(r, "fetch_from_peer") for r in runs)),
                round(mean(_counter(r, "fetch_from_host") for r in runs)),
                round(mean(_traffic(r, ("gpu_to_gpu", "remote_read")) for r in runs)),
                round(mean(_traffic(r, ("host_to_gpu", "gpu_to_host")) for r in runs)),
                len(runs)))
    return rows


def tenant_table(res: ExperimentResult, sweep_value: Any = None) -> tuple[list[str], list[list[str]]]:
    """Side-by-side: one row per tenant, one column per policy (runtime in s, x ideal)."""
    policies = res.policies
    header = ["tenant", "gpu", *policies]
    rows: list[list[str]] = []
    tenants: dict[str, tuple[int, bool]] = {}
    for r in res.runs:
        for t in r.tenants:
            tenants.setdefault(t.tenant, (t.gpu, t.foreground))
    for name, (gpu, fg) in tenants.items():
        ideal = _tenant_runtime(res, "ideal", sweep_value, name)
        row = [name + ("" if fg else " (bg)"), str(gpu)]
        for p in policies:
            rt = _tenant_runtime(res, p, sweep_value, name)
            if rt is None:
                row.append("-")
            elif ideal and p != "ideal" and fg:
                row.append(f"{rt / 1e9:.3f} s ({rt / ideal:.2f}x)")
            else:
                row.append(f"{rt / 1e9:.3f} s")
        rows.append(row)
    return header, rows


def _tenant_runtime(res: ExperimentResult, policy: str, value: Any, tenant: str) -> float | None:
    vals = [t.runtime_ns for r in _runs(res, policy, value) for t in r.tenants if t.tenant == tenant]
    return mean(vals) if vals else None
