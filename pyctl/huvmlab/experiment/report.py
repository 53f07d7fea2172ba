"""report.md: the side-by-side tables, the setup and the list of files; and the same tables for the
terminal (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from .results import ExperimentResult
from .summary import PolicyRow, policy_rows, tenant_table

POLICY_HEADER = ["policy", "runtime (s)", "x ideal", "speedup vs stock", "harvester speedup", "lender slowdown",
                 "evict->peer", "evict->host", "NVLink GB", "PCIe GB"]


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def slowdown_cell(x: float | None, who: str | None = None) -> str:
    """A slowdown as a percentage (``+0.0 %``: no cost), with the tenant it is about."""
    if x is None:
        return "-"
    return f"{round((x - 1) * 100, 1) + 0.0:+.1f} %" + (f" ({who})" if who else "")


def policy_cells(r: PolicyRow) -> list[str]:
    return [r.policy, f"{r.runtime_s:.3f}", _fmt(r.ratio_to_ideal, ".2f"), _fmt(r.speedup_vs_stock, ".2f"),
            _fmt(r.harvester_speedup, ".2f"), slowdown_cell(r.lender_slowdown, r.worst_lender),
            str(r.evict_to_peer), str(r.evict_to_host), f"{r.nvlink_bytes / 1e9:.2f}", f"{r.pcie_bytes / 1e9:.2f}"]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _groups(res: ExperimentResult) -> list[tuple[Any, list[PolicyRow]]]:
    rows = policy_rows(res)
    out: list[tuple[Any, list[PolicyRow]]] = []
    for value in res.sweep_values:
        out.append((value, [r for r in rows if r.sweep_value == value]))
    return out


def markdown(res: ExperimentResult, spec_text: str, files: Sequence[Path], outdir: Path) -> str:
    parts = [f"# Experiment: {res.name}", ""]
    if res.description:
        parts += [res.description, ""]
    parts += [f"Node: `{res.node}` (simulated; times are simulated seconds). Runtime is the makespan of the "
              "foreground tenants; `x ideal` divides by the unlimited-memory run; `speedup vs stock` divides "
              "stock's runtime by the policy's. `harvester speedup` is the same for the harvesters alone, and "
              "`lender slowdown` the cost to the lender hurt most (named) against running alone on the node: its "
              "runtime, or its throughput when it runs until the others finish (`+0.0 %`: lending cost it "
              "nothing).", ""]
    for value, group in _groups(res):
        if value is not None:
            parts += [f"## {res.sweep_key} = {value}", ""]
        else:
            parts += ["## Side by side", ""]
        parts += [_md_table(POLICY_HEADER, [policy_cells(r) for r in group]), ""]
        header, rows = tenant_table(res, value)
        parts += ["Per tenant:", "", _md_table(header, rows), ""]
    if res.notes:
        parts += ["## Notes", ""] + [f"- {n}" for n in res.notes] + [""]
    parts += ["## Files", ""]
    parts += [f"- `{p.relative_to(outdir)}`" for p in files]
    parts += ["", "## Plots", ""]
    parts += [f"![{p.stem}]({p.relative_to(outdir)})" for p in files if p.suffix == ".png"]
    parts += ["", "## Experiment file", "", "```toml", spec_text.rstrip(), "```", ""]
    return "\n".join(parts)


def rich_tables(res: ExperimentResult) -> list[Table]:
    tables: list[Table] = []
    for value, group in _groups(res):
        title = f"{res.name}" + ("" if value is None else f": {res.sweep_key} = {value}")
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(POLICY_HEADER):
            t.add_column(h, justify="left" if i == 0 else "right")
        for r in group:
            t.add_row(*policy_cells(r))
        tables.append(t)
    header, rows = tenant_table(res, res.sweep_values[0])
    t = Table(title="per tenant (harvesters: runtime, x ideal; lenders: runtime or throughput, vs alone)",
              title_justify="left")
    for h in header:
        t.add_column(h)
    for row in rows:
        t.add_row(*row)
    tables.append(t)
    return tables
