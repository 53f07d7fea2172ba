"""Training-step memory traces of PyTorch models on the meta device (needs the ``traces`` extra).

Recipe (docs/traces.md, "Generators"): build the model on ``meta``, run one untraced warm-up step
(creates the optimizer state), then trace one steady-state step -- forward, backward, optimizer step,
``zero_grad(set_to_none=True)`` -- under a ``TorchDispatchMode`` that records every kernel-like aten op,
the byte ranges of its tensor arguments and the allocation and free points of every storage.

Meta differs from CUDA in kernel choice; two ``TorchFunctionMode``s restore the CUDA behaviour:
:class:`CudaLike` (fused SDPA kernels, ``native_dropout`` with a bool mask) and, for mixed precision,
:class:`EmulatedAutocast` (autocast is a silent no-op on meta). Activation checkpointing re-enters both
modes during recomputation (function modes are off while autograd runs backward). Fused AdamW is
allowed on meta by extending the fused-kernel device list.

This module imports torch at import time; ``huvmlab.traces`` imports it lazily.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import flop_registry

from .schema import Tables

aten = torch.ops.aten
_EMPTY = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}

ProgressFn = Callable[[int], None]


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """Byte offset and byte extent of a (possibly strided) view inside its storage."""
    isz = t.element_size()
    off = t.storage_offset() * isz
    if t.numel() == 0:
        return int(off), 0
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride(), strict=True))
    return int(off), int(span) * isz


def _tensors(x: Any, dev: str) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.device.type == dev]


@dataclass
class _Rec:
    nbytes: int
    alloc_op: int
    free_op: int
    kind: str
    dtype: str
    shape: str


class MemTracer(TorchDispatchMode):  # type: ignore[misc, no-untyped-call, unused-ignore]
    """Records ops, accesses and storage lifetimes (see module doc)."""

    def __init__(self, device: str = "meta", progress: ProgressFn | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]
        self.device = device
        self.phase = "init"
        self.progress = progress
        self.sto: list[_Rec] = []
        self.ops: list[tuple[str, str, str, int, int]] = []  # name, phase, dtype, flops, fixed_ns
        self.acc: list[tuple[int, int, int, int, int]] = []  # op, sid, offset, nbytes, mode
        self.dispatched = 0
        self.closed = False
        self._sid: dict[int, int] = {}

    def _sid_of(self, t: torch.Tensor, at: int, kind: str = "other", relabel: bool = False) -> int:
        st = t.untyped_storage()
        c = st._cdata
        s = self._sid.get(c)
        if s is None:
            s = self._sid[c] = len(self.sto)
            self.sto.append(_Rec(st.nbytes(), at, -1, kind, str(t.dtype), str(tuple(t.shape))))
            weakref.finalize(st, self._free, c, s).atexit = False
        elif relabel:
            self.sto[s].kind = kind
        return s

    def _free(self, c: int, s: int) -> None:
        if self.closed:
            return
        if self._sid.get(c) == s:
            del self._sid[c]
        self.sto[s].free_op = max(len(self.ops) - 1, self.sto[s].alloc_op)

    def register(self, ts: Iterator[torch.Tensor] | Sequence[torch.Tensor | None], kind: str) -> None:
        for t in ts:
            if isinstance(t, torch.Tensor) and t.device.type == self.device:
                self._sid_of(t, -1, kind, relabel=True)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.dispatched += 1
        if self.progress is not None:
            self.progress(1)
        written: set[int] = set()
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                v = args[i] if i < len(args) else kwargs.get(a.name)
                written.update(id(t) for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor))
        ins = _tensors((args, kwargs), self.device)
        out = func(*args, **kwargs)
        outs = _tensors(out, self.device)
        if not ins and not outs:
            return out
        inc = {t.untyped_storage()._cdata for t in ins}
        if not written and outs and all(t.untyped_storage()._cdata in inc for t in outs):
            return out  # view / metadata-only op: moves no memory
        op = len(self.ops)
        flops = 0
        fn = flop_registry.get(func._overloadpacket)
        if fn is not None:
            try:
                flops = int(fn(*args, **kwargs, out_val=out))
            except Exception:  # noqa: BLE001 - a counter that cannot handle these args counts 0
                flops = 0
        ref = outs[0] if outs else ins[0]
        empty = func._overloadpacket in _EMPTY
        self.ops.append((str(func), self.phase, str(ref.dtype), flops, 0 if empty else -1))
        seen: set[int] = set()
        for t in ins:
            if id(t) in seen:
                continue
            seen.add(id(t))
            off, n = _extent(t)
            self.acc.append((op, self._sid_of(t, -1, "input" if self.phase == "fwd" else "other"), off, n,
                             2 if id(t) in written else 0))
        for t in outs:
            if t.untyped_storage()._cdata in inc:
                continue
            s = self._sid_of(t, op)
            if not empty:
                off, n = _extent(t)
                self.acc.append((op, s, off, n, 1))
        return out

    def tables(self, meta: dict[str, Any]) -> Tables:
        """The raw tables (derived columns -- addresses, chunks, live bytes -- are left to chunks.finalize)."""
        self.closed = True
        n_ops = len(self.ops)
        acc = np.array(self.acc, dtype=np.int64).reshape(-1, 5)
        e64 = np.zeros(0, dtype=np.int64)
        return Tables(
            meta=meta,
            s_nbytes=np.array([r.nbytes for r in self.sto], dtype=np.int64),
            s_alloc_op=np.array([r.alloc_op for r in self.sto], dtype=np.int32),
            s_free_op=np.array([r.free_op for r in self.sto], dtype=np.int32),
            s_kind=[r.kind for r in self.sto],
            s_dtype=[r.dtype for r in self.sto],
            s_shape=[r.shape for r in self.sto],
            s_addr=np.full(len(self.sto), -1, dtype=np.int64),
            o_name=[o[0] for o in self.ops],
            o_phase=[o[1] for o in self.ops],
            o_dtype=[o[2] for o in self.ops],
            o_flops=np.array([o[3] for o in self.ops], dtype=np.int64),
            o_bytes=np.zeros(n_ops, dtype=np.int64),
            o_live_bytes=np.zeros(n_ops, dtype=np.int64),
            o_fixed_ns=np.array([o[4] for o in self.ops], dtype=np.int64),
            a_op=acc[:, 0].astype(np.int32),
            a_sid=acc[:, 1].astype(np.int32),
            a_offset=acc[:, 2].copy(),
            a_nbytes=acc[:, 3].copy(),
            a_mode=acc[:, 4].astype(np.int8),
            g_base=e64, g_nbytes=e64.copy(), g_alloc_op=np.zeros(0, dtype=np.int32),
            c_op=np.zeros(0, dtype=np.int32), c_chunk=np.zeros(0, dtype=np.int32),
            c_mode=np.zeros(0, dtype=np.int8),
        )


class CountMode(TorchDispatchMode):  # type: ignore[misc, no-untyped-call, unused-ignore]
    """Counts dispatched ops (sizes the progress bar from the warm-up step)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def _opt(args: tuple[Any, ...], kwargs: dict[str, Any], names: Sequence[str], start: int) -> dict[str, Any]:
    o = dict(zip(names, args[start:], strict=False))
    o.update(kwargs)
    return o


class CudaLike(TorchFunctionMode):  # type: ignore[misc, unused-ignore]
    """Fused SDPA (flash / memory-efficient) and ``native_dropout``, as CUDA training runs pick."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            o = _opt(args, kwargs, ["attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"], 3)
            m, p, c, sc = o.get("attn_mask"), o.get("dropout_p", 0.0), o.get("is_causal", False), o.get("scale")
            if o.get("enable_gqa") and k.shape[-3] != q.shape[-3]:
                rep = q.shape[-3] // k.shape[-3]
                k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
            if m is None and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256:
                return aten._scaled_dot_product_flash_attention(q, k, v, p, c, False, scale=sc)[0]
            if m is not None and m.dtype == torch.bool:
                m = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(~m, float("-inf"))
            return aten._scaled_dot_product_efficient_attention(q, k, v, m, True, p, c, scale=sc)[0]
        if func is F.dropout:
            o = _opt(args, kwargs, ["input", "p", "training", "inplace"], 0)
            x, p = o["input"], o.get("p", 0.5)
            if o.get("training", True) and p > 0 and not o.get("inplace", False):
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


_LOW: set[Any] = {
    F.linear, torch.addmm, torch.matmul, torch.bmm, torch.baddbmm, torch.mm, F.conv1d, F.conv2d,
    F.scaled_dot_product_attention, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm,
    torch.Tensor.bmm,
}
_HIGH: set[Any] = {
    F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, torch.Tensor.softmax,
    torch.Tensor.log_softmax, F.layer_norm, F.group_norm, F.cross_entropy, F.nll_loss, F.mse_loss,
}

#: CUDA autocast's "fp32" op list (PyTorch, aten/src/ATen/autocast_mode.cpp, ``KERNEL_CUDA(..., fp32)``; the
#: "Ops that autocast to float32" table of https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32):
#: every floating-point tensor argument is cast to fp32, so the output and what the op saves for backward
#: are fp32. GPT-2's tanh GELU (``torch.pow(x, 3.0)``) is the case that matters: its pow makes the whole
#: MLP-sized chain after it fp32.
AUTOCAST_FP32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm", "norm", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp",
)


def _entry_points(names: Sequence[str]) -> set[Any]:
    """The Python callables that reach these aten ops (torch.X, Tensor.X, F.X; ``**`` for pow)."""
    out: set[Any] = set()
    for n in names:
        for ns in (torch, torch.Tensor, F):
            f = getattr(ns, n, None)
            if callable(f):
                out.add(f)
    if "pow" in names:
        out |= {torch.Tensor.__pow__, torch.Tensor.__rpow__}
    return out


_FP32: set[Any] = _entry_points(AUTOCAST_FP32_OPS) - _HIGH


class EmulatedAutocast(TorchFunctionMode):  # type: ignore[misc, unused-ignore]
    """CUDA autocast on meta: matmul/conv/SDPA inputs to ``dtype``, reductions, norms and the ops of
    autocast's fp32 list (:data:`AUTOCAST_FP32_OPS`, ``fp32_ops``) in fp32.

    Casts of leaf parameters are cached while ``caching`` is on (the forward pass), like autocast's
    weight cache (``torch.autocast`` keeps one low-precision copy per weight until its region exits, so a
    weight used twice is cast once); :meth:`drop_cache` ends it.
    """

    def __init__(self, dtype: torch.dtype = torch.bfloat16, *, fp32_ops: bool = True, cache: bool = True) -> None:
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}
        self.caching = cache
        self.fp32 = _FP32 if fp32_ops else set()

    def drop_cache(self) -> None:
        self.cache.clear()
        self.caching = False

    def _cast(self, x: Any, dt: torch.dtype) -> Any:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == dt:
            return x
        if dt == self.dtype and x.is_leaf and x.requires_grad and self.caching:
            c = self.cache.get(id(x))
            if c is None:
                c = self.cache[id(x)] = x.to(dt)
            return c
        return x.to(dt)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _LOW:
            args = tuple(self._cast(a, self.dtype) for a in args)
            kwargs = {k: self._cast(v, self.dtype) if k != "attn_mask" else v for k, v in kwargs.items()}
        elif func in _HIGH:
            args = tuple(self._cast(a, torch.float32) if i == 0 else a for i, a in enumerate(args))
            if "input" in kwargs:
                kwargs["input"] = self._cast(kwargs["input"], torch.float32)
        elif func in self.fp32:
            args = tuple(self._cast(a, torch.float32) for a in args)
            kwargs = {k: self._cast(v, torch.float32) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def reenter(fn: Callable[..., Any], make_modes: Callable[[], list[TorchFunctionMode]]) -> Callable[..., Any]:
    """Wrap a checkpointed function so recomputation (inside backward) runs under fresh function modes."""

    @functools.wraps(fn)
    def wrapped(*a: Any, **k: Any) -> Any:
        if torch._C._is_torch_function_mode_enabled():
            return fn(*a, **k)
        with contextlib.ExitStack() as st:
            for m in make_modes():
                st.enter_context(m)
            return fn(*a, **k)

    return wrapped


def ckpt(fn: Callable[..., Any], make_modes: Callable[[], list[TorchFunctionMode]], *a: Any, **k: Any) -> Any:
    """Non-reentrant activation checkpoint of ``fn`` whose recomputation re-enters the modes."""
    return checkpoint(reenter(fn, make_modes), *a, use_reentrant=False, **k)


@contextlib.contextmanager
def fused_on_meta() -> Iterator[None]:
    """Let ``AdamW(fused=True)`` accept meta params (``aten._fused_adamw_`` has a meta kernel)."""
    import torch.optim.optimizer as oo

    key = "_get_fused_kernels_supported_devices"
    orig: Callable[[], list[str]] = getattr(oo, key)
    setattr(oo, key, lambda: [*orig(), "meta"])
    try:
        yield
    finally:
        setattr(oo, key, orig)


@dataclass
class StepSpec:
    """What one training step runs. ``loss`` builds the forward from fresh inputs and returns the loss."""

    model: torch.nn.Module
    loss: Callable[[], torch.Tensor]
    inputs: list[torch.Tensor]
    enable_checkpointing: Callable[[Callable[[], list[TorchFunctionMode]]], None] | None = None


def make_optimizer(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if name in ("adamw", "adamw-foreach"):
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adamw-fused":  # needs fused_on_meta() around construction and step()
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "adamw-loop":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True)
    raise ValueError(f"unknown optimizer {name!r} (adamw, adamw-fused, adamw-loop, sgd)")


def trace_step(spec: StepSpec, *, amp: str | None, checkpointing: bool, optimizer: str,
               meta: dict[str, Any], progress: Callable[[int, int], None] | None = None) -> Tables:
    """Warm up one step, then trace one steady-state training step; returns the raw tables.

    ``amp``: None (fp32), "bf16" or "fp16" autocast emulation. ``progress(done, total)`` is called as
    ops are dispatched (total estimated from the warm-up step).
    """
    with contextlib.ExitStack() as st:
        if optimizer == "adamw-fused":
            st.enter_context(fused_on_meta())
        return _trace_step(spec, amp=amp, checkpointing=checkpointing, optimizer=optimizer, meta=meta,
                           progress=progress)


def _trace_step(spec: StepSpec, *, amp: str | None, checkpointing: bool, optimizer: str,
                meta: dict[str, Any], progress: Callable[[int, int], None] | None) -> Tables:
    model = spec.model
    model.train()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp or "")
    if amp and amp_dtype is None:
        raise ValueError(f"amp must be None, 'bf16' or 'fp16', not {amp!r}")
    holder: dict[str, EmulatedAutocast] = {}

    def make_modes() -> list[TorchFunctionMode]:
        modes: list[TorchFunctionMode] = [CudaLike()]
        if amp_dtype is not None:
            ac = EmulatedAutocast(amp_dtype)
            holder["ac"] = ac
            modes.append(ac)
        return modes

    if checkpointing:
        if spec.enable_checkpointing is None:
            raise ValueError("this model does not support activation checkpointing")
        spec.enable_checkpointing(make_modes)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, params)

    def step(tr: MemTracer | None) -> None:
        with contextlib.ExitStack() as st:
            for m in make_modes():
                st.enter_context(m)
            if tr is not None:
                st.enter_context(tr)
                tr.phase = "fwd"
            loss = spec.loss()
            if "ac" in holder:
                holder["ac"].drop_cache()
            if tr is not None:
                tr.phase = "bwd"
            loss.backward()  # type: ignore[no-untyped-call, unused-ignore]
            del loss
            if tr is not None:
                tr.register([p.grad for p in params], "grad")
                tr.phase = "opt"
            opt.step()
            opt.zero_grad(set_to_none=True)

    cm = CountMode()
    with cm:
        step(None)
    total = cm.n
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None and done[0] % 256 == 0:
            progress(min(done[0], total), total)

    tr = MemTracer(progress=tick if progress is not None else None)
    tr.register(list(model.parameters()), "param")
    tr.register(list(model.buffers()), "buffer")
    tr.register([v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)], "optstate")
    tr.register(spec.inputs, "input")
    step(tr)
    if progress is not None:
        progress(total, total)
    n_params = sum(p.numel() for p in model.parameters())
    meta = {**meta, "params": int(n_params), "dispatched": tr.dispatched}
    return tr.tables(meta)


def n_params(model: torch.nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def attention_flops(layers: int, hidden: int, seq: int, tokens: int) -> int:
    """Training FLOPs of the attention score and value products (not counted in 6*N*T), full S^2."""
    return int(12 * layers * hidden * seq * tokens)


def lm_flops(params_matmul: int, tokens: int) -> int:
    return int(6 * params_matmul * tokens)

