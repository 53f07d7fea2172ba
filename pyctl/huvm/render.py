"""Rich renderings of the library's objects for humans (the CLI prints these; --json prints to_dict)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from .budget import LenderBudget
from .info import NodeInfo
from .metrics import GPU_METRICS, PAIR_METRICS
from .policy import GPU_KEYS, KEYS, NODE_KEYS, Policy, format_value
from .stats import StatsDelta, StatsSnapshot
from .topology import Topology
from .units import format_rate, human_bytes


def gpus_table(info: NodeInfo, policy: Policy | None = None, stats: StatsSnapshot | None = None) -> Table:
    t = Table(title="GPUs", title_justify="left")
    for col in ("gpu", "uuid", "name", "memory", "free"):
        t.add_column(col, justify="right" if col in ("gpu", "memory", "free") else "left")
    if policy:
        for col in GPU_KEYS:
            t.add_column(col, overflow="fold")  # a key's one spelling, folded rather than cut
    if stats:
        t.add_column("lent", justify="right")
        t.add_column("harvested", justify="right")
    for g in info.gpus:
        row = [str(g.index), g.uuid, g.name, human_bytes(g.memory_bytes), human_bytes(g.free_bytes)]
        if policy:
            e = policy.gpu_by_uuid(g.uuid)
            row += ([format_value(KEYS[k], getattr(e, k)) for k in GPU_KEYS] if e else ["-"] * len(GPU_KEYS))
        if stats:
            c = next((x for x in stats.gpus if x.gpu == g.index), None)
            row += ([human_bytes(c.scalar("lent_bytes")), human_bytes(c.scalar("harvested_bytes"))]
                    if c else ["-", "-"])
        t.add_row(*row)
    return t


def links_table(info: NodeInfo) -> Table:
    """nvidia-smi topo -m style matrix."""
    t = Table(title="Peer links (MB/s per direction)", title_justify="left")
    t.add_column("")
    for g in info.gpus:
        t.add_column(f"GPU{g.index}", justify="center")
    for a in info.gpus:
        row = [f"GPU{a.index}"]
        for b in info.gpus:
            if a.index == b.index:
                row.append("X")
                continue
            link = info.link(a.index, b.index)
            row.append(f"{link.short} {link.mbyte_per_s}" if link else "-")
        t.add_row(*row)
    return t


def topology_table(topo: Topology) -> Table:
    t = Table(title="Topology", title_justify="left")
    for col in ("gpu", "uuid", "name", "memory", "hbm", "nvml", "pci bus", "pcie", "nvlinks"):
        t.add_column(col)
    for g in topo.gpus:
        pcie = f"gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen else "-"
        active = sum(1 for lk in g.nvlinks if lk.active)
        t.add_row(str(g.index), g.uuid, g.name, human_bytes(g.memory_bytes),
                  "-" if g.hbm_mbyte_per_s is None else format_rate(g.hbm_mbyte_per_s),
                  "-" if g.nvml_index is None else str(g.nvml_index), g.pci_bus_id or "-", pcie,
                  f"{active} active" if g.nvlinks else "-")
    return t


def lender_budget_table(budgets: Sequence[LenderBudget], info: NodeInfo, policy: Policy,
                        max_slowdown: float) -> Table:
    """``policy lender-budget``: each GPU's HBM bandwidth, the share guests may take and the budget."""
    share = budgets[0].share if budgets else 0.0
    t = Table(title=f"Lender budgets for at most {max_slowdown:.2%} slowdown (guests' copies: {share:.2%} of "
                    "the HBM bandwidth)", title_justify="left")
    for col in ("gpu", "uuid", "role", "hbm", "from", "lend_traffic_mbyte_per_s now", "lend_traffic_mbyte_per_s"):
        t.add_column(col)
    entries = {e.uuid.lower(): e for e in policy.gpus}
    for b in budgets:
        e = entries.get(b.uuid.lower())
        now = "-" if e is None else format_value(KEYS["lend_traffic_mbyte_per_s"], e.lend_traffic_mbyte_per_s)
        role = "-" if e is None else e.role_name
        t.add_row(str(b.gpu), b.uuid, role, format_rate(b.hbm_mbyte_per_s), b.hbm_source, now,
                  format_rate(b.lend_traffic_mbyte_per_s))
    return t


def policy_table(policy: Policy, info: NodeInfo | None = None) -> Table:
    t = Table(title=f"Policy (preset {policy.preset_name}, generation {policy.generation})", title_justify="left")
    t.add_column("key")
    t.add_column("value")
    t.add_column("meaning", style="dim")
    for k in NODE_KEYS:
        t.add_row(k, format_value(KEYS[k], getattr(policy, k)), KEYS[k].help)
    index = {g.uuid.lower(): g.index for g in info.gpus} if info else {}
    for e in policy.gpus:
        sel = str(index.get(e.uuid.lower(), e.uuid))
        for k in GPU_KEYS:
            t.add_row(f"gpu.{sel}.{k}", format_value(KEYS[k], getattr(e, KEYS[k].field)),
                      KEYS[k].help if sel == "0" else "")
    return t


def diff_table(changes: Sequence[tuple[str, str, str]], old: str = "current", new: str = "new") -> Table:
    t = Table(title="Policy changes" if changes else "No changes", title_justify="left")
    t.add_column("key")
    t.add_column(old)
    t.add_column(new)
    for k, a, b in changes:
        t.add_row(k, a, f"[bold]{b}[/bold]")
    return t


def stats_table(snap: StatsSnapshot | StatsDelta, *, rates: bool = False, all_fields: bool = False) -> Table:
    """One row per metric (non-zero ones unless all_fields), one column per GPU, and the total; with rates,
    counters per second (gauges as they are)."""
    gpus = snap.gpus
    rate_rows = snap.rates() if rates and isinstance(snap, StatsDelta) else None
    t = Table(title="Counters per second" if rate_rows is not None else "Counters", title_justify="left")
    t.add_column("metric")
    t.add_column("unit")
    for g in gpus:
        t.add_column(f"GPU{g.gpu}", justify="right")
    t.add_column("total", justify="right")

    def cell(m_unit: str, v: float) -> str:
        if m_unit == "bytes":
            return human_bytes(v)
        return f"{v:.1f}" if isinstance(v, float) and not v.is_integer() else str(int(v))

    shown = 0
    for m in GPU_METRICS:
        per_second = rate_rows is not None and m.kind == "counter"
        unit = m.unit + ("/s" if per_second else "")
        if m.length is not None:
            for j, label in enumerate(m.label_values):
                vals = [float(v[j]) if isinstance(v := g.values[m.field], tuple) else 0.0 for g in gpus]
                if per_second:
                    vals = [x / snap.seconds if isinstance(snap, StatsDelta) and snap.seconds else 0.0 for x in vals]
                if all_fields or any(vals):
                    t.add_row(f"{m.field}.{label}", unit, *[cell(m.unit, x) for x in vals], cell(m.unit, sum(vals)))
                    shown += 1
            continue
        if per_second and rate_rows is not None:
            vals = [rate_rows[i].get(m.field, 0.0) for i in range(len(gpus))]
        else:
            vals = [float(g.scalar(m.field)) for g in gpus]
        if all_fields or any(vals):
            t.add_row(m.field, unit, *[cell(m.unit, x) for x in vals], cell(m.unit, sum(vals)))
            shown += 1
    if not shown:
        t.caption = "all counters are zero (--all lists them)"
    return t


def pairs_table(snap: StatsSnapshot | StatsDelta) -> Table:
    t = Table(title="Per pair (owner's data on holder)", title_justify="left")
    t.add_column("owner", justify="right")
    t.add_column("holder", justify="right")
    for m in PAIR_METRICS:
        t.add_column(m.column, justify="right")
    for p in snap.pairs:
        t.add_row(str(p.owner), str(p.holder),
                  *[human_bytes(p.values[m.field]) if m.unit == "bytes" else str(p.values[m.field])
                    for m in PAIR_METRICS])
    return t
