"""huvmctl export --port N: serve Prometheus metrics."""

from __future__ import annotations

import argparse
import socket
import threading

from .. import argtypes
from ..errors import HuvmError, UsageError
from .common import add_verb, err, note


def cmd_export(args: argparse.Namespace) -> int:
    from ..attach import attach
    from ..exporter import follow, serve

    def report(text: str) -> None:
        err.print(f"huvmctl: export: {text}", markup=False)

    # The node need not be there: huvm_up is 0 until the module is loaded, and again while it is not.
    att = attach(args.backend, args.device, sim_config=args.sim_config, sim_fallback=args.sim_fallback,
                 on_change=report)
    if att.note:
        note(att.note)
    try:
        server, _thread = serve(att, args.port, args.addr, on_note=report)
    except socket.gaierror as exc:
        att.close()
        raise UsageError(f"--addr {args.addr}: not an address of this host ({exc.strerror})") from None
    except OSError as exc:
        att.close()
        raise HuvmError(f"cannot listen on --addr {args.addr} --port {args.port}: {exc.strerror or exc}") from None
    err.print(f"huvmctl: serving huvm metrics of {att.description} on "
              f"http://{args.addr}:{server.server_port}/metrics; Ctrl-C to end", markup=False)
    stop = threading.Event()
    if not att.check():
        report("huvm_up is 0 until the node can be read; waiting for the module")
    follow(att, report, stop)
    try:
        stop.wait(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.shutdown()
        att.close()
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "export", parents=parents, help="serve the counters to Prometheus",
                 description="Serve huvm's counters and gauges on /metrics (Prometheus text format), "
                             "labelled like dcgm-exporter (gpu, UUID, pci_bus_id, device, modelName, "
                             "Hostname). It may start before the module is loaded and keeps running while "
                             "the module is unloaded and loaded again: huvm_up is 0 while the node cannot "
                             "be read.",
                 examples=["huvmctl export --port 9400",
                           "curl -s localhost:9400/metrics | grep huvm_evict_to_peer"])
    p.add_argument("--port", type=argtypes.port, default=9400, help="TCP port (default 9400; 0 picks a free one)")
    p.add_argument("--addr", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    # tests: stop after SEC
    p.add_argument("--duration", type=argtypes.seconds(86400), metavar="SEC", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_export)
