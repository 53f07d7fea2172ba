"""Synthetic workloads in the simulator's trace form (:class:`huvm.traces.SimTrace`), for tests, calibration
and benchmarks when no recorded trace is at hand. All deterministic (fixed seeds, integer sizes).

* :func:`streaming`   -- a loop over a working set, ``chunks_per_op`` consecutive chunks per op.
* :func:`random_access` -- uniform random chunks of a working set.
* :func:`hot_cold`    -- a hot fraction of the working set takes most touches.
* :func:`pagerank`    -- graph-analytics iterations: streamed edge array, skewed gathers over vertex arrays.
* :func:`training_step` -- a transformer training step (forward, backward, AdamW) with per-layer parameter,
  gradient, optimizer-state and activation chunks; :func:`llama7b_step` sizes it like Llama-7B.
* :func:`rising`      -- a lender whose footprint rises mid-run (give-back).
* :func:`spiky`       -- a lender whose footprint rises and falls every period (allocations freed again).
* :func:`lender`      -- the lender shapes (idle, steady, rising, spiky) sized as shares of a GPU's memory.
* :func:`coarsen`     -- any trace at k chunks per chunk (the emulated node's granularity at scale 1/k).

Compute time per op is ``ns_per_chunk`` per touched chunk (memory-bound kernels) unless stated otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from ..traces.trace import SimTrace
from .config import CHUNK_BYTES
from .errors import SimConfigError

#: memory-bound compute per touched 2 MiB chunk: 2 MiB at half of ~800 GB/s (RTX A5000 / V100 class HBM).
DEFAULT_NS_PER_CHUNK = 5_000


def _chunks(nbytes: int) -> int:
    return max(1, (int(nbytes) + CHUNK_BYTES - 1) // CHUNK_BYTES)


def make_trace(name: str, per_op: list[npt.NDArray[np.int64]] | npt.NDArray[np.int64], op_time_ns: npt.ArrayLike,
               n_chunks: int, modes: npt.NDArray[np.uint8] | None = None,
               alloc_op: npt.NDArray[np.int32] | None = None,
               free_op: npt.NDArray[np.int32] | None = None,
               pages: npt.NDArray[np.uint32] | None = None) -> SimTrace:
    """Build a SimTrace from per-op chunk lists (or a 2-D array: one row per op); ``pages``: each touch's 64 KiB
    groups (:attr:`SimTrace.touch_pages`; None: whole blocks)."""
    if isinstance(per_op, np.ndarray) and per_op.ndim == 2:
        counts = np.full(per_op.shape[0], per_op.shape[1], dtype=np.int64)
        touch = per_op.reshape(-1)
    else:
        counts = np.array([len(x) for x in per_op], dtype=np.int64)
        touch = np.concatenate(per_op) if len(per_op) else np.zeros(0, dtype=np.int64)
    first = np.zeros(len(counts) + 1, dtype=np.uint32)
    first[1:] = np.cumsum(counts)
    times = np.asarray(op_time_ns, dtype=np.uint64)
    if times.ndim == 0:
        times = np.full(len(counts), int(times), dtype=np.uint64)
    return SimTrace(
        name=name,
        gpu_preset="synthetic",
        op_time_ns=times,
        op_first_touch=first,
        touch_chunk=touch.astype(np.uint32),
        touch_mode=np.zeros(len(touch), dtype=np.uint8) if modes is None else modes.astype(np.uint8),
        chunk_alloc_op=np.full(n_chunks, -1, dtype=np.int32) if alloc_op is None else alloc_op.astype(np.int32),
        chunk_free_op=np.full(n_chunks, -1, dtype=np.int32) if free_op is None else free_op.astype(np.int32),
        peak_live_bytes=n_chunks * CHUNK_BYTES,
        touch_pages=None if pages is None else np.asarray(pages, dtype=np.uint32),
    )


def streaming(working_set_bytes: int, passes: int = 1, chunks_per_op: int = 8,
              ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, name: str = "streaming") -> SimTrace:
    """``passes`` sequential sweeps over the working set, ``chunks_per_op`` chunks per op."""
    ws = _chunks(working_set_bytes)
    n_ops = max(1, (ws * passes + chunks_per_op - 1) // chunks_per_op)
    idx = (np.arange(n_ops * chunks_per_op, dtype=np.int64) % ws).reshape(n_ops, chunks_per_op)
    return make_trace(name, idx, chunks_per_op * ns_per_chunk, ws)


def random_access(working_set_bytes: int, n_ops: int, chunks_per_op: int = 8,
                  ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, seed: int = 1, name: str = "random") -> SimTrace:
    """Uniformly random chunks of the working set (first touches included)."""
    ws = _chunks(working_set_bytes)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, ws, size=(n_ops, chunks_per_op), dtype=np.int64)
    return make_trace(name, idx, chunks_per_op * ns_per_chunk, ws)


def hot_cold(working_set_bytes: int, n_ops: int, hot_fraction: float = 0.2, hot_share: float = 0.8,
             chunks_per_op: int = 8, ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, seed: int = 2,
             name: str = "hot-cold") -> SimTrace:
    """``hot_share`` of the touches go to the first ``hot_fraction`` of the working set."""
    ws = _chunks(working_set_bytes)
    hot = max(1, int(ws * hot_fraction))
    rng = np.random.default_rng(seed)
    is_hot = rng.random((n_ops, chunks_per_op)) < hot_share
    idx = np.where(is_hot, rng.integers(0, hot, size=is_hot.shape), rng.integers(hot, max(hot + 1, ws),
                                                                                   size=is_hot.shape))
    return make_trace(name, np.minimum(idx, ws - 1).astype(np.int64), chunks_per_op * ns_per_chunk, ws)


def pagerank(vertices: int, edges: int, iterations: int = 10, edge_chunks_per_op: int = 16,
             gathers_per_op: int = 16, ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, seed: int = 3,
             zipf_a: float = 1.2, name: str = "pagerank") -> SimTrace:
    """PageRank over a CSR graph: offsets (8 B/vertex), edges (4 B/edge, streamed), rank old/new and degree
    (4 B/vertex each). Each op streams ``edge_chunks_per_op`` chunks of the edge array with its offsets chunk,
    gathers ``gathers_per_op`` chunks of the old ranks (power-law skew: hubs are hot) and writes its slice of
    the new ranks."""
    off = _chunks((vertices + 1) * 8)
    edg = _chunks(edges * 4)
    vec = _chunks(vertices * 4)
    base_off, base_edge = 0, off
    base_old, base_new, base_deg = off + edg, off + edg + vec, off + edg + 2 * vec
    n_chunks = base_deg + vec
    ops_per_iter = (edg + edge_chunks_per_op - 1) // edge_chunks_per_op
    rng = np.random.default_rng(seed)
    rows: list[npt.NDArray[np.int64]] = []
    modes: list[npt.NDArray[np.uint8]] = []
    for it in range(iterations):
        old, new = (base_old, base_new) if it % 2 == 0 else (base_new, base_old)
        for k in range(ops_per_iter):
            e0 = k * edge_chunks_per_op
            e = np.arange(e0, min(edg, e0 + edge_chunks_per_op), dtype=np.int64) + base_edge
            o = np.array([base_off + min(off - 1, k * off // ops_per_iter)], dtype=np.int64)
            g = (np.minimum(rng.zipf(zipf_a, gathers_per_op) - 1, vec - 1) + old).astype(np.int64)
            g = np.unique(np.concatenate([g, [base_deg + min(vec - 1, k * vec // ops_per_iter)]]))
            w = np.array([new + min(vec - 1, k * vec // ops_per_iter)], dtype=np.int64)
            rows.append(np.concatenate([o, e, g, w]))
            modes.append(np.concatenate([np.zeros(len(o) + len(e) + len(g), dtype=np.uint8),
                                         np.full(1, 2, dtype=np.uint8)]))
    times = np.array([len(r) * ns_per_chunk for r in rows], dtype=np.uint64)
    return make_trace(name, rows, times, n_chunks, modes=np.concatenate(modes))


def training_step(n_layers: int, params: int, act_bytes: int, ops_per_layer: int = 8, tokens: int = 8192,
                  flops_per_s: float = 400e12, hbm_bytes_per_s: float = 2.0e12, name: str = "training") -> SimTrace:
    """One transformer training step with fp32 AdamW (16 B per parameter: param, grad, exp_avg, exp_avg_sq)
    and ``act_bytes`` of activations, split evenly over ``n_layers`` layers of ``ops_per_layer`` ops.

    Forward op: reads its slice of the layer's parameters and the previous op's output, writes its output
    (activation chunks are reserved when first written and kept, as the caching allocator does). Backward op
    (reverse order): reads parameters and saved activations, read-modify-writes gradients. Optimizer: one op
    per layer over param, grad and both states. Compute: 2 (forward) / 4 (backward) x params x tokens FLOPs at
    ``flops_per_s``; the optimizer is memory bound at ``hbm_bytes_per_s``."""
    p_layer = _chunks(params * 4 // n_layers)
    a_layer = _chunks(act_bytes // n_layers)
    per_layer = 4 * p_layer + a_layer
    n_chunks = n_layers * per_layer
    rows: list[npt.NDArray[np.int64]] = []
    modes: list[npt.NDArray[np.uint8]] = []
    times: list[int] = []
    alloc = np.full(n_chunks, -1, dtype=np.int32)

    def sl(start: int, total: int, k: int) -> npt.NDArray[np.int64]:
        a = start + k * total // ops_per_layer
        b = start + max(k * total // ops_per_layer + 1, (k + 1) * total // ops_per_layer)
        return np.arange(a, min(b, start + total), dtype=np.int64)

    fwd_ns = int(2 * params / n_layers / ops_per_layer * tokens / flops_per_s * 1e9)
    prev_out: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
    for layer in range(n_layers):
        b = layer * per_layer
        for k in range(ops_per_layer):
            p = sl(b, p_layer, k)
            out = sl(b + 4 * p_layer, a_layer, k)
            new = out[alloc[out] == -1]
            alloc[new] = len(rows)
            r = np.concatenate([p, prev_out, out])
            rows.append(r)
            modes.append(np.concatenate([np.zeros(len(p) + len(prev_out), dtype=np.uint8),
                                         np.ones(len(out), dtype=np.uint8)]))
            times.append(fwd_ns)
            prev_out = out
    for layer in reversed(range(n_layers)):
        b = layer * per_layer
        for k in reversed(range(ops_per_layer)):
            p = sl(b, p_layer, k)
            g = sl(b + p_layer, p_layer, k)
            a = sl(b + 4 * p_layer, a_layer, k)
            rows.append(np.concatenate([p, a, g]))
            modes.append(np.concatenate([np.zeros(len(p) + len(a), dtype=np.uint8),
                                         np.full(len(g), 2, dtype=np.uint8)]))
            times.append(2 * fwd_ns)
    opt_ns = int(p_layer * 4 * 2 * CHUNK_BYTES / hbm_bytes_per_s * 1e9)
    for layer in range(n_layers):
        b = layer * per_layer
        r = np.arange(b, b + 4 * p_layer, dtype=np.int64)
        rows.append(r)
        modes.append(np.full(len(r), 2, dtype=np.uint8))
        times.append(opt_ns)
    # Activation chunks are reserved at their first write (alloc op); the training state is live from the start.
    return make_trace(name, rows, np.array(times, dtype=np.uint64), n_chunks, modes=np.concatenate(modes),
                      alloc_op=alloc)


def llama7b_step(gpu_flops_per_s: float = 989.5e12 * 0.5, hbm_bytes_per_s: float = 3.35e12,
                 ops_per_layer: int = 24) -> SimTrace:
    """A Llama-7B-sized step: 6.738 B parameters (107.8 GB fp32 AdamW state: 16 B per parameter),
    ~50 GB of activations (157.2 GB peak with amp minus the static state), 32 layers, 8192 tokens; default
    compute: H100 bf16 at 50 % of peak."""
    return training_step(32, 6_738_000_000, 50 * 10**9, ops_per_layer=ops_per_layer, tokens=8192,
                         flops_per_s=gpu_flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s, name="llama-7b-synthetic")


def rising(base_bytes: int, peak_bytes: int, n_ops: int, rise_at_op: int, op_time_ns: int = 1_000_000,
           chunks_per_op: int = 4, name: str = "rising") -> SimTrace:
    """A footprint of ``base_bytes`` from the start that grows to ``peak_bytes`` at op ``rise_at_op``; each op
    touches ``chunks_per_op`` of the live chunks in turn."""
    base = _chunks(base_bytes) if base_bytes else 0
    peak = max(base, _chunks(peak_bytes))
    alloc = np.full(peak, -1, dtype=np.int32)
    alloc[base:] = rise_at_op
    rows = []
    pos = 0
    for k in range(n_ops):
        live = base if k < rise_at_op else peak
        if live == 0:
            rows.append(np.zeros(0, dtype=np.int64))
            continue
        rows.append(np.arange(pos, pos + chunks_per_op, dtype=np.int64) % live)
        pos += chunks_per_op
    return make_trace(name, rows, op_time_ns, peak, alloc_op=alloc)


def spiky(base_bytes: int, spike_bytes: int, period_ops: int, spike_ops: int, op_time_ns: int = 1_000_000,
          chunks_per_op: int = 4, name: str = "spiky") -> SimTrace:
    """One period of a lender whose footprint spikes: ``base_bytes`` live throughout, ``spike_bytes`` more
    allocated before op 0 and freed after op ``spike_ops - 1`` of each ``period_ops``-op period (loop it:
    ``steps`` > 1 or in the background). Each op touches ``chunks_per_op`` of the live chunks in turn, the
    spike's first (written when allocated)."""
    if not 0 < spike_ops <= period_ops:
        raise ValueError(f"spike_ops {spike_ops} must be in 1..period_ops ({period_ops})")
    base = _chunks(base_bytes) if base_bytes else 0
    spike = _chunks(spike_bytes) if spike_bytes else 0
    n = base + spike
    alloc = np.full(n, -1, dtype=np.int32)
    free = np.full(n, -1, dtype=np.int32)
    alloc[base:] = 0
    free[base:] = spike_ops - 1
    rows: list[npt.NDArray[np.int64]] = []
    modes: list[npt.NDArray[np.uint8]] = []
    pos = 0
    for k in range(period_ops):
        if k < spike_ops and spike:
            # the whole spike is written in its first ops, then read in turn with the base
            per = max(chunks_per_op, -(-spike // max(1, spike_ops // 2)))
            live = np.arange(base, n, dtype=np.int64)
            first_half = k < max(1, spike_ops // 2)
            if first_half:
                lo = k * per
                r = live[lo:lo + per]
                m = np.ones(len(r), dtype=np.uint8)
            else:
                r = np.arange(pos, pos + chunks_per_op, dtype=np.int64) % n
                pos += chunks_per_op
                m = np.zeros(len(r), dtype=np.uint8)
        elif base:
            r = np.arange(pos, pos + chunks_per_op, dtype=np.int64) % base
            pos += chunks_per_op
            m = np.zeros(len(r), dtype=np.uint8)
        else:
            r = np.zeros(0, dtype=np.int64)
            m = np.zeros(0, dtype=np.uint8)
        r, idx = np.unique(r, return_index=True)
        rows.append(r)
        modes.append(m[idx])
    return make_trace(name, rows, op_time_ns, n, modes=np.concatenate(modes) if modes else None,
                      alloc_op=alloc, free_op=free)


#: lender shapes of :func:`lender`, as shares of the lender GPU's usable memory (docs/evaluation.md, "Scenario
#: matrix"): footprint before, and the extra footprint of a rise or spike.
LENDER_SHAPES: dict[str, tuple[float, float]] = {
    "idle": (0.06, 0.0),
    "steady": (0.30, 0.0),
    "rising": (0.15, 0.45),
    "spiky": (0.06, 0.60),
}


def lender(kind: str, usable_bytes: int, horizon_ns: int, op_time_ns: int = 1_000_000,
           chunks_per_op: int = 4, spike_period_ns: int | None = None) -> SimTrace:
    """A lender's job on a GPU with ``usable_bytes``, shaped for a harvester run of about ``horizon_ns``:
    ``steady`` (a constant footprint read in turn), ``rising`` (grows at a third of the horizon and stays),
    ``spiky`` (a base plus a spike allocated for half of every tenth of the horizon, then freed), ``idle`` (a
    footprint touched once). Shares of memory: :data:`LENDER_SHAPES`. Run it in the background (it loops
    until the harvesters finish); its throughput is what lending costs it. ``spike_period_ns``: a spiky
    lender's cadence instead of a tenth of the horizon (the spike lives for the first half of each period)."""
    if kind not in LENDER_SHAPES:
        raise ValueError(f"unknown lender kind {kind!r}; known: {', '.join(LENDER_SHAPES)}")
    base_share, extra_share = LENDER_SHAPES[kind]
    base = int(usable_bytes * base_share)
    extra = int(usable_bytes * extra_share)
    ops = max(4, int(horizon_ns // op_time_ns))
    name = f"lender-{kind}"
    if kind == "idle":
        return make_trace(name, [np.arange(_chunks(base), dtype=np.int64)], op_time_ns, _chunks(base))
    if kind == "steady":
        return rising(base, base, ops, ops, op_time_ns=op_time_ns, chunks_per_op=chunks_per_op, name=name)
    if kind == "rising":
        # long enough that the loop's second round never comes before the harvesters finish
        return rising(base, base + extra, 4 * ops, max(1, ops // 3), op_time_ns=op_time_ns,
                      chunks_per_op=chunks_per_op, name=name)
    period = max(2, ops // 10) if spike_period_ns is None else max(2, spike_period_ns // op_time_ns)
    return spiky(base, extra, period, max(1, period // 2), op_time_ns=op_time_ns, chunks_per_op=chunks_per_op,
                 name=name)


def horizon_trace(horizon_ns: int, ops: int = 1000) -> SimTrace:
    """A foreground tenant that only keeps time: ``ops`` empty ops over ``horizon_ns``. Background tenants
    run until the last foreground tenant is done, so this runs one alone for about ``horizon_ns``."""
    n = max(1, ops)
    return make_trace("horizon", [np.zeros(0, dtype=np.int64)] * n, max(1, horizon_ns // n), 0)


def coarsen(trace: SimTrace, k: int) -> SimTrace:
    """``trace`` at a coarser granularity: chunks ``u*k .. u*k+k-1`` become one chunk ``u``, as on the emulated
    node at scale 1/k, where one 2 MiB UVM block holds k of the trace's chunks (docs/simulator.md, "Cross-check
    against the emulated node"). Run it on GPUs of 1/k the memory: every count is then in blocks (multiply by
    k for chunk equivalents), and the policy's chunk counts (reserve, prefetch window) count blocks, as the
    module's do. Within an op a block is touched once, where its first chunk was; it is written when any of
    its chunks is written, and needs its old data (mode 2, or 0 when not written) unless every touch wrote new
    data (mode 1). A block is reserved when its first chunk is and released after its last one (never if any
    chunk is never released). Op times are kept. ``k = 1`` returns ``trace`` itself. Touch extents
    (``touch_pages``) are not carried over: a coarse block's touches are whole blocks."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SimConfigError(f"must be a whole number of chunks >= 1, not {k!r}", field="k")
    k = int(k)
    if k == 1:
        return trace
    n_ops = int(trace.op_time_ns.shape[0])
    first = np.asarray(trace.op_first_touch, dtype=np.int64)
    op_of = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(first))
    unit = np.asarray(trace.touch_chunk, dtype=np.int64) // k
    mode = np.asarray(trace.touch_mode, dtype=np.uint8)
    n_units = -(-int(trace.chunk_alloc_op.shape[0]) // k)
    key = op_of * max(n_units, 1) + unit
    _, first_idx, inverse = np.unique(key, return_index=True, return_inverse=True)
    writes = np.zeros(first_idx.shape[0], dtype=np.bool_)
    np.logical_or.at(writes, inverse, mode != 0)
    reads = np.zeros(first_idx.shape[0], dtype=np.bool_)
    np.logical_or.at(reads, inverse, mode != 1)
    new_mode = np.where(writes, np.where(reads, 2, 1), 0).astype(np.uint8)
    order = np.argsort(first_idx, kind="stable")  # op order, then each block where its first chunk was
    kept = first_idx[order]
    new_first = np.zeros(n_ops + 1, dtype=np.uint32)
    new_first[1:] = np.cumsum(np.bincount(op_of[kept], minlength=n_ops))
    alloc = np.asarray(trace.chunk_alloc_op, dtype=np.int64)
    free = np.asarray(trace.chunk_free_op, dtype=np.int64)
    owner = np.arange(alloc.shape[0], dtype=np.int64) // k
    new_alloc = np.full(n_units, np.iinfo(np.int32).max, dtype=np.int64)
    np.minimum.at(new_alloc, owner, alloc)
    new_free = np.full(n_units, -1, dtype=np.int64)
    np.maximum.at(new_free, owner, free)
    kept_forever = np.zeros(n_units, dtype=np.bool_)
    np.logical_or.at(kept_forever, owner, free < 0)
    new_free[kept_forever] = -1
    return SimTrace(
        name=f"{trace.name}/{k}",
        gpu_preset=trace.gpu_preset,
        op_time_ns=np.asarray(trace.op_time_ns, dtype=np.uint64).copy(),
        op_first_touch=new_first,
        touch_chunk=unit[kept].astype(np.uint32),
        touch_mode=new_mode[order],
        chunk_alloc_op=new_alloc.astype(np.int32),
        chunk_free_op=new_free.astype(np.int32),
        peak_live_bytes=-(-int(trace.peak_live_bytes) // k),
    )


# ---- workloads of the evaluation's second matrix axis (docs/evaluation.md, "Workload kinds") ----

@dataclass(frozen=True)
class CommTrace(SimTrace):
    """A :class:`SimTrace` with what the new workload kinds add: ``op_link_bytes`` (per op, the bytes its
    collectives send to each GPU of the tenant's ``link_send`` and receive from each of ``link_recv``: ring
    all-reduce, expert-parallel all-to-all) and ``op_tokens`` (per op, the tokens a serving trace produces:
    one per running request per decode iteration; their latency is the op's). ``info``: the generator's
    derived figures (name, value), for the docs and tests."""

    op_link_bytes: npt.NDArray[np.uint64] | None = None
    op_tokens: npt.NDArray[np.uint32] | None = None
    info: tuple[tuple[str, float], ...] = ()


def _comm(base: SimTrace, **extra: object) -> CommTrace:
    return CommTrace(**{f.name: getattr(base, f.name) for f in fields(SimTrace)}, **extra)  # type: ignore[arg-type]


#: ShareGPT conversations as the vLLM paper measured them (Kwon et al., "Efficient Memory Management for Large
#: Language Model Serving with PagedAttention", SOSP'23, Sec 6.1 and Fig 11): mean prompt 161.31 tokens, mean
#: output 337.99 tokens.
SHAREGPT_PROMPT_MEAN = 161.31
SHAREGPT_OUTPUT_MEAN = 337.99
#: KV cache per token of Llama-2-7B in fp16: 2 (K, V) x 32 layers x 4096 hidden x 2 B = 512 KiB (the vLLM paper's
#: Sec 3 example for OPT-13B is 800 KiB per token by the same formula).
LLAMA2_7B_KV_BYTES_PER_TOKEN = 2 * 32 * 4096 * 2


def _lengths(rng: np.random.Generator, mean: float, n: int) -> npt.NDArray[np.int64]:
    """Request lengths: geometric with the given mean (at least 1 token), cut at 4x the mean (an assumption:
    the published statistic is the mean; the shape is long-tailed)."""
    m = max(1.0, mean)
    x = rng.geometric(min(1.0, 1.0 / m), size=n)
    return np.minimum(x, max(1, int(4 * m))).astype(np.int64)


def kv_serving(weights_bytes: int, kv_capacity_bytes: int, n_ops: int, *, kv_bytes_per_token: int,
               arrivals_per_op: float, prompt_mean: float = SHAREGPT_PROMPT_MEAN,
               output_mean: float = SHAREGPT_OUTPUT_MEAN, ns_per_chunk: int = DEFAULT_NS_PER_CHUNK,
               prefill_ns_per_token: int = 0, seed: int = 7, name: str = "kv-serving",
               requests: Sequence[tuple[int, int, int]] | None = None) -> CommTrace:
    """An LLM inference server with continuous batching (Orca, OSDI'22; vLLM) whose KV cache is backed by
    physical memory only as it grows (2 MiB pages mapped per request on demand, as vAttention, ASPLOS'25, does
    with CUDA virtual memory): one op = one decode iteration.

    Requests arrive as a Poisson process (``arrivals_per_op`` per iteration) with geometric prompt and output
    lengths of the given means, wait in FIFO order and are admitted when the KV capacity holds their whole
    prompt + output (the scheduler reserves, the memory follows the tokens). An admitted request allocates its
    prompt's KV chunks (prefill, ``prefill_ns_per_token`` each), then each iteration adds one token to every
    running request (a new 2 MiB chunk when its KV crosses a chunk) and produces that token (``op_tokens``);
    a finished request frees its chunks. An iteration reads the weights and every running request's KV
    (memory-bound decode: ``ns_per_chunk`` per chunk read). Weights are live from the start; requests still
    running at the end free their KV after the last op (the trace loops). ``requests``: (arrival op, prompt
    tokens, output tokens) of each request instead of the Poisson arrivals (tests)."""
    if n_ops < 1 or weights_bytes < 0 or kv_capacity_bytes < CHUNK_BYTES or kv_bytes_per_token < 1:
        raise SimConfigError("kv_serving needs n_ops >= 1, a KV capacity of at least one chunk and "
                             "kv_bytes_per_token >= 1", field="workload")
    if not arrivals_per_op >= 0:
        raise SimConfigError(f"arrivals_per_op {arrivals_per_op!r} must be >= 0", field="workload")
    rng = np.random.default_rng(seed)
    w = _chunks(weights_bytes) if weights_bytes else 0
    cap = kv_capacity_bytes // CHUNK_BYTES
    alloc: list[int] = [-1] * w
    free: list[int] = [-1] * w

    def need(tokens: int) -> int:
        return -(-tokens * kv_bytes_per_token // CHUNK_BYTES)

    waiting: list[tuple[int, int]] = []
    running: list[dict[str, Any]] = []
    reserved = 0
    rows: list[npt.NDArray[np.int64]] = []
    modes: list[npt.NDArray[np.uint8]] = []
    times: list[int] = []
    tokens_out: list[int] = []
    weights = np.arange(w, dtype=np.int64)
    given: dict[int, list[tuple[int, int]]] = {}
    for at, p, o in requests or ():
        if p < 0 or o < 1 or need(p + o) > cap:
            raise SimConfigError(f"request ({at}, {p}, {o}): needs a prompt >= 0, an output >= 1 and KV that fits "
                                 f"the capacity", field="workload.requests")
        given.setdefault(int(at), []).append((int(p), int(o)))
    for k in range(n_ops):
        if requests is not None:
            waiting += given.get(k, [])
        else:
            for _ in range(int(rng.poisson(arrivals_per_op))):
                waiting.append((int(_lengths(rng, prompt_mean, 1)[0]), int(_lengths(rng, output_mean, 1)[0])))
        prefill = 0
        while waiting and reserved + need(sum(waiting[0])) <= cap:
            p, o = waiting.pop(0)
            reserved += need(p + o)
            r: dict[str, Any] = {"ctx": p, "left": o, "chunks": [], "res": need(p + o)}
            running.append(r)
            prefill += p
        new: list[int] = []
        old: list[int] = []
        done: list[dict[str, Any]] = []
        for r in running:
            r["ctx"] += 1
            r["left"] -= 1
            while len(r["chunks"]) < need(r["ctx"]):
                c = len(alloc)
                alloc.append(k)
                free.append(-1)
                r["chunks"].append(c)
                new.append(c)
            old += [c for c in r["chunks"] if alloc[c] != k]
            if r["left"] == 0:
                done.append(r)
        for r in done:
            for c in r["chunks"]:
                free[c] = k
            reserved -= r["res"]
            running.remove(r)
        rows.append(np.concatenate([weights, np.array(old, dtype=np.int64), np.array(new, dtype=np.int64)]))
        modes.append(np.concatenate([np.zeros(w + len(old), dtype=np.uint8), np.ones(len(new), dtype=np.uint8)]))
        times.append(max(1, len(rows[-1]) * ns_per_chunk + prefill * prefill_ns_per_token))
        tokens_out.append(len(running) + len(done))
    for r in running:
        for c in r["chunks"]:
            free[c] = n_ops - 1
    base = make_trace(name, rows, np.array(times, dtype=np.uint64), len(alloc), modes=np.concatenate(modes),
                      alloc_op=np.array(alloc, dtype=np.int32), free_op=np.array(free, dtype=np.int32))
    return _comm(base, op_tokens=np.array(tokens_out, dtype=np.uint32),
                 info=(("weights_chunks", float(w)), ("kv_capacity_chunks", float(cap)),
                       ("kv_bytes_per_token", float(kv_bytes_per_token))))


def kv_chunks_live(trace: SimTrace) -> npt.NDArray[np.int64]:
    """Live chunks of a trace during each op (allocated at or before it, not freed before it)."""
    n = int(trace.op_time_ns.shape[0])
    delta = np.zeros(n + 1, dtype=np.int64)
    a = np.asarray(trace.chunk_alloc_op, dtype=np.int64)
    f = np.asarray(trace.chunk_free_op, dtype=np.int64)
    np.add.at(delta, np.where(a < 0, 0, a), 1)
    np.add.at(delta, f[f >= 0] + 1, -1)
    return np.cumsum(delta)[:n]


def alltoall_bytes_per_peer(tokens: int, top_k: int, hidden: int, dtype_bytes: int, ranks: int) -> int:
    """Expert-parallel all-to-all (GShard, Lepikhin et al. 2021; Switch Transformer, Fedus et al. JMLR 2022):
    a rank dispatches ``tokens x top_k`` token copies of ``hidden x dtype_bytes`` bytes, spread over the
    ``ranks`` ranks' experts (balanced routing in expectation): this much goes to each other rank, and as much
    comes back in the combine."""
    return tokens * top_k * hidden * dtype_bytes // ranks


def moe_expert_parallel(n_layers: int = 4, n_experts: int = 64, expert_chunks: int = 2, shared_chunks: int = 4,
                 iterations: int = 8, tokens: int = 32, top_k: int = 8, hidden: int = 7168, dtype_bytes: int = 2,
                 ep_ranks: int = 4, zipf_a: float = 1.2, drift: float = 1.0, ns_per_chunk: int = DEFAULT_NS_PER_CHUNK,
                 seed: int = 5, name: str = "moe") -> CommTrace:
    """Expert-parallel mixture-of-experts on one rank: ``n_experts`` local experts per layer
    (``expert_chunks`` each), ``shared_chunks`` of attention weights per layer. Per iteration and layer,
    forward: attention, all-to-all dispatch, the experts, all-to-all combine; backward the same in reverse
    (experts and attention read-modify-write their gradients).

    Routing: each layer's ``tokens x top_k`` assignments are drawn from the experts' popularity, which starts
    Zipf-skewed (``zipf_a``) and drifts as a random walk of its log (``drift`` per iteration): skewed and
    shifting expert load, as measured in MoE training (FasterMoE, He et al. PPoPP'22, its dynamic expert selection;
    SmartMoE, Zhai et al. ATC'23). An expert that gets no token is not read. The dispatch and combine ops
    move :func:`alltoall_bytes_per_peer` to and from each other rank (``op_link_bytes``; give the tenant
    ``link_send`` = ``link_recv`` = the other ranks' GPUs); the popularity is :func:`moe_popularity`'s.

    Defaults: DeepSeek-V3's router (256 routed experts, top-8, hidden 7168, bf16; DeepSeek-AI, arXiv
    2412.19437) over 4 expert-parallel ranks (64 experts each), 32 tokens per rank and iteration (a decode or
    small fine-tuning micro-batch, so that cold experts go unread); 4 layers of 2-chunk experts: the scaled
    sizes of the matrix's other synthetic harvesters (an assumption, like their ``ns_per_chunk``)."""
    if min(n_layers, n_experts, expert_chunks, iterations, tokens, top_k, hidden, dtype_bytes, ep_ranks) < 1:
        raise SimConfigError("moe_expert_parallel's sizes must be >= 1", field="workload")
    pop = moe_popularity(n_layers, n_experts, iterations, zipf_a, drift, seed)
    rng = np.random.default_rng(seed + 1)
    per_layer = shared_chunks + n_experts * expert_chunks
    a2a = alltoall_bytes_per_peer(tokens, top_k, hidden, dtype_bytes, ep_ranks)
    rows: list[npt.NDArray[np.int64]] = []
    modes: list[npt.NDArray[np.uint8]] = []
    link: list[int] = []
    empty = np.zeros(0, dtype=np.int64)

    def op(r: npt.NDArray[np.int64], mode: int, nbytes: int = 0) -> None:
        rows.append(r)
        modes.append(np.full(len(r), mode, dtype=np.uint8))
        link.append(nbytes)

    for it in range(iterations):
        routed = [np.flatnonzero(rng.multinomial(tokens * top_k, pop[it, layer])) for layer in range(n_layers)]

        def experts(layer: int, routed: list[npt.NDArray[np.int64]] = routed) -> npt.NDArray[np.int64]:
            e = routed[layer]
            base = layer * per_layer + shared_chunks
            return (base + e[:, None] * expert_chunks + np.arange(expert_chunks)[None, :]).reshape(-1)

        for layer in range(n_layers):
            op(np.arange(layer * per_layer, layer * per_layer + shared_chunks, dtype=np.int64), 0)
            op(empty, 0, a2a)
            op(experts(layer), 0)
            op(empty, 0, a2a)
        for layer in reversed(range(n_layers)):
            op(empty, 0, a2a)
            op(experts(layer), 2)
            op(empty, 0, a2a)
            op(np.arange(layer * per_layer, layer * per_layer + shared_chunks, dtype=np.int64), 2)
    times = np.array([max(1, len(r)) * ns_per_chunk for r in rows], dtype=np.uint64)
    base = make_trace(name, rows, times, n_layers * per_layer, modes=np.concatenate(modes))
    return _comm(base, op_link_bytes=np.array(link, dtype=np.uint64),
                 info=(("alltoall_bytes_per_peer", float(a2a)), ("ep_ranks", float(ep_ranks))))


def moe_popularity(n_layers: int, n_experts: int, iterations: int, zipf_a: float = 1.1, drift: float = 0.5,
                   seed: int = 5) -> npt.NDArray[np.float64]:
    """Expert popularity [iteration, layer, expert] (rows sum to 1): Zipf(``zipf_a``) over a random ranking
    per layer, its log drifting by N(0, ``drift``) per iteration."""
    rng = np.random.default_rng(seed)
    logp = np.empty((iterations, n_layers, n_experts))
    ranks = np.argsort(rng.random((n_layers, n_experts)), axis=1) + 1
    z = -zipf_a * np.log(ranks.astype(np.float64))
    for it in range(iterations):
        logp[it] = z
        z = z + rng.normal(0.0, drift, size=z.shape)
    p = np.exp(logp - logp.max(axis=2, keepdims=True))
    return np.asarray(p / p.sum(axis=2, keepdims=True), dtype=np.float64)


def ring_allreduce_bytes(nbytes: int, ranks: int) -> int:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``nbytes``: reduce-scatter then all-gather,
    ``ranks - 1`` steps of ``nbytes / ranks`` each: 2 (ranks - 1) / ranks x nbytes (NCCL's ring algorithm;
    the "algorithm bandwidth" vs "bus bandwidth" factor of nccl-tests' doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise SimConfigError(f"a ring needs at least one rank, not {ranks}", field="ranks")
    return 2 * (ranks - 1) * nbytes // ranks


#: PyTorch DDP's default gradient bucket (``bucket_cap_mb`` = 25 MiB): one all-reduce per bucket, overlapped
#: with the backward pass (Li et al., "PyTorch Distributed", VLDB'20).
DDP_BUCKET_BYTES = 25 * (1 << 20)


def allreduce_training(state_bytes: int, grad_bytes: int, n_ops: int, ranks: int, op_time_ns: int = 1_000_000,
                       ops_per_step: int = 20, bucket_bytes: int = DDP_BUCKET_BYTES, chunks_per_op: int = 4,
                       name: str = "allreduce") -> CommTrace:
    """A data-parallel training rank: ``state_bytes`` (weights, gradients, optimizer state) read in turn,
    ``ops_per_step`` ops a step; the step's gradients (``grad_bytes``) are all-reduced over a ring of ``ranks``
    in buckets of ``bucket_bytes``, one per op over the step's last ops (DDP's overlap with the backward pass).
    An op with a bucket sends :func:`ring_allreduce_bytes` of it to the ring's next GPU and receives as much
    from the previous one (``link_send`` / ``link_recv``)."""
    if n_ops < 1 or ops_per_step < 1 or ranks < 2 or bucket_bytes < 1 or grad_bytes < 0:
        raise SimConfigError("allreduce_training needs n_ops, ops_per_step >= 1, ranks >= 2, bucket_bytes >= 1",
                             field="workload")
    base = rising(state_bytes, state_bytes, n_ops, n_ops, op_time_ns=op_time_ns, chunks_per_op=chunks_per_op,
                  name=name)
    n_buckets = -(-grad_bytes // bucket_bytes) if grad_bytes else 0
    sizes = [min(bucket_bytes, grad_bytes - i * bucket_bytes) for i in range(n_buckets)]
    per_step = np.zeros(ops_per_step, dtype=np.int64)
    for i, b in enumerate(sizes):        # the last buckets to the last ops; more buckets than ops: they share
        per_step[ops_per_step - 1 - (i % ops_per_step)] += ring_allreduce_bytes(b, ranks)
    link = np.resize(per_step, n_ops).astype(np.uint64)
    return _comm(base, op_link_bytes=link,
                 info=(("grad_bytes", float(grad_bytes)), ("ranks", float(ranks)),
                       ("ring_bytes_per_step", float(per_step.sum()))))
