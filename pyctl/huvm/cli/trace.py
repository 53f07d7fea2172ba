"""huvmctl trace gen MODEL OUT ... | trace info FILE (the traces library does the work)."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .common import print_json


def cmd_gen(args: argparse.Namespace) -> int:
    from .. import traces

    try:
        return traces.cli_gen(args)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"trace gen {args.model}: {exc.args[0] if exc.args else exc}") from None


def cmd_info(args: argparse.Namespace) -> int:
    from .. import traces

    path = traces.resolve(args.file)
    try:
        info = traces.info(path)
    except traces.TraceFormatError as exc:
        raise ConfigError(str(exc)) from None
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    if args.json:
        from .. import jsonout

        print_json(jsonout.dump(jsonout.trace_info(info)))
    else:
        traces.print_info(info)
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    from .. import traces

    p = sub.add_parser("trace", help="generate or inspect workload traces",
                       description="Workload traces (docs/traces.md): DNN training steps, graph analytics and "
                                   "lender footprints, as versioned Parquet directories.",
                       epilog="examples:\n  huvmctl trace gen gpt2-xl out/gpt2-xl.trace --batch 8\n"
                              "  huvmctl trace gen pagerank out/pr.trace --graph small\n"
                              "  huvmctl trace info bundled:llama-tiny --json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ts = p.add_subparsers(dest="trace_cmd", metavar="{gen,info}", required=True)
    g = ts.add_parser("gen", parents=parents, help="generate one trace (progress bar; deterministic)")
    traces.add_gen_arguments(g)
    g.set_defaults(func=cmd_gen)
    i = ts.add_parser("info", parents=parents, help="validate and summarise a trace")
    i.add_argument("file", metavar="FILE", help="NAME.trace directory or bundled:NAME")
    i.set_defaults(func=cmd_info)
