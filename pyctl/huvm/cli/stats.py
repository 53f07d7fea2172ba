"""huvmctl stats [INTERVAL [COUNT]] [--watch SEC] [--count N] [-T] [--json] [--pairs] [--reset]."""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from .. import argtypes, jsonout, render
from ..errors import UsageError
from .common import add_verb, open_node, out, print_json, print_jsonl


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
    with open_node(args, sim_live=args.watch is not None) as node:
        if args.reset:
            node.reset_stats()
        snap = node.stats()
        if args.watch is None:
            if args.json:
                print_json(jsonout.dump(jsonout.StatsDoc.make(stats=jsonout.stats(snap))))
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
                snap = new
                n += 1
        except KeyboardInterrupt:
            pass
        return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "stats", parents=parents, help="counters per GPU and per pair; rates with an interval",
                 description="Counters per GPU (and per pair with --pairs). With an INTERVAL (or --watch SEC), "
                             "rates per second every INTERVAL seconds, COUNT times or until Ctrl-C (JSON lines "
                             "with --json). On a simulated node from an experiment file the workload runs as "
                             "the intervals pass.",
                 examples=["huvmctl stats", "huvmctl stats --pairs --all", "huvmctl stats 1 10 -T",
                           "huvmctl stats --watch 1 --count 10 --json",
                           "huvmctl --sim --sim-config pyctl/huvm/examples/consolidation.toml stats 1 5"])
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
    p.set_defaults(func=cmd_stats)
