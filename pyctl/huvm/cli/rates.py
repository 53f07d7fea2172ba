"""huvmctl rates show | set | load: the per-GPU rates a lender's slowdown bound T weighs (SET_GPU_RATES)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import jsonout
from .. import rates as _rates
from ..errors import PolicyError
from ..node import Node
from ..policy import gpu_indices
from ..units import format_rate
from .common import add_verb, open_node, out, print_json


def _show(node: Node, args: argparse.Namespace, changed: Sequence[int] = ()) -> int:
    rows = node.gpu_rates()
    if args.json:
        print_json(jsonout.dump(jsonout.GpuRatesDoc.make(
            rates=[jsonout.GpuRatesRow(gpu=r.gpu, uuid=r.uuid, hbm_mbyte_per_s=r.hbm_mbyte_per_s,
                                       giveback_mbyte_per_s=r.giveback_mbyte_per_s) for r in rows],
            changed=list(changed))))
        return 0
    from rich.table import Table

    t = Table(title="rates a lender's slowdown bound weighs (MB/s; -: unknown)", title_justify="left")
    for col in ("gpu", "uuid", "hbm", "give-back"):
        t.add_column(col, justify="right" if col != "uuid" else "left")
    for r in rows:
        t.add_row(str(r.gpu) + (" *" if r.gpu in changed else ""), r.uuid,
                  format_rate(r.hbm_mbyte_per_s) if r.hbm_mbyte_per_s else "-",
                  format_rate(r.giveback_mbyte_per_s) if r.giveback_mbyte_per_s else "-")
    out.print(t)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        return _show(node, args)


def cmd_set(args: argparse.Namespace) -> int:
    if args.hbm is None and args.giveback is None:
        raise PolicyError("nothing to set: give --hbm and/or --giveback (0 = unknown)", key="rates")
    hbm = None if args.hbm is None else _rates.parse_rate_arg(args.hbm, "--hbm")
    giveback = None if args.giveback is None else _rates.parse_rate_arg(args.giveback, "--giveback")
    with open_node(args) as node:
        info = node.info()
        picked = sorted({i for sel in args.gpus for i in gpu_indices(sel, info, "gpu")})
        current = {r.gpu: r for r in node.gpu_rates()}
        for i in picked:
            node.set_gpu_rates(i, current[i].hbm_mbyte_per_s if hbm is None else hbm,
                               current[i].giveback_mbyte_per_s if giveback is None else giveback)
        return _show(node, args, picked)


def cmd_load(args: argparse.Namespace) -> int:
    per_gpu = _rates.from_node_file(args.file)
    with open_node(args) as node:
        info = node.info()
        picked = sorted({i for sel in (args.gpus or ["all"]) for i in gpu_indices(sel, info, "gpu")})
        if len(per_gpu) != 1 and len(per_gpu) < len(info.gpus):
            raise PolicyError(f"{args.file}: {len(per_gpu)} GPUs, the node {len(info.gpus)}: a node file's GPUs "
                              "map to the node's by index (or give a one-GPU file)", key="file")
        for i in picked:
            hbm, giveback = per_gpu[0] if len(per_gpu) == 1 else per_gpu[i]
            node.set_gpu_rates(i, hbm, giveback)
        return _show(node, args, picked)


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "rates", help="the per-GPU rates a lender's slowdown bound weighs",
                 description="Each GPU's HBM bandwidth and give-back rate (MB/s; 0 or -: unknown), which the\n"
                             "lender bound T (gpu.N.lend_slowdown_max_pct) weighs: T clamps a guest-traffic budget\n"
                             "to hbm x T / (100 + T) and sizes lending above the peak from the give-back rate\n"
                             "(the host link's line rate while unknown). Setting them needs root.",
                 examples=["huvmctl rates show", "huvmctl rates set 1 --hbm 900GB/s --giveback 11GB/s",
                           "huvmctl rates load out/calibration/h200-580.159.04.toml all"],
                 parents=parents)
    ps = p.add_subparsers(dest="rates_cmd", metavar="{show,set,load}", required=True)
    q = ps.add_parser("show", parents=parents, help="each GPU's rates")
    q.set_defaults(func=cmd_show)
    q = ps.add_parser("set", parents=parents, help="set the rates of GPUs (an index, a UUID or all)")
    q.add_argument("gpus", nargs="+", metavar="GPU")
    q.add_argument("--hbm", metavar="RATE", help="HBM bandwidth, e.g. 900GB/s (0: unknown)")
    q.add_argument("--giveback", metavar="RATE", help="give-back rate (GPU to host eviction), e.g. 11GB/s")
    q.set_defaults(func=cmd_set)
    q = ps.add_parser("load", parents=parents, help="set them from a node TOML (huvmctl calibrate's NAME.toml)")
    q.add_argument("file", metavar="FILE")
    q.add_argument("gpus", nargs="*", metavar="GPU", help="the GPUs to set (default all)")
    q.set_defaults(func=cmd_load)
