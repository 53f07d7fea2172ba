"""Plots of an experiment (matplotlib, Agg, PNG): runtime per policy, ratio to ideal, traffic per path,
memory over time, harvester speedup beside lender slowdown, and the sweep curve when there is a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .results import ExperimentResult  # noqa: E402
from .summary import policy_rows  # noqa: E402

_DPI = 110
_METADATA = {"Software": None}  # no matplotlib version/time stamps: identical inputs, identical files


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI, metadata=_METADATA)
    plt.close(fig)
    return path


def _label(value: Any) -> str:
    return "" if value is None else str(value)


def runtime(res: ExperimentResult, out: Path) -> Path:
    rows = [r for r in policy_rows(res) if r.sweep_value == res.sweep_values[0]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r.policy for r in rows], [r.runtime_s for r in rows], color="tab:blue")
    ax.set_ylabel("runtime (s, simulated)")
    ax.set_title(f"{res.name}: runtime per policy")
    for i, r in enumerate(rows):
        ax.annotate(f"{r.runtime_s:.2f}", (i, r.runtime_s), ha="center", va="bottom", fontsize=8)
    return _save(fig, out / "runtime.png")


def ratio(res: ExperimentResult, out: Path) -> Path:
    rows = [r for r in policy_rows(res) if r.sweep_value == res.sweep_values[0] and r.ratio_to_ideal is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r.policy for r in rows], [r.ratio_to_ideal or 0 for r in rows], color="tab:orange")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylabel("runtime / ideal")
    ax.set_title(f"{res.name}: slowdown vs unlimited memory")
    return _save(fig, out / "ratio_to_ideal.png")


def traffic(res: ExperimentResult, out: Path) -> Path:
    value = res.sweep_values[0]
    policies = res.policies
    paths = ("host_to_gpu", "gpu_to_host", "gpu_to_gpu", "remote_read")
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    bottom = [0.0] * len(policies)
    for path in paths:
        vals = []
        for p in policies:
            run = res.run(p, None if p == "ideal" else value) or res.run(p, value)
            vals.append(sum(t.bytes for t in run.traffic if t.path == path) / 1e9 if run else 0.0)
        ax.bar(policies, vals, bottom=bottom, label=path)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("GB moved")
    ax.set_title(f"{res.name}: traffic per path")
    ax.legend(fontsize=7)
    return _save(fig, out / "traffic.png")


def memory(res: ExperimentResult, out: Path) -> Path:
    value = res.sweep_values[0]
    policies = [p for p in res.policies if p != "ideal"]
    fig, axes = plt.subplots(len(policies), 1, figsize=(7, 2.2 * len(policies)), squeeze=False, sharex=True)
    for ax, p in zip(axes[:, 0], policies, strict=True):
        run = res.run(p, value)
        if run is None or not run.samples:
            ax.set_title(f"{p}: no samples")
            continue
        gpus = sorted({s.gpu for s in run.samples})
        for g in gpus:
            pts = [s for s in run.samples if s.gpu == g]
            t = [s.t_ns / 1e9 for s in pts]
            color = f"C{g % 10}"
            ax.plot(t, [(s.own_bytes + s.guest_bytes) / 2**30 for s in pts], color=color, label=f"GPU{g} used")
            if any(s.guest_bytes for s in pts):
                ax.plot(t, [s.guest_bytes / 2**30 for s in pts], color=color, linestyle=":", label=f"GPU{g} lent")
        ax.set_title(p, fontsize=9)
        ax.set_ylabel("GiB")
        ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("time (s, simulated)")
    return _save(fig, out / "memory.png")


def sweep(res: ExperimentResult, out: Path) -> Path:
    rows = policy_rows(res)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for p in res.policies:
        if p == "ideal":
            continue
        pts = [r for r in rows if r.policy == p]
        ax.plot([_label(r.sweep_value) for r in pts], [r.runtime_s for r in pts], marker="o", label=p)
    ideal = [r for r in rows if r.policy == "ideal"]
    if ideal:
        ax.axhline(ideal[0].runtime_s, color="black", linestyle="--", linewidth=0.8, label="ideal")
    ax.set_xlabel(res.sweep_key or "")
    ax.set_ylabel("runtime (s, simulated)")
    ax.set_title(f"{res.name}: sweep of {res.sweep_key}")
    ax.legend(fontsize=7)
    return _save(fig, out / "sweep.png")


def harvest_and_lend(res: ExperimentResult, out: Path) -> Path:
    """Side by side per policy: the harvesters' speedup over stock and the worst lender's slowdown against
    running alone (what the speedup cost the lenders)."""
    rows = [r for r in policy_rows(res) if r.sweep_value == res.sweep_values[0] and r.policy != "ideal"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.5))
    a1.bar([r.policy for r in rows], [r.harvester_speedup or 0 for r in rows], color="tab:green")
    a1.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    a1.set_ylabel("harvester speedup vs stock")
    a2.bar([r.policy for r in rows], [((r.lender_slowdown or 1.0) - 1) * 100 for r in rows], color="tab:red")
    a2.axhline(0.0, color="black", linewidth=0.8)
    a2.set_ylabel("worst lender slowdown vs alone (%)")
    for ax in (a1, a2):
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"{res.name}: what harvesting gained and what lending cost", fontsize=9)
    return _save(fig, out / "harvest_and_lend.png")


def all_plots(res: ExperimentResult, outdir: Path) -> list[Path]:
    out = outdir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    paths = [runtime(res, out), ratio(res, out), traffic(res, out), memory(res, out), harvest_and_lend(res, out)]
    if res.sweep_key:
        paths.append(sweep(res, out))
    return paths
