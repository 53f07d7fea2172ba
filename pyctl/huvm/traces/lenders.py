"""Lender footprints: the co-runners whose spare GPU memory a harvester borrows.

Three shapes, sized as fractions of the lender GPU's memory (default 16 GiB, a V100):

* ``idle``: a CUDA context and allocator workspace (3 %), touched once, then idle phases.
* ``steady``: a small inference-style job (14 %): weights read layer by layer every iteration,
  activations written and read; constant footprint.
* ``rising``: as ``steady`` for the first half, then its memory need rises to 69 % (a larger batch, a
  second model loaded): a new buffer is allocated mid-run and touched every iteration after, which
  forces a harvester to give memory back.

Ops carry a fixed duration (``ops.fixed_ns``), independent of the GPU preset: each iteration is
``LAYERS`` ops of ``iter_ms / LAYERS``. A lender trace is meant to be replayed once, not looped; its
length (``seconds``) should cover the harvester's run.
"""

from __future__ import annotations

from .builder import Builder
from .schema import MODE_READ, MODE_RMW, MODE_WRITE_NEW, Tables

LAYERS = 8
KINDS = ("idle", "steady", "rising")


def lender_trace(kind: str, *, mem_bytes: int = 16 << 30, seconds: float = 60.0, iter_ms: float = 500.0) -> Tables:
    if kind not in KINDS:
        raise ValueError(f"unknown lender {kind!r}; known: {', '.join(KINDS)}")
    b = Builder()
    iters = max(2, int(seconds * 1000 / iter_ms))
    op_ns = int(iter_ms * 1e6 / LAYERS)
    meta: dict[str, object] = {"kind": "lender", "model": f"lender-{kind}", "name": f"lender-{kind}",
                               "mem_bytes": mem_bytes, "seconds": seconds, "iter_ms": iter_ms, "iterations": iters}
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
