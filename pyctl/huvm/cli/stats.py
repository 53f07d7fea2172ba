"""huvmctl stats [--watch SEC] [--count N] [--json] [--pairs] [--reset]."""

from __future__ import annotations

import argparse
import time

from .. import argtypes, render
from ..errors import UsageError
from .common import add_verb, open_node, out, print_json, print_jsonl


def cmd_stats(args: argparse.Namespace) -> int:
    if args.count is not None and args.watch is None:
        raise UsageError("--count goes with --watch SEC")
    with open_node(args) as node:
        if args.reset:
            node.reset_stats()
        snap = node.stats()
        if args.watch is None:
            if args.json:
                print_json(snap.to_dict())
            else:
                out.print(render.stats_table(snap, all_fields=args.all))
                if args.pairs and snap.pairs:
                    out.print(render.pairs_table(snap))
            return 0
        if not args.json:
            out.print(f"[dim]rates every {args.watch:g} s; Ctrl-C to end[/dim]")
        n = 0
        try:
            while args.count is None or n < args.count:
                time.sleep(args.watch)
                new = node.stats()
                delta = new.delta(snap)
                if args.json:
                    print_jsonl({"interval_s": delta.seconds, "timestamp_ns": new.timestamp_ns,
                                 "gpus": [{"gpu": g.gpu, **r} for g, r in zip(delta.gpus, delta.rates(), strict=True)],
                                 "totals": new.to_dict()["gpus"]})
                else:
                    out.print(render.stats_table(delta, rates=True, all_fields=args.all))
                    if args.pairs and delta.pairs:
                        out.print(render.pairs_table(delta))
                snap = new
                n += 1
        except KeyboardInterrupt:
            pass
        return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "stats", parents=parents, help="counters per GPU and per pair; rates with --watch",
                 description="Counters per GPU (and per pair with --pairs). With --watch SEC, rates per "
                             "second every SEC seconds (JSON lines with --json).",
                 examples=["huvmctl stats", "huvmctl stats --pairs --all",
                           "huvmctl stats --watch 1 --count 10 --json"])
    p.add_argument("--watch", type=argtypes.seconds(86400), metavar="SEC",
                   help="print rates every SEC seconds (0 < SEC <= 86400)")
    p.add_argument("--count", type=argtypes.count(1, 10**9), metavar="N", help="with --watch: stop after N intervals")
    p.add_argument("--pairs", action="store_true", help="also per GPU pair")
    p.add_argument("--all", action="store_true", help="every counter, zeros included")
    p.add_argument("--reset", action="store_true", help="reset the counters first (gauges stay)")
    p.set_defaults(func=cmd_stats)
