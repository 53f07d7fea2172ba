"""Incremental construction of synthetic traces (graph analytics, lender footprints)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .chunks import finalize
from .schema import Tables


class Builder:
    """Append storages, ops and accesses in execution order, then :meth:`tables`.

    Unlike DNN traces, ops here carry an explicit memory ``traffic`` (DRAM bytes, e.g. with random
    gathers amplified to sector size) used by the roofline instead of the sum of the touched ranges.
    """

    def __init__(self) -> None:
        self.s: list[tuple[int, int, int, str, str, str]] = []  # nbytes, alloc, free, kind, dtype, shape
        self.o: list[tuple[str, str, str, int, int, int]] = []  # name, phase, dtype, flops, traffic, fixed
        self.a: list[tuple[int, int, int, int, int]] = []  # op, sid, offset, nbytes, mode
        self.empty_cache_ops: list[int] = []

    @property
    def cur(self) -> int:
        return len(self.o) - 1

    def storage(self, nbytes: int, kind: str, dtype: str, shape: str, *, before_op: int | None = None) -> int:
        """A new storage; allocated before the next op (or before ``before_op``; -1 = before the trace)."""
        at = len(self.o) if before_op is None else before_op
        self.s.append((int(nbytes), at, -1, kind, dtype, shape))
        return len(self.s) - 1

    def free(self, sid: int) -> None:
        """Free ``sid`` after the current op."""
        nb, al, _, k, dt, sh = self.s[sid]
        self.s[sid] = (nb, al, max(self.cur, al), k, dt, sh)

    def empty_cache(self) -> None:
        """After the current op's frees, release every wholly free segment (``torch.cuda.empty_cache()``):
        the memory goes back to the device, and the footprint falls."""
        if self.cur >= 0 and self.cur not in self.empty_cache_ops:
            self.empty_cache_ops.append(self.cur)

    def op(self, name: str, phase: str, *, traffic: int = 0, flops: int = 0, fixed_ns: int = -1,
           dtype: str = "float32") -> int:
        self.o.append((name, phase, dtype, int(flops), int(traffic), int(fixed_ns)))
        return self.cur

    def access(self, sid: int, offset: int, nbytes: int, mode: int) -> None:
        if nbytes > 0:
            self.a.append((self.cur, sid, int(offset), int(nbytes), mode))

    def access_all(self, sid: int, mode: int) -> None:
        self.access(sid, 0, self.s[sid][0], mode)

    def access_blocks(self, sid: int, touched: npt.NDArray[np.bool_], block: int, mode: int) -> None:
        """Touch the blocks of ``block`` bytes flagged in ``touched``, one access per contiguous run."""
        if not touched.any():
            return
        edge = np.diff(np.concatenate([[0], touched.view(np.int8), [0]]))
        starts = np.flatnonzero(edge == 1)
        ends = np.flatnonzero(edge == -1)
        size = self.s[sid][0]
        for b0, b1 in zip(starts.tolist(), ends.tolist(), strict=True):
            off = b0 * block
            self.access(sid, off, min(b1 * block, size) - off, mode)

    def tables(self, meta: dict[str, Any]) -> Tables:
        n_ops = len(self.o)
        if self.empty_cache_ops:
            meta = {**meta, "empty_cache_ops": list(self.empty_cache_ops)}
        a = np.array(self.a, dtype=np.int64).reshape(-1, 5)
        t = Tables(
            meta=meta,
            s_nbytes=np.array([x[0] for x in self.s], dtype=np.int64),
            s_alloc_op=np.array([x[1] if x[1] < n_ops else -1 for x in self.s], dtype=np.int32),
            s_free_op=np.array([x[2] for x in self.s], dtype=np.int32),
            s_kind=[x[3] for x in self.s],
            s_dtype=[x[4] for x in self.s],
            s_shape=[x[5] for x in self.s],
            s_addr=np.full(len(self.s), -1, dtype=np.int64),
            o_name=[x[0] for x in self.o],
            o_phase=[x[1] for x in self.o],
            o_dtype=[x[2] for x in self.o],
            o_flops=np.array([x[3] for x in self.o], dtype=np.int64),
            o_bytes=np.zeros(n_ops, dtype=np.int64),
            o_live_bytes=np.zeros(n_ops, dtype=np.int64),
            o_fixed_ns=np.array([x[5] for x in self.o], dtype=np.int64),
            a_op=a[:, 0].astype(np.int32),
            a_sid=a[:, 1].astype(np.int32),
            a_offset=a[:, 2].copy(),
            a_nbytes=a[:, 3].copy(),
            a_mode=a[:, 4].astype(np.int8),
            g_base=np.zeros(0, dtype=np.int64), g_nbytes=np.zeros(0, dtype=np.int64),
            g_alloc_op=np.zeros(0, dtype=np.int32),
            c_op=np.zeros(0, dtype=np.int32), c_chunk=np.zeros(0, dtype=np.int32),
            c_mode=np.zeros(0, dtype=np.int8),
        )
        finalize(t)
        t.o_bytes = np.array([x[4] for x in self.o], dtype=np.int64)
        return t
