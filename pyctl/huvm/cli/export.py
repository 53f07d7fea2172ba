"""huvmctl export --port N: serve Prometheus metrics."""

from __future__ import annotations

import argparse
import socket
import threading

from .. import argtypes
from ..errors import HuvmError, UsageError
from .common import add_verb, err, open_node


def cmd_export(args: argparse.Namespace) -> int:
    from ..exporter import serve

    node = open_node(args)
    try:
        server, _thread = serve(node, args.port, args.addr)
    except socket.gaierror as exc:
        node.close()
        raise UsageError(f"--addr {args.addr}: not an address of this host ({exc.strerror})") from None
    except OSError as exc:
        node.close()
        raise HuvmError(f"cannot listen on --addr {args.addr} --port {args.port}: {exc.strerror or exc}") from None
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
    p.add_argument("--port", type=argtypes.port, default=9400, help="TCP port (default 9400; 0 picks a free one)")
    p.add_argument("--addr", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    # tests: stop after SEC
    p.add_argument("--duration", type=argtypes.seconds(86400), metavar="SEC", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_export)
