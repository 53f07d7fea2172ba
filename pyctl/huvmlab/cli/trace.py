"""huvmctl trace gen MODEL OUT ... | trace info FILE | trace record --out FILE (the traces and tracerec libraries
do the work)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from huvm.cli.common import print_json
from huvm.errors import ConfigError, UsageError

from .tools import add_tools


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
        from huvm import jsonout

        print_json(jsonout.dump(jsonout.trace_info(info)))
    else:
        traces.print_info(info)
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from huvm import bpf

    from .. import tracerec

    sim_file = args.sim_config
    if sim_file is not None and (args.pid is not None or args.tracepoints):
        raise UsageError("--sim-config records this process's simulated node: not with --pid or --tracepoints")
    events = bpf.parse_events(args.events)
    uvm_events = [e for e in events if bpf.is_uvm_event(e)]
    if uvm_events and (args.pid is not None or sim_file is not None):
        raise UsageError(f"{', '.join(uvm_events)}: UVM's events are kprobes on the loaded nvidia-uvm, not USDT "
                         "probes (not with --pid or --sim-config)")
    tracerec.check_output(args.out, args.force)
    during = None
    if sim_file is not None:
        spec = _sim_spec(sim_file)
        from .. import experiment

        def during() -> object:
            return experiment.run(spec)
    mode: bpf.Mode = "usdt" if (args.pid is not None or sim_file is not None) else "tracepoint"
    bpf.check_can_trace()
    if mode == "tracepoint":
        bpf.check_kprobes(events)
    if mode == "tracepoint" and len(uvm_events) < len(events) and not bpf.tracepoints_present():
        raise bpf.TracingUnavailable("no huvm tracepoints: the patched nvidia-uvm is not loaded (--pid PID records "
                                     "a process's USDT probes, --sim-config FILE the simulated node)",
                                     reason="no-tracepoints")
    res = tracerec.record(args.out, mode=mode, pid=args.pid, events=events, duration_s=args.duration,
                          count=args.count, during=during, force=args.force)
    if args.json:
        from huvm import jsonout

        print_json(jsonout.dump(jsonout.TraceRecordDoc.make(
            path=str(res.path), rows=res.rows, lost=res.lost, counts=res.counts, per_event=res.per_event,
            source=res.source, seconds=res.seconds)))
    else:
        per = ", ".join(f"{k} {res.per_event.get(k, 0)}" for k in events)
        print(f"{res.path}: {res.rows} events in {res.seconds:.1f} s ({per}); lost {res.lost}; {res.source}")
    return 0


def _sim_spec(path: str) -> Any:
    from .. import experiment

    if not Path(path).is_file():
        raise ConfigError(f"--sim-config {path}: trace record needs an experiment file (a node preset has no "
                          "workload)")
    spec = experiment.load(path)
    if spec.node_kind != "sim":
        raise ConfigError(f"{path}: node kind {spec.node_kind!r}; trace record runs only a simulated node "
                          "(kind = \"sim\") in process")
    return spec


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    from .. import traces

    p = sub.add_parser("trace", help="generate or inspect workload traces",
                       description="Workload traces (docs/traces.md): DNN training steps, graph analytics and "
                                   "lender footprints, as versioned Parquet directories.",
                       epilog="examples:\n  huvmctl trace gen gpt2-xl out/gpt2-xl.trace --batch 8\n"
                              "  huvmctl trace gen pagerank out/pr.trace --graph small\n"
                              "  huvmctl trace info bundled:llama-tiny --json\n"
                              "  huvmctl trace large build/traces --only gpt2-xl\n"
                              "  sudo huvmctl trace record --out ev.parquet --sim-config "
                              "pyctl/huvm/examples/consolidation.toml",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ts = p.add_subparsers(dest="trace_cmd", metavar="{gen,info,record,large,bundled}", required=True)
    add_tools("trace", ts)
    g = ts.add_parser("gen", parents=parents, help="generate one trace (progress bar; deterministic)")
    traces.add_gen_arguments(g)
    g.set_defaults(func=cmd_gen)
    i = ts.add_parser("info", parents=parents, help="validate and summarise a trace")
    i.add_argument("file", metavar="FILE", help="NAME.trace directory or bundled:NAME")
    i.set_defaults(func=cmd_info)
    r = ts.add_parser("record", parents=parents, help="record huvm events with bcc into Parquet (root)",
                      description="Record the huvm events (docs/counters.md) with bcc into one Parquet file "
                                  "(docs/traces.md, \"Recorded events\"): the kernel tracepoints of the patched "
                                  "module (default), a process's USDT probes (--pid), or the simulated node of an "
                                  "experiment file run in this process (--sim-config FILE); with --events uvm_fault,"
                                  "uvm_make_resident also UVM's own fault servicing and migrations (kprobes on "
                                  "nvidia-uvm, stock or patched). Needs root and bcc.")
    r.add_argument("--out", required=True, metavar="FILE", help="the Parquet file to write")
    stop = r.add_mutually_exclusive_group()
    stop.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds")
    stop.add_argument("--count", type=_positive_int, metavar="N", help="stop after N events")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--pid", type=_positive_int, metavar="PID", help="the USDT probes of process PID")
    src.add_argument("--tracepoints", action="store_true", help="the kernel tracepoints (the default)")
    r.add_argument("--events", metavar="E,E,...",
                   help="events to record (default: all of huvm's); UVM's own fault/migration path: uvm_fault, "
                        "uvm_make_resident (kprobes on nvidia-uvm)")
    r.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    r.set_defaults(func=cmd_record)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v
