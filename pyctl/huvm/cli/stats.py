"""huvmctl stats [INTERVAL [COUNT]] [--watch SEC] [--count N] [-T] [--json] [--pairs] [--reset] [--run DIR]."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.table import Table

from .. import argtypes, jsonout, render
from ..abi import CHUNK_SIZE
from ..errors import UsageError
from ..stats import (
    GpuLending,
    StatsSnapshot,
    TenantFigures,
    gpu_lending,
    guest_traffic_mbyte_per_s,
    tenant_figures,
    tenant_figures_from_run,
)
from ..units import format_rate, human_bytes
from .common import add_verb, note, open_node, out, print_json, print_jsonl

NO_WORKLOAD_NOTE = "the simulated node has no workload: nothing will move; give --sim-config FILE (an experiment file)"


def lending_table(lend: Sequence[GpuLending]) -> Table:
    """Per GPU, what it lends and what it borrows, side by side."""
    t = Table(title="Lending per GPU (lent: others' data in its memory; borrowed: its data on peers)",
              title_justify="left")
    for col in ("GPU", "lent now", "lent peak", "chunks taken in", "given back", "guest traffic", "borrowed now",
                "chunks to peers", "fetched back"):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for g in lend:
        t.add_row(f"GPU{g.gpu}", human_bytes(g.lent_bytes), human_bytes(g.lent_peak_bytes), str(g.lent_chunks),
                  str(g.given_back_chunks), human_bytes(g.guest_traffic_chunks * CHUNK_SIZE),
                  human_bytes(g.borrowed_bytes), str(g.borrowed_chunks), str(g.fetched_back_chunks))
    return t


def guest_traffic_table(rates: Mapping[int, float], budgets: Mapping[int, int]) -> Table:
    """Per GPU: guests' traffic through it over the interval (MB/s) against its budget
    (gpu.N.lend_traffic_mbyte_per_s)."""
    t = Table(title="Guests' traffic through each GPU (MB/s over the interval; the budget holds per 20 ms)",
              title_justify="left")
    for col in ("GPU", "guest traffic", "budget", "of budget"):
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for gpu, mbps in sorted(rates.items()):
        b = budgets.get(gpu, 0)
        t.add_row(f"GPU{gpu}", f"{mbps:,.0f} MB/s", format_rate(b) if b else "off",
                  f"{mbps / b:.0%}" if b else "-")
    return t


def tenants_table(figs: Sequence[TenantFigures], title: str) -> Table:
    """One row per tenant (and sweep value), one column per policy: a harvester's runtime and speedup over
    stock, a lender's runtime or throughput and its slowdown against running alone."""
    policies = list(dict.fromkeys(f.policy for f in figs))
    t = Table(title=title, title_justify="left")
    for col in ("tenant", "role", "GPU", *policies):
        t.add_column(col, justify="right" if col in policies else "left")
    rows: dict[tuple[str, str | None], dict[str, TenantFigures]] = {}
    for f in figs:
        rows.setdefault((f.tenant, f.sweep_value), {})[f.policy] = f
    for (tenant, sweep), by_policy in rows.items():
        first = next(iter(by_policy.values()))
        cells = []
        for p in policies:
            fig = by_policy.get(p)
            if fig is None or fig.role == "idle":
                cells.append("-")
                continue
            cell = f"{fig.runtime_ns / 1e9:.3f} s" if fig.foreground else f"{fig.ops_per_s:.0f} ops/s"
            if fig.harvester_speedup is not None:
                cell += f" ({fig.harvester_speedup:.2f}x)"
            elif fig.lender_slowdown is not None:
                cell += f" ({round((fig.lender_slowdown - 1) * 100, 1) + 0.0:+.1f} %)"
            cells.append(cell)
        name = tenant + ("" if sweep is None else f" @{sweep}") + ("" if first.foreground else " (bg)")
        t.add_row(name, first.role, str(first.gpu), *cells)
    return t


TENANTS_TITLE = ("Tenants: harvesters' runtime (speedup over stock), lenders' runtime or throughput (slowdown "
                 "against running alone)")


def tenant_figures_of_backend(backend: Any) -> list[TenantFigures] | None:
    """The tenant figures of the experiment a backend runs (the lab's simulated node from an experiment file:
    its ``tenant_dicts()``), else None."""
    tenants = getattr(backend, "tenant_dicts", None)
    dicts = tenants() if callable(tenants) else None
    return None if dicts is None else tenant_figures(dicts)


def _cmd_run(args: argparse.Namespace) -> int:
    """stats --run DIR: an experiment output folder's tenant figures; no node is opened."""
    for flag, given in (("--watch/INTERVAL", args.watch is not None), ("--reset", args.reset),
                        ("--pairs", args.pairs), ("--all", args.all)):
        if given:
            raise UsageError(f"{flag} needs a node; --run DIR reads an experiment's output folder")
    figs = tenant_figures_from_run(args.run)
    if args.json:
        print_json(jsonout.dump(jsonout.StatsTenantsDoc.make(run=str(args.run), tenants=jsonout.tenant_figures(figs))))
    else:
        out.print(tenants_table(figs, TENANTS_TITLE))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    # bcc style: `stats 1 10` is `stats --watch 1 --count 10`; the flags and the positionals are one setting
    for flag, pos, name in (("watch", "interval", "INTERVAL"), ("count", "count_pos", "COUNT")):
        given, positional = getattr(args, flag), getattr(args, pos)
        if given is not None and positional is not None and given != positional:
            raise UsageError(f"{name} {positional:g} and --{flag} {given:g} disagree: give one")
        if given is None:
            setattr(args, flag, positional)
    if args.count is not None and args.watch is None:
        raise UsageError("--count goes with --watch SEC (or: huvmctl stats INTERVAL COUNT)")
    if args.timestamp and args.watch is None:
        raise UsageError("-T/--timestamp goes with --watch SEC (or: huvmctl stats INTERVAL)")
    if args.run is not None:
        return _cmd_run(args)
    with open_node(args, sim_live=args.watch is not None) as node:
        if args.reset:
            node.reset_stats()
        snap = node.stats()
        if args.watch is None:
            # a simulated node from an experiment file: its tenants under every policy of the experiment
            figs = tenant_figures_of_backend(node.backend)
            if args.json:
                print_json(jsonout.dump(jsonout.StatsDoc.make(
                    stats=jsonout.stats(snap), tenants=None if figs is None else jsonout.tenant_figures(figs))))
            else:
                _print_snapshot(snap, args)
                if figs is not None:
                    out.print(tenants_table(figs, TENANTS_TITLE))
            return 0
        if getattr(node.backend, "has_workload", True) is False:
            note(NO_WORKLOAD_NOTE)  # stderr: --json output stays clean
        if not args.json:
            out.print(f"[dim]rates every {args.watch:g} s; Ctrl-C to end[/dim]")
        n = 0
        try:
            while args.count is None or n < args.count:
                time.sleep(args.watch)
                node.advance(args.watch)  # a simulated node runs its workload; a real one moved by itself
                new = node.stats()
                delta = new.delta(snap)
                if args.json:
                    print_jsonl(jsonout.dump(jsonout.stats_interval(delta)))
                else:
                    if args.timestamp:
                        out.print(datetime.now().strftime("%H:%M:%S"), markup=False)
                    out.print(render.stats_table(delta, rates=True, all_fields=args.all))
                    if args.pairs and delta.pairs:
                        out.print(render.pairs_table(delta))
                    traffic = guest_traffic_mbyte_per_s(delta)
                    budgets = lend_traffic_budgets(node)
                    if any(traffic.values()) or any(budgets.values()):
                        out.print(guest_traffic_table(traffic, budgets))
                snap = new
                n += 1
        except KeyboardInterrupt:
            pass
        return 0


def lend_traffic_budgets(node: Any) -> dict[int, int]:
    """Per GPU index: its lend_traffic_mbyte_per_s budget now (MB/s; 0: none)."""
    index = {g.uuid.lower(): g.index for g in node.info().gpus}
    return {index[e.uuid.lower()]: e.lend_traffic_mbyte_per_s for e in node.get_policy().gpus
            if e.uuid.lower() in index}


def _print_snapshot(snap: StatsSnapshot, args: argparse.Namespace) -> None:
    out.print(render.stats_table(snap, all_fields=args.all))
    if args.pairs and snap.pairs:
        out.print(render.pairs_table(snap))
    if len(snap.gpus) > 1:
        out.print(lending_table(gpu_lending(snap)))


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "stats", parents=parents, help="counters per GPU and per pair; rates with an interval",
                 description="Counters per GPU (and per pair with --pairs), and per GPU what it lends and "
                             "borrows. With an INTERVAL (or --watch SEC), rates per second every INTERVAL seconds, "
                             "COUNT times or until Ctrl-C (JSON lines with --json). On a simulated node from an "
                             "experiment file the workload runs as the intervals pass; without an interval the "
                             "experiment's tenants are shown under each of its policies, harvester speedup over "
                             "stock and lender slowdown against running alone side by side. --run DIR shows "
                             "the same from an experiment's output folder.",
                 examples=["huvmctl stats", "huvmctl stats --pairs --all", "huvmctl stats 1 10 -T",
                           "huvmctl stats --watch 1 --count 10 --json",
                           "huvmctl --sim --sim-config pyctl/huvm/examples/consolidation.toml stats 1 5",
                           "huvmctl stats --run out/consolidation"])
    p.add_argument("interval", nargs="?", type=argtypes.seconds(86400), metavar="INTERVAL",
                   help="print rates every INTERVAL seconds (0 < INTERVAL <= 86400); same as --watch")
    p.add_argument("count_pos", nargs="?", type=argtypes.count(1, 10**9), metavar="COUNT",
                   help="stop after COUNT intervals; same as --count")
    p.add_argument("--watch", type=argtypes.seconds(86400), metavar="SEC",
                   help="print rates every SEC seconds (0 < SEC <= 86400)")
    p.add_argument("--count", type=argtypes.count(1, 10**9), metavar="N", help="with --watch: stop after N intervals")
    p.add_argument("-T", "--timestamp", action="store_true", help="with an interval: print the time before each")
    p.add_argument("--pairs", action="store_true", help="also per GPU pair")
    p.add_argument("--all", action="store_true", help="every counter, zeros included")
    p.add_argument("--reset", action="store_true", help="reset the counters first (gauges stay)")
    p.add_argument("--run", metavar="DIR", help="an experiment's output folder: its tenants' harvester speedup and "
                                                "lender slowdown per policy (no node is opened)")
    p.set_defaults(func=cmd_stats)
