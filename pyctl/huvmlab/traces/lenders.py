"""Lender footprints: the co-runners whose spare GPU memory a harvester borrows.

Four shapes, sized as fractions of the lender GPU's memory (default 16 GiB, a V100):

* ``idle``: a CUDA context and allocator workspace (3 %), touched once, then idle phases.
* ``steady``: a small inference-style job (14 %): weights read layer by layer every iteration,
  activations written and read; constant footprint.
* ``rising``: as ``steady`` for the first half, then its memory need rises to 69 % (a larger batch, a
  second model loaded): a new buffer is allocated mid-run and touched every iteration after, which
  forces a harvester to give memory back.
* ``spiky``: a footprint that rises and falls: 6 % (1 GiB of 16) throughout, plus 62 % (10 GiB) allocated
  for ``iter_ms`` (0.5 s) of every ``2 * iter_ms``, then freed with ``torch.cuda.empty_cache()`` (its
  segments go back to the device). The trace is one period: loop it (``steps = 0`` in an experiment runs
  it until the harvesters finish, ``steps = N`` N times).

Ops carry a fixed duration (``ops.fixed_ns``), independent of the GPU preset: each iteration is
``LAYERS`` ops of ``iter_ms / LAYERS``. A lender trace is meant to be replayed once, not looped; its
length (``seconds``) should cover the harvester's run.
"""

from __future__ import annotations

from .builder import Builder
from .schema import MODE_READ, MODE_RMW, MODE_WRITE_NEW, Tables

LAYERS = 8
KINDS = ("idle", "steady", "rising", "spiky")


def lender_trace(kind: str, *, mem_bytes: int = 16 << 30, seconds: float = 60.0, iter_ms: float = 500.0) -> Tables:
    if kind not in KINDS:
        raise ValueError(f"unknown lender {kind!r}; known: {', '.join(KINDS)}")
    b = Builder()
    iters = max(2, int(seconds * 1000 / iter_ms))
    op_ns = int(iter_ms * 1e6 / LAYERS)
    meta: dict[str, object] = {"kind": "lender", "model": f"lender-{kind}", "name": f"lender-{kind}",
                               "mem_bytes": mem_bytes, "seconds": seconds, "iter_ms": iter_ms, "iterations": iters}
    if kind == "spiky":
        return _spiky(b, meta, mem_bytes, 2 * iter_ms)
    ctx = b.storage(int(mem_bytes * 0.03), "workspace", "uint8", "context", before_op=-1)
    if kind == "idle":
        b.op("lender.init", "init", fixed_ns=op_ns)
        b.access_all(ctx, MODE_RMW)
        for _ in range(iters):
            b.op("lender.idle", "idle", fixed_ns=int(iter_ms * 1e6))
        return b.tables(meta)
    wbytes = int(mem_bytes * 0.12) // LAYERS
    weights = [b.storage(wbytes, "param", "float16", f"layer{i}", before_op=-1) for i in range(LAYERS)]
    act = [b.storage(int(mem_bytes * 0.01), "other", "float16", f"act{i}", before_op=-1) for i in range(2)]
    extra: list[int] = []
    rise_at = iters // 2
    meta["rise_at_iteration"] = rise_at if kind == "rising" else -1
    for it in range(iters):
        if kind == "rising" and it == rise_at:
            ebytes = int(mem_bytes * 0.55) // LAYERS
            extra = [b.storage(ebytes, "other", "float16", f"grown{i}") for i in range(LAYERS)]
            meta["rise_at_op"] = len(b.o)
        for layer in range(LAYERS):
            b.op("lender.layer", "grown" if extra else "steady", fixed_ns=op_ns)
            b.access_all(weights[layer], MODE_READ)
            b.access_all(act[layer % 2], MODE_READ)
            b.access_all(act[(layer + 1) % 2], MODE_WRITE_NEW)
            if extra:
                b.access_all(extra[layer], MODE_RMW if it > rise_at else MODE_WRITE_NEW)
        if it == 0:
            b.access_all(ctx, MODE_RMW)
    return b.tables(meta)


def _spiky(b: Builder, meta: dict[str, object], mem_bytes: int, period_ms: float) -> Tables:
    """One period: the base (6 %) read every op; the spike (62 %) allocated before the first op, written and
    read for half the period, then freed and the cache emptied."""
    op_ns = int(period_ms * 1e6 / LAYERS)
    meta.update(seconds=period_ms / 1000, iter_ms=period_ms, iterations=1, loop=True)
    base = [b.storage(int(mem_bytes * 0.06) // LAYERS, "param", "float16", f"base{i}", before_op=-1)
            for i in range(LAYERS)]
    sbytes = int(mem_bytes * 0.62) // (LAYERS // 2)
    spike = [b.storage(sbytes, "other", "float16", f"spike{i}") for i in range(LAYERS // 2)]
    for layer in range(LAYERS):
        b.op("lender.layer", "spike" if layer < LAYERS // 2 else "base", fixed_ns=op_ns)
        b.access_all(base[layer], MODE_READ)
        if layer < LAYERS // 2:
            b.access_all(spike[layer], MODE_WRITE_NEW)
            b.access_all(spike[(layer + 1) % (LAYERS // 2)], MODE_READ if layer + 1 < LAYERS // 2 else
                         MODE_RMW)
        if layer == LAYERS // 2 - 1:
            for sid in spike:
                b.free(sid)
            b.empty_cache()
    return b.tables(meta)
