"""huvmctl gpu-check: GPT-2 steps with PyTorch's allocator and with huvm's managed pool on this machine's GPU
(huvmlab.experiment.gpucheck does the work)."""

from __future__ import annotations

import argparse

from huvm import argtypes
from huvm.cli.common import add_verb, print_json
from huvm.errors import HuvmError


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from ..experiment import gpucheck

    cfg = gpucheck.CheckConfig(model=args.model, batch=args.batch, seq=args.seq, amp=args.amp, steps=args.steps)
    said: list[str] = []
    res = gpucheck.run_check(cfg, say=said.append if args.json else print)
    if args.json:
        from huvm import jsonout

        print_json(jsonout.dump(jsonout.gpu_check(res, reason=said[0] if said else "",
                                                    target_ratio=gpucheck.TARGET_RATIO)))
    if res is None:
        return 0
    if not res.ok:
        raise HuvmError(f"gpu-check: the managed pool took {res.ratio:.2f}x PyTorch's step time, above the "
                        f"{gpucheck.TARGET_RATIO:.2f}x target")
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "gpu-check", help="PyTorch's allocator against huvm's managed pool on this GPU",
                 description="GPT-2 training steps on this machine's GPU with PyTorch's own allocator and with "
                             "huvm's managed pool (RAPIDS RMM over CUDA managed memory), each in its own process, "
                             "within free GPU memory: both step times, their ratio (target <= 1.05x) and the "
                             "peak against the trace's prediction. Without a GPU: one line, exit status 0. "
                             "docs/experiments.md, \"PyTorch on managed memory\".",
                 examples=["huvmctl gpu-check", "huvmctl gpu-check --amp fp32 --batch 4"], parents=parents)
    p.add_argument("--model", default="gpt2-medium", choices=["gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"])
    p.add_argument("--batch", type=argtypes.count(1, 4096), default=8, help="batch size (default 8; halved to fit)")
    p.add_argument("--seq", type=argtypes.count(1, 1024), default=1024, help="sequence length (default 1024)")
    p.add_argument("--amp", choices=["bf16", "fp32"], default="bf16", help="bf16 autocast (default) or fp32")
    p.add_argument("--steps", type=argtypes.count(3, 1000), default=6,
                   help="training steps per allocator (default 6; the first 2 are warm-up)")
    p.set_defaults(func=cmd_gpu_check)
