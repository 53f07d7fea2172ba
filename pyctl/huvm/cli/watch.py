"""huvmctl watch: print the module's and device's appearance and disappearance (udev)."""

from __future__ import annotations

import argparse
import time

from .. import argtypes, jsonout
from .common import out, print_jsonl


def cmd_watch(args: argparse.Namespace) -> int:
    from ..backend import DEFAULT_DEVICE
    from ..watch import Watcher

    device = args.device or DEFAULT_DEVICE
    w = Watcher(device)
    if not args.json:
        out.print(f"watching the nvidia_uvm module and {device} "
                  f"({'present' if w.present else 'absent'}); Ctrl-C to end")
    try:
        for ev in w.events(timeout=args.timeout):
            if args.json:
                print_jsonl(jsonout.dump(jsonout.WatchEventDoc.make(unix_time_s=time.time(), source=ev.kind,
                                                                     action=ev.action, name=ev.name)))
            else:
                out.print(f"{time.strftime('%H:%M:%S')} {ev.kind} {ev.action}: {ev.name}")
    except KeyboardInterrupt:
        pass
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("watch", parents=parents, help="report the module and device appearing and disappearing",
                       description="Follow udev for the nvidia_uvm module being loaded or "
                                   "unloaded, and report the device node (--device) appearing or vanishing.",
                       epilog="examples:\n  huvmctl watch\n  huvmctl watch --device /dev/nvidia-uvm --json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=argtypes.seconds(86400 * 365), metavar="SEC",
                   help="stop after SEC seconds without a udev event")
    p.set_defaults(func=cmd_watch)
