"""Command line of huvm-top: options, and the sources they select (the app itself is in app.py).

Exit status (as huvmctl): 0 ok, 1 runtime error (no usable backend, the source failed), 2 usage error.
Errors are one line on stderr: ``huvm-top: error: ...``. A module that is not loaded (yet) is not an error:
huvm-top waits for it (``--no-wait``: exit 1 instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from huvm import argtypes

from huvm_top.model import NodeAbsent, SourceError
from huvm_top.sources.base import EventSource, StatsSource

EPILOG = """examples:
  huvm-top                          # the patched module on /dev/nvidia-uvm
  huvm-top --sim                    # a simulated node under load (no GPU needed)
  huvm-top --sim --bcc              # ... with its USDT probes traced by bcc (root)
  huvm-top --bcc --interval 0.5     # the patched module and its huvm:* tracepoints through bcc (root)
  huvm-top --sim --record run.jsonl # ... and keep what was seen
  huvm-top --replay run.jsonl --interval 0.2   # play it back, five snapshots a second

keys: q quit, p policy editor, space pause, 1/2/3 preset stock/atc22/huvm (shows what changes, y applies),
v next view (graphs, gpu detail, peers, processes, events), enter on a GPU: its detail, g graph metric,
m peer-matrix metric, s sort processes, / filter processes or events, w save the event log, c clear it,
? help. Everything works from the keyboard (over ssh, no mouse needed).

Without the module loaded huvm-top says "module not loaded, waiting" and attaches when it appears.

exit status: 0 ok, 1 runtime error (no usable backend; with --no-wait, no module), 2 usage error."""


class CliError(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"huvm-top: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range [0.05, 3600] seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="huvm-top",
        description="Live fault, eviction and migration figures of a huvm node, and a policy editor.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", choices=("auto", "kernel", "sim"), default=None,
                   help="kernel module, simulated node under load, or auto (default: $HUVM_BACKEND or auto: "
                        "the kernel module when the patched module answers, else an error saying why)")
    p.add_argument("--sim", dest="backend", action="store_const", const="sim", help="same as --backend sim")
    p.add_argument("--fake", dest="backend", action="store_const", const="fake", help=argparse.SUPPRESS)
    p.add_argument("--device", metavar="PATH", help="device of the kernel backend (default /dev/nvidia-uvm)")
    p.add_argument("--sim-config", metavar="FILE", help="simulated node: a node preset name or a TOML file")
    p.add_argument("--bcc", action="store_true",
                   help="trace huvm events with bcc: the kernel tracepoints, or the simulator's USDT probes "
                        "(needs root and python3-bpfcc)")
    p.add_argument("--pid", type=argtypes.count(1, 1 << 22), metavar="PID",
                   help="with --bcc: trace the USDT probes of this process (e.g. a running huvmctl sim run)")
    p.add_argument("--record", metavar="FILE",
                   help="also write every snapshot to FILE (JSON lines) for --replay")
    p.add_argument("--replay", metavar="FILE",
                   help="play back a --record file, one snapshot per refresh (read-only)")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="SEC",
                   help="refresh interval in seconds (default 1)")
    p.add_argument("--no-wait", action="store_true",
                   help="exit with status 1 when the module is not loaded, instead of waiting for it")
    p.add_argument("--debug", action="store_true", help="on an internal error (a bug), also print the traceback")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.sim_config and args.backend not in (None, "sim"):
        build_parser().error("--sim-config goes with --backend sim")
    if args.device and args.backend == "sim":
        build_parser().error("--device goes with the kernel backend")
    if args.pid is not None and not args.bcc:
        build_parser().error("--pid goes with --bcc")
    if args.replay and (args.backend or args.device or args.sim_config or args.bcc or args.record):
        build_parser().error("--replay plays a file: it takes no backend, --bcc or --record")
    return args


def make_sources(args: argparse.Namespace) -> tuple[StatsSource, EventSource | None]:
    """The sources the options ask for, opened once here so that failures are reported before the screen
    is taken (the app opens them again, which is cheap)."""
    import os

    backend = args.backend or os.environ.get("HUVM_BACKEND") or "auto"
    source: StatsSource
    if args.replay:
        from huvm_top.record import ReplaySource

        source = ReplaySource(args.replay)
        try:
            source.open()
        except SourceError as exc:
            raise CliError(str(exc)) from None
        return source, None
    if backend == "fake":
        from huvm_top.sources.fake import FakeEvents, FakeSource

        return FakeSource(), (FakeEvents() if args.bcc else None)
    if backend == "sim" or (backend == "auto" and args.sim_config):
        from huvm_top.sources.sim import SimSource

        source = SimSource(args.sim_config)
    else:
        from huvm_top.sources.live import LiveSource

        source = LiveSource(backend, args.device)
    try:
        source.open()
    except NodeAbsent as exc:
        # not an error: the app says so and waits, unless told not to (or there is nowhere to wait)
        device = args.device or os.environ.get("HUVM_DEVICE") or "/dev/nvidia-uvm"
        folder = os.path.dirname(os.path.abspath(device))
        if args.no_wait or not os.path.isdir(folder):
            source.close()
            where = "" if os.path.isdir(folder) else f" (and {folder} is not a folder: nothing to wait for)"
            raise CliError(f"{exc}{where}") from None
    except SourceError as exc:
        source.close()
        raise CliError(str(exc)) from None
    events: EventSource | None = None
    if args.bcc:
        from huvm_top.sources.bcc import BccSource, Mode

        mode: Mode = "usdt" if (backend == "sim" or args.pid) else "tracepoint"
        events = BccSource(mode, pid=args.pid)
    return source, events
