"""The GPU check (``huvmctl gpu-check``, ``make gpu-check``): GPT-2 training steps on this machine's GPU with
PyTorch's own allocator and with huvm's managed pool (:mod:`huvmlab.experiment.managed_alloc`), within GPU memory
only; prints both step times, their ratio (target: at most 1.05x after warm-up) and the measured peak next to
the trace generator's prediction for the same configuration.

Each allocator runs in its own Python process (``python -m huvmlab.experiment.gpucheck worker ...``: the
allocator must be chosen before CUDA allocates anything), and so does a first probe of the GPU (its free
memory, names and versions), so this process never creates a CUDA context. The configuration is the one of
the measured program (docs/experiments.md): HF ``GPT2LMHeadModel`` from its config, SDPA attention, AdamW
(lr 1e-4), random tokens, ``model(input_ids=x, labels=x)`` under ``torch.autocast`` for bf16. The batch is
halved until the trace's predicted peak, plus 10 %, fits the free memory; it refuses when even batch 1 does
not. Without a GPU it says so in one line and returns 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from huvm.errors import HuvmError, NoMemory, UsageError
from huvm.units import human_bytes

from . import managed_alloc

TARGET_RATIO = 1.05
HEADROOM = 0.10  # over the predicted peak, for what the trace does not model (cuDNN/attention scratch, ...)
GPT2_MODELS = ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl")

#: (argv after ``-m huvmlab.experiment.gpucheck``) -> (exit status, stdout, stderr)
Runner = Callable[[list[str]], tuple[int, str, str]]
Predictor = Callable[["CheckConfig", "str | None"], int]


class GpuCheckError(HuvmError):
    """A worker failed (its last line says why)."""


@dataclass(frozen=True)
class CheckConfig:
    model: str = "gpt2-medium"
    batch: int = 8
    seq: int = 1024
    amp: str = "bf16"  # bf16 | fp32
    steps: int = 6
    warmup: int = 2  # steps left out of the step time (the pool's first two steps fill it)
    timeout_s: float = 1800.0


@dataclass(frozen=True)
class Probe:
    available: bool
    torch: str = ""
    cuda: str | None = None
    device: str = ""
    driver: str = ""
    free_bytes: int = 0
    total_bytes: int = 0
    rmm: bool = False
    reason: str = ""


@dataclass
class Run:
    allocator: str
    step_s: list[float]
    peak_bytes: int | None

    def steady_s(self, warmup: int) -> float:
        return float(statistics.median(self.step_s[warmup:] or self.step_s))


@dataclass
class CheckResult:
    config: CheckConfig
    probe: Probe
    rmm_package: str
    predicted_peak_bytes: int
    pytorch: Run
    pool: Run
    ratio: float = field(init=False)

    def __post_init__(self) -> None:
        self.ratio = self.pool.steady_s(self.config.warmup) / self.pytorch.steady_s(self.config.warmup)

    @property
    def ok(self) -> bool:
        return self.ratio <= TARGET_RATIO

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpu_preset(device_name: str) -> str | None:
    """The trace generator's GPU (its cuBLAS workspace size) for a CUDA device name."""
    from ..traces.workspaces import GPU_CC

    up = device_name.upper()
    return next((g for g in sorted(GPU_CC, reverse=True) if g in up), None)


def predict_peak(config: CheckConfig, gpu: str | None) -> int:
    """The trace's predicted allocator peak for this configuration (needs the ``traces`` extra)."""
    from ..traces.chunks import allocated_bytes
    from ..traces.gen import build_tables

    t = build_tables(config.model, batch=config.batch, seq=config.seq,
                     amp=False if config.amp == "fp32" else config.amp, gpu=gpu)
    return int(allocated_bytes(t).max())


def _subprocess(args: list[str], timeout_s: float = 1800.0) -> tuple[int, str, str]:
    try:
        r = subprocess.run([sys.executable, "-m", "huvmlab.experiment.gpucheck", *args], capture_output=True,
                           text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout_s:.0f} s"
    return r.returncode, r.stdout, r.stderr


def _last_json(rc: int, out: str, err: str, what: str) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise GpuCheckError(f"{what} failed (exit status {rc}): {last}")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def probe(runner: Runner) -> Probe:
    return Probe(**_last_json(*runner(["probe"]), "the GPU probe"))


def run_check(config: CheckConfig, *, runner: Runner | None = None, predictor: Predictor = predict_peak,
              say: Callable[[str], None] = print) -> CheckResult | None:
    """Run the check; None (after one line) where there is no GPU. Raises a one-line HuvmError otherwise."""
    if config.model not in GPT2_MODELS:
        raise UsageError(f"gpu-check runs GPT-2 ({', '.join(GPT2_MODELS)}), not {config.model!r}")
    if config.amp not in ("bf16", "fp32"):
        raise UsageError(f"--amp {config.amp}: bf16 or fp32")
    if config.steps <= config.warmup:
        raise UsageError(f"--steps {config.steps}: more than the {config.warmup} warm-up steps")
    run: Runner = runner or (lambda a: _subprocess(a, config.timeout_s))
    p = probe(run)
    if not p.available:
        say(f"gpu-check: no GPU here ({p.reason}); nothing measured")
        return None
    pkg = managed_alloc.rmm_package(p.cuda)
    if not p.rmm:
        raise managed_alloc.AllocatorUnavailable(f"RAPIDS RMM is not installed: pip install 'huvm[{pkg}]' (PyTorch "
                                                 f"{p.torch} is built with CUDA {p.cuda})", reason="no-rmm")
    gpu = gpu_preset(p.device)
    batch = config.batch
    while True:
        predicted = predictor(CheckConfig(**{**asdict(config), "batch": batch}), gpu)
        need = int(predicted * (1 + HEADROOM))
        if need <= p.free_bytes or batch == 1:
            break
        batch //= 2
    if need > p.free_bytes:
        raise NoMemory(f"gpu-check: {config.model} batch 1 seq {config.seq} {config.amp} needs about "
                       f"{human_bytes(need)}, {human_bytes(p.free_bytes)} is free on {p.device}: refusing")
    cfg = CheckConfig(**{**asdict(config), "batch": batch})
    say(f"gpu-check: {p.device}, driver {p.driver or '?'}, PyTorch {p.torch} (CUDA {p.cuda}), {pkg}; "
        f"{human_bytes(p.free_bytes)} of {human_bytes(p.total_bytes)} free")
    say(f"{cfg.model} batch {cfg.batch} seq {cfg.seq} {cfg.amp}, AdamW, {cfg.steps} steps (first {cfg.warmup} "
        f"left out){' (batch halved to fit)' if batch != config.batch else ''}")
    common = ["--model", cfg.model, "--batch", str(cfg.batch), "--seq", str(cfg.seq), "--amp", cfg.amp,
              "--steps", str(cfg.steps), "--need", str(need)]
    runs: dict[str, Run] = {}
    for alloc in ("pytorch", "managed-pool"):
        maximum = int(p.free_bytes * 0.95)  # the pool never takes more than the GPU has free
        extra = (["--pool-initial", str(min(need, maximum)), "--pool-maximum", str(maximum)]
                 if alloc == "managed-pool" else [])
        d = _last_json(*run(["worker", "--allocator", alloc, *common, *extra]), f"the {alloc} run")
        runs[alloc] = Run(alloc, [float(x) for x in d["step_s"]], d.get("peak_bytes"))
    res = CheckResult(cfg, p, pkg, predicted, runs["pytorch"], runs["managed-pool"])
    pt, pool = res.pytorch, res.pool
    peak = pt.peak_bytes or 0
    say(f"  PyTorch's allocator  {pt.steady_s(cfg.warmup):7.3f} s/step   peak {human_bytes(peak)} "
        f"(max_memory_allocated); the trace predicts {human_bytes(predicted)} ({predicted / max(peak, 1) - 1:+.1%})")
    say(f"  managed pool (RMM)   {pool.steady_s(cfg.warmup):7.3f} s/step   {res.ratio:.2f}x PyTorch's "
        f"(target <= {TARGET_RATIO:.2f}x): {'ok' if res.ok else 'ABOVE TARGET'}")
    return res


# ---------------------------------------------------------------- the subprocesses

def _probe_main() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "PyTorch is not installed"}
    cuda = getattr(torch.version, "cuda", None)
    if not cuda:
        return {"available": False, "torch": torch.__version__, "reason": f"PyTorch {torch.__version__} is CPU-only"}
    if not torch.cuda.is_available():
        return {"available": False, "torch": torch.__version__, "cuda": cuda,
                "reason": "torch.cuda.is_available() is False"}
    free, total = torch.cuda.mem_get_info()
    driver = ""
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - the driver's version is only printed
        driver = ""
    return {"available": True, "torch": torch.__version__, "cuda": cuda, "device": torch.cuda.get_device_name(),
            "driver": driver, "free_bytes": int(free), "total_bytes": int(total),
            "rmm": importlib.util.find_spec("rmm") is not None}


def _worker_main(ns: argparse.Namespace) -> dict[str, Any]:
    if ns.allocator == "managed-pool":  # before anything touches CUDA
        managed_alloc.enable(managed_alloc.PoolConfig(initial_bytes=ns.pool_initial, maximum_bytes=ns.pool_maximum))
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from ..traces.models import MODELS

    free, _total = torch.cuda.mem_get_info()  # the pool's managed memory is not resident until touched
    if ns.need > free:
        raise NoMemory(f"{human_bytes(ns.need)} needed, {human_bytes(free)} free now: refusing")
    torch.manual_seed(0)
    model = GPT2LMHeadModel._from_config(GPT2Config(**MODELS[ns.model].config), attn_implementation="sdpa").cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, model.config.vocab_size, (ns.batch, ns.seq), device="cuda",
                      generator=torch.Generator("cuda").manual_seed(1))
    times: list[float] = []
    for _ in range(ns.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=ns.amp == "bf16"):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = int(torch.cuda.max_memory_allocated()) if ns.allocator == "pytorch" else None
    return {"allocator": ns.allocator, "step_s": times, "peak_bytes": peak}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m huvmlab.experiment.gpucheck",
                                 description="The GPU check's subprocesses (huvmctl gpu-check runs them).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    w = sub.add_parser("worker")
    w.add_argument("--allocator", choices=["pytorch", "managed-pool"], required=True)
    w.add_argument("--model", choices=GPT2_MODELS, default="gpt2-medium")
    w.add_argument("--batch", type=int, default=8)
    w.add_argument("--seq", type=int, default=1024)
    w.add_argument("--amp", choices=["bf16", "fp32"], default="bf16")
    w.add_argument("--steps", type=int, default=6)
    w.add_argument("--need", type=int, default=0)
    w.add_argument("--pool-initial", type=int, default=None)
    w.add_argument("--pool-maximum", type=int, default=None)
    ns = ap.parse_args(argv)
    try:
        doc = _probe_main() if ns.cmd == "probe" else _worker_main(ns)
    except HuvmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - out of memory, a CUDA error: one line for the parent
        first = str(exc).strip().splitlines()
        print(f"error: {type(exc).__name__}: {first[0] if first else ''}", file=sys.stderr)
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
