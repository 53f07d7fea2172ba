"""Thin CLI layer: ``huvmctl trace gen|info`` (huvmlab.cli.trace) and ``huvmctl trace large|bundled`` (this main)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from huvm import argtypes
from huvm.units import human_bytes

from .gen import BUNDLED, DEFAULT_GPU, LARGE, generate, generate_set, info
from .schema import TraceFormatError
from .trace import TraceInfo
from .workspaces import GPU_CC


def add_gen_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``trace gen MODEL OUT``."""
    p.add_argument("model", help="gpt2-xl, llama-7b, llama-13b, bert-large, resnet152, ... | pagerank, bfs, "
                                 "wcc | lender-idle, lender-steady, lender-rising, lender-spiky")
    p.add_argument("out", type=Path, help="output trace directory (NAME.trace)")
    p.add_argument("--batch", type=argtypes.count(1, 65536), default=None, help="batch size (1..65536)")
    p.add_argument("--seq", type=argtypes.count(1, 1 << 20), default=None,
                   help="sequence length (transformers) or image side (CNNs)")
    p.add_argument("--amp", choices=["bf16", "fp16"], default=None, help="emulated autocast dtype")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adamw-fused", "adamw-loop", "sgd"])
    p.add_argument("--no-kv-cache", dest="kv_cache", action="store_false",
                   help="call causal LMs with use_cache=False (default: Hugging Face's default, use_cache=True, "
                        "whose cache keeps a copy of every layer's keys and values in training)")
    p.add_argument("--gpu", default=DEFAULT_GPU, type=_gpu,
                   help=f"GPU whose cuBLAS workspaces the step holds: {', '.join(GPU_CC)} or none "
                        f"(default {DEFAULT_GPU})")
    p.add_argument("--graph", default=None, help="graph for pagerank/bfs/wcc: tiny, small, twitter")
    p.add_argument("--mem-gib", type=argtypes.number(0, 1024, "GiB"), default=16.0,
                   help="lender GPU memory in GiB (default 16, at most 1024)")
    p.add_argument("--seconds", type=argtypes.seconds(3600), default=60.0,
                   help="lender trace length in seconds (default 60, at most 3600)")
    p.add_argument("--no-progress", action="store_true")


def _gpu(text: str) -> str | None:
    if text.lower() == "none":
        return None
    if text.upper() not in GPU_CC:
        raise argparse.ArgumentTypeError(f"unknown GPU {text!r}: {', '.join(GPU_CC)} or none")
    return text.upper()


def cli_gen(ns: argparse.Namespace) -> int:
    path = generate(ns.model, ns.out, batch=ns.batch, seq=ns.seq, amp=ns.amp or False, checkpoint=ns.checkpoint,
                    optimizer=ns.optimizer, progress=not ns.no_progress, graph=ns.graph, mem_gib=ns.mem_gib,
                    seconds=ns.seconds, kv_cache=ns.kv_cache, gpu=ns.gpu)
    print_info(info(path))
    return 0


def _bytes(n: float) -> str:
    """Bytes as every huvm output writes them (:func:`huvm.units.human_bytes`: IEC units)."""
    return human_bytes(n)


def cli_info(path: Path | str) -> dict[str, Any]:
    """Summary of a trace as a plain dict (raises TraceFormatError when malformed)."""
    return info(path).model_dump()


def print_info(i: TraceInfo) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{i.path}", show_header=False)
    rows = [
        ("kind / model", f"{i.trace_kind} / {i.model}"),
        ("size on disk", _bytes(i.size_bytes)),
        ("ops / storages / accesses", f"{i.n_ops} / {i.n_storages} / {i.n_accesses}"),
        ("chunk touches / chunks", f"{i.n_touches} / {i.n_chunks} (2 MiB)"),
        ("peak live", f"{_bytes(i.peak_live_bytes)} at op {i.peak_op} ({i.peak_phase})"),
        ("allocator peak", f"{_bytes(i.allocator_peak_bytes)} (predicted max_memory_allocated)"),
        ("reserved (footprint)", _bytes(i.reserved_bytes)),
        ("static (param+grad+opt)", _bytes(i.static_bytes)),
        ("params", f"{i.params:,}"),
        ("FLOPs", f"{i.flops / 1e12:.2f} TFLOP"),
        ("est. time", ", ".join(f"{k.upper()} {v:.3f} s" for k, v in i.est_time_s.items())),
    ]
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl trace")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_gen_arguments(sub.add_parser("gen", help="generate one trace"))
    pi = sub.add_parser("info", help="summarise a trace")
    pi.add_argument("path", type=Path)
    pi.add_argument("--json", action="store_true")
    for name in ("large", "bundled"):
        ps = sub.add_parser(name, help=f"generate the {name} set")
        ps.add_argument("outdir", type=Path)
        ps.add_argument("--only", nargs="*", default=None)
        ps.add_argument("--no-progress", action="store_true")
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "gen":
            return cli_gen(ns)
        if ns.cmd == "info":
            i = info(ns.path)
            if ns.json:
                print(json.dumps(i.model_dump(), indent=2, sort_keys=True))
            else:
                print_info(i)
            return 0
        specs = LARGE if ns.cmd == "large" else BUNDLED
        total = cpu = 0.0
        for name, secs, csecs, i in generate_set(specs, ns.outdir, progress=not ns.no_progress, only=ns.only):
            total += secs
            cpu += csecs
            print(f"{name:22s} {secs:7.1f} s wall {csecs:7.1f} s cpu  {_bytes(i.size_bytes):>10s}"
                  f"  peak {_bytes(i.peak_live_bytes):>10s}  chunks {i.n_chunks:7d}  touches {i.n_touches:8d}"
                  f"  ops {i.n_ops:6d}", flush=True)
        print(f"total {total:.1f} s wall, {cpu:.1f} s cpu")
        return 0
    except TraceFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
