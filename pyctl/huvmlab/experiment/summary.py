"""Summaries of an experiment: the side-by-side tables (policy x tenant, ratios to ideal and to stock, harvester
speedup and lender slowdown)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

from .results import ExperimentResult, RunResult, TenantRow


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
    harvester_speedup: float | None = None  # stock's harvester makespan / this one's (harvesters: runner.tenant_role)
    lender_slowdown: float | None = None  # the lender hurt most, vs alone (1.0: lending cost it nothing)
    worst_lender: str | None = None

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


def harvest_makespan_ns(run: RunResult) -> int:
    """The harvesters' makespan (every foreground tenant's when none is classed harvester)."""
    h = [t.runtime_ns for t in run.tenants if t.role == "harvester" and t.foreground]
    return max(h) if h else run.foreground_runtime_ns()


def lender_slowdowns(res: ExperimentResult, run: RunResult) -> dict[str, float]:
    """Each lender's slowdown against running alone (lenders with work that have an alone baseline)."""
    out: dict[str, float] = {}
    for t in run.tenants:
        alone = res.alone_row(t.tenant, run.key.sweep_value, run.key.run_id)
        if t.role == "lender" and alone is not None and (x := t.slowdown_vs(alone)) is not None:
            out[t.tenant] = x
    return out


def policy_rows(res: ExperimentResult) -> list[PolicyRow]:
    rows: list[PolicyRow] = []
    for value in res.sweep_values:
        ideal_runs = _runs(res, "ideal", value)
        ideal = mean(r.foreground_runtime_ns() for r in ideal_runs) if ideal_runs else None
        stock_runs = _runs(res, "stock", value)
        stock = mean(r.foreground_runtime_ns() for r in stock_runs) if stock_runs else None
        stock_h = mean(harvest_makespan_ns(r) for r in stock_runs) if stock_runs else None
        for policy in res.policies:
            runs = _runs(res, policy, value)
            if not runs:
                continue
            rt = mean(r.foreground_runtime_ns() for r in runs)
            hm = mean(harvest_makespan_ns(r) for r in runs)
            slow = [lender_slowdowns(res, r) for r in runs]
            worst = max(slow[0], key=lambda k: slow[0][k]) if slow and slow[0] else None
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
                len(runs),
                stock_h / hm if stock_h and hm else None,
                mean(d[worst] for d in slow) if worst is not None else None,
                worst))
    return rows


def tenant_table(res: ExperimentResult, sweep_value: Any = None) -> tuple[list[str], list[list[str]]]:
    """Side-by-side: one row per tenant, one column per policy. A harvester's runtime in s (x ideal); a
    lender's runtime, or its throughput when it runs until the others finish, with its slowdown against
    running alone (``+0.0 %``: lending cost it nothing)."""
    policies = res.policies
    header = ["tenant", "role", "gpu", "alone", *policies]
    rows: list[list[str]] = []
    tenants: dict[str, tuple[int, bool, str]] = {}
    for r in res.runs:
        for t in r.tenants:
            tenants.setdefault(t.tenant, (t.gpu, t.foreground, t.role))
    for name, (gpu, fg, role) in tenants.items():
        ideal = _tenant_runtime(res, "ideal", sweep_value, name)
        alone = res.alone_row(name, sweep_value)
        row = [name + ("" if fg else " (bg)"), role, str(gpu), "-" if alone is None else _measure(alone)]
        for p in policies:
            ts = [t for r in _runs(res, p, sweep_value) for t in r.tenants if t.tenant == name]
            if not ts:
                row.append("-")
                continue
            t = ts[0]
            cell = _measure(t)
            window = res.alone_row(name, sweep_value, t.run.run_id) or alone
            if role == "lender" and window is not None and p != "ideal" and (x := t.slowdown_vs(window)) is not None:
                cell += f" ({round((x - 1) * 100, 1) + 0.0:+.1f} %)"
            elif ideal and p != "ideal" and fg:
                cell += f" ({mean(u.runtime_ns for u in ts) / ideal:.2f}x)"
            row.append(cell)
        rows.append(row)
    return header, rows


def _measure(t: TenantRow) -> str:
    if t.role == "idle":
        return "-"
    if not t.foreground:
        return f"{t.ops_per_s:.0f} ops/s"
    return f"{t.runtime_ns / 1e9:.3f} s"


def _tenant_runtime(res: ExperimentResult, policy: str, value: Any, tenant: str) -> float | None:
    vals = [t.runtime_ns for r in _runs(res, policy, value) for t in r.tenants if t.tenant == tenant]
    return mean(vals) if vals else None
