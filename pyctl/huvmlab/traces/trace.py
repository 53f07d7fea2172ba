"""The loaded, validated trace and its compact simulator form."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from huvm.jsonout import TraceFacts

from .chunks import allocated_bytes
from .roofline import PRESETS, op_times_ns
from .schema import CHUNK_BYTES, CHUNK_SHIFT, Tables, read_tables


@dataclass(frozen=True)
class SimTrace:
    """Compact, numpy-only form of one tenant's trace for the C simulator (docs/traces.md).

    Ops run in order on one stream. Op ``i`` computes for ``op_time_ns[i]`` and touches the chunks
    ``touch_chunk[op_first_touch[i]:op_first_touch[i+1]]`` (each once, inputs first) with the matching
    ``touch_mode`` (0 read, 1 write of new data, 2 read-modify-write). Chunk ids are 2 MiB units of this
    tenant's address space, ``0 .. n_chunks-1``. Chunk ``c`` is reserved (its allocator segment is
    cudaMalloc'ed) before op ``chunk_alloc_op[c]`` runs (-1: before the trace starts) and released
    after op ``chunk_free_op[c]`` (-1: never: the caching allocator keeps its segments unless the trace empties
    its cache, ``meta["empty_cache_ops"]``).
    """

    name: str
    gpu_preset: str
    op_time_ns: npt.NDArray[np.uint64]
    op_first_touch: npt.NDArray[np.uint32]
    touch_chunk: npt.NDArray[np.uint32]
    touch_mode: npt.NDArray[np.uint8]
    chunk_alloc_op: npt.NDArray[np.int32]
    chunk_free_op: npt.NDArray[np.int32]
    peak_live_bytes: int
    #: per touch, the 64 KiB groups of its 2 MiB block it reads or writes (bit k: bytes [k, k + 1) x 64 KiB;
    #: docs/simulator.md "Partial-block migration"); None: every touch is the whole block
    touch_pages: npt.NDArray[np.uint32] | None = None

    @property
    def n_ops(self) -> int:
        return int(self.op_time_ns.shape[0])

    @property
    def n_chunks(self) -> int:
        return int(self.chunk_alloc_op.shape[0])

    @property
    def n_touches(self) -> int:
        return int(self.touch_chunk.shape[0])

    @property
    def footprint_bytes(self) -> int:
        """Reserved bytes (all chunks) = the tenant's device footprint without oversubscription."""
        return self.n_chunks * CHUNK_BYTES


#: A trace's summary (``huvmctl trace info``): the control plane's JSON model, declared once there.
TraceInfo = TraceFacts


class Trace:
    """A validated trace (see :func:`huvmlab.traces.load`)."""

    def __init__(self, tables: Tables, path: Path | None = None) -> None:
        self.tables = tables
        self.path = path

    @classmethod
    def load(cls, path: Path | str) -> Trace:
        p = Path(path)
        return cls(read_tables(p), p)

    @property
    def meta(self) -> dict[str, Any]:
        return self.tables.meta

    @property
    def name(self) -> str:
        return str(self.meta.get("name", self.path.name if self.path else "trace"))

    @property
    def n_ops(self) -> int:
        return self.tables.n_ops

    @property
    def n_chunks(self) -> int:
        t = self.tables
        if not len(t.g_base):
            return 0
        return int((t.g_base[-1] + t.g_nbytes[-1] + CHUNK_BYTES - 1) >> CHUNK_SHIFT)

    @property
    def peak_live_bytes(self) -> int:
        lb = self.tables.o_live_bytes
        return int(lb.max()) if len(lb) else 0

    @property
    def allocator_peak_bytes(self) -> int:
        """The caching allocator's peak allocated bytes (:func:`huvmlab.traces.chunks.allocated_bytes`): what
        ``torch.cuda.max_memory_allocated`` reports for this step, the live bytes plus the blocks' rounding."""
        ab = allocated_bytes(self.tables)
        return int(ab.max()) if len(ab) else 0

    @property
    def flops(self) -> int:
        return int(self.tables.o_flops.sum())

    def static_bytes(self, kinds: tuple[str, ...] = ("param", "grad", "optstate", "buffer")) -> int:
        """Bytes of storages of the given kinds (default: the persistent training state)."""
        t = self.tables
        sel = np.array([k in kinds for k in t.s_kind], dtype=bool)
        return int(t.s_nbytes[sel].sum()) if len(sel) else 0

    def op_times_ns(self, gpu_preset: str) -> npt.NDArray[np.uint64]:
        t = self.tables
        return op_times_ns(gpu_preset, t.o_name, t.o_dtype, t.o_flops, t.o_bytes, t.o_fixed_ns)

    def to_sim_events(self, gpu_preset: str) -> SimTrace:
        t = self.tables
        n_ops = t.n_ops
        counts = np.bincount(t.c_op, minlength=n_ops) if len(t.c_op) else np.zeros(n_ops, dtype=np.int64)
        first = np.zeros(n_ops + 1, dtype=np.uint32)
        first[1:] = np.cumsum(counts)
        n_chunks = self.n_chunks
        calloc = np.full(n_chunks, -1, dtype=np.int32)
        cfree = np.full(n_chunks, -1, dtype=np.int32)
        for base, nb, op, fop in zip(t.g_base.tolist(), t.g_nbytes.tolist(), t.g_alloc_op.tolist(),
                                     t.segment_free_ops().tolist(), strict=True):
            calloc[base >> CHUNK_SHIFT:(base + nb + CHUNK_BYTES - 1) >> CHUNK_SHIFT] = op
            cfree[base >> CHUNK_SHIFT:(base + nb + CHUNK_BYTES - 1) >> CHUNK_SHIFT] = fop
        return SimTrace(
            name=self.name,
            gpu_preset=gpu_preset,
            op_time_ns=self.op_times_ns(gpu_preset),
            op_first_touch=first,
            touch_chunk=t.c_chunk.astype(np.uint32),
            touch_mode=t.c_mode.astype(np.uint8),
            chunk_alloc_op=calloc,
            chunk_free_op=cfree,
            peak_live_bytes=self.peak_live_bytes,
        )

    def info(self) -> TraceInfo:
        t = self.tables
        size = 0
        if self.path is not None and self.path.is_dir():
            size = sum(f.stat().st_size for f in sorted(self.path.glob("*.parquet")))
        peak_op = int(np.argmax(t.o_live_bytes)) if t.n_ops else -1
        return TraceInfo(
            path=str(self.path) if self.path else "",
            trace_kind=str(self.meta.get("kind", "?")),
            model=str(self.meta.get("model", "?")),
            size_bytes=size,
            n_ops=t.n_ops,
            n_storages=t.n_storages,
            n_accesses=len(t.a_op),
            n_touches=len(t.c_op),
            n_chunks=self.n_chunks,
            peak_live_bytes=self.peak_live_bytes,
            peak_op=peak_op,
            peak_phase=t.o_phase[peak_op] if peak_op >= 0 else "",
            allocator_peak_bytes=self.allocator_peak_bytes,
            reserved_bytes=self.n_chunks * CHUNK_BYTES,
            static_bytes=self.static_bytes(),
            flops=self.flops,
            params=int(self.meta.get("params", 0)),
            est_time_s={k: float(self.op_times_ns(k).sum()) / 1e9 for k in PRESETS},
            meta=dict(self.meta),
        )


def load(path: Path | str) -> Trace:
    """Load and validate a trace directory; raises :class:`TraceFormatError` when it is malformed."""
    return Trace.load(path)
