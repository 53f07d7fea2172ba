"""huvmctl export --port N: serve Prometheus metrics."""

from __future__ import annotations

import argparse
import threading

from .common import add_verb, err, open_node


def cmd_export(args: argparse.Namespace) -> int:
    from ..exporter import serve

    node = open_node(args)
    server, _thread = serve(node, args.port, args.addr)
    err.print(f"huvmctl: serving huvm metrics of {node.backend.description} on "
              f"http://{args.addr}:{server.server_port}/metrics; Ctrl-C to end", markup=False)
    try:
        if args.duration is not None:
            threading.Event().wait(args.duration)
        else:
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        node.close()
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "export", parents=parents, help="serve the counters to Prometheus",
                 description="Serve huvm's counters and gauges on /metrics (Prometheus text format), "
                             "named and labelled like dcgm-exporter (gpu, uuid, device, hostname).",
                 examples=["huvmctl export --port 9400",
                           "curl -s localhost:9400/metrics | grep huvm_evict_to_peer"])
    p.add_argument("--port", type=int, default=9400, help="TCP port (default 9400; 0 picks a free one)")
    p.add_argument("--addr", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--duration", type=float, metavar="SEC", help=argparse.SUPPRESS)  # tests: stop after SEC
    p.set_defaults(func=cmd_export)
