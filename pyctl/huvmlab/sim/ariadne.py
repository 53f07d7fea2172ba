"""ARIADNE's stock-UVM benchmark mix as chunk traces (issue 24: the stock rows of ``make calibration``).

ARIADNE (Shin, Bang, Park, Kim: "ARIADNE: Adaptive UVM Management for Efficient GPU Memory Oversubscription",
IEEE; §III-A, Fig 2b; §VII-A, Table I) measures stock UVM (open driver 535.86, RTX A5000, PCIe 4 x16) on ten
benchmarks, each with a 4 GB footprint, GPU memory reserved with cudaMalloc down to footprint / ratio, and
reports the **geomean** of each benchmark's execution time normalised to its run without oversubscription:
33.2x at 200 %, 60.7x at 300 %. Table I: 2DC, ATAX, BICG, GEMM, GEMV, MVT (Polybench), XSB (XSBench), BFS,
NW (Rodinia), HEL (HeCBench). The paper groups them: ATAX, BICG, GEMV, MVT sparse (Sharing Degree 1: one
SM per 2 MiB block at a time); GEMM, HEL dense, with working sets well below their footprints (no thrashing
at 175 %, thrashing at 300 %); BFS, NW, XSB mixed.

Each kernel below is the benchmark's loop nest at 2 MiB granularity, from the suites' public sources (thread
mapping and loop order of Polybench-GPU's CUDA kernels, Rodinia's ``bfs`` and ``nw``, HeCBench's
``hellinger``), in 4 GiB, every buffer initialised by the CPU (host-resident before the first kernel). The
baseline is the same trace without oversubscription (stock, data migrated on first touch), as ARIADNE's.
Each touch names the 64 KiB groups of its block the loop nest reads or writes (``touch_pages``, docs/simulator.md
"Partial-block migration"): a sparse sweep page ``k`` of every row in the block, a GEMM tile its 8 rows of A and
C, an NW diagonal block the 17 or 16 rows of its score and reference tiles; coalesced passes and GEMM's B the
whole block. **XSB** is left out: its 15 M lookups each read a random row of a ~3.8 GB index grid, one random block per
lookup, which at chunk granularity costs a whole block's service per miss where the GPU fetches a few KB;
modelled so, it would say nothing about the real benchmark. The mix's geomean is over the other nine.

Compute: memory-bound parts at the A5000's 768 GB/s for the bytes a touch really reads (2 MiB in 2.73 µs);
GEMM and HEL at a quarter of the A5000's 27.8 TFLOPS FP32 (NVIDIA RTX A5000 data sheet; the quarter is an
assumption for Polybench's untiled kernels).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ..traces.trace import SimTrace
from .config import CHUNK_BYTES, GIB
from .workloads import make_trace

I64 = npt.NDArray[np.int64]

FOOTPRINT = 4 * GIB
N_CHUNKS = FOOTPRINT // CHUNK_BYTES
#: 2 MiB read at the RTX A5000's 768 GB/s
NS_PER_CHUNK = 2_730
#: GEMM-shaped kernels: a quarter of the A5000's 27.8 TFLOPS FP32 (assumption: untiled Polybench kernels)
FLOPS_PER_S = 27.8e12 / 4
PAGE = 4096
#: Table I (ARIADNE): the ten benchmarks and the suite each comes from; None: not modelled (module docstring)
TABLE_I: dict[str, str] = {
    "2DC": "Polybench", "ATAX": "Polybench", "BICG": "Polybench", "GEMM": "Polybench", "GEMV": "Polybench",
    "MVT": "Polybench", "XSB": "XSBench", "BFS": "Rodinia", "HEL": "HeCBench", "NW": "Rodinia",
}
NOT_MODELLED = ("XSB",)


#: 64 KiB groups per 2 MiB block (the simulator's touch_pages bits)
GROUP = 64 * 1024
GROUPS = CHUNK_BYTES // GROUP
ALL = (1 << GROUPS) - 1


def span_masks(lo: I64, hi: I64) -> tuple[I64, I64]:
    """The blocks and 64 KiB group masks the byte ranges ``[lo, hi)`` cover (unique blocks, masks OR'ed)."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    g0, g1 = lo // GROUP, (hi - 1) // GROUP
    cnt = g1 - g0 + 1
    g = np.repeat(g0 - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()), dtype=np.int64)
    blocks, inv = np.unique(g // GROUPS, return_inverse=True)
    mask = np.zeros(len(blocks), dtype=np.int64)
    np.bitwise_or.at(mask, inv, np.left_shift(1, g % GROUPS))
    return blocks, mask


class _Ops:
    def __init__(self) -> None:
        self.rows: list[I64] = []
        self.modes: list[npt.NDArray[np.uint8]] = []
        self.pages: list[I64] = []
        self.times: list[int] = []

    def add(self, reads: I64, writes: I64 | None = None, ns: float = 0.0, write_mode: int = 2,
            read_masks: I64 | None = None, write_masks: I64 | None = None) -> None:
        """One op reading the blocks ``reads`` and writing ``writes`` (a block in both is written), each at its
        64 KiB groups (``*_masks``, aligned with the blocks; None: whole blocks)."""
        rd = np.asarray(reads, dtype=np.int64)
        w = np.zeros(0, dtype=np.int64) if writes is None else np.asarray(writes, dtype=np.int64)
        rm = np.full(len(rd), ALL, dtype=np.int64) if read_masks is None else np.asarray(read_masks, np.int64)
        wm = np.full(len(w), ALL, dtype=np.int64) if write_masks is None else np.asarray(write_masks, np.int64)
        r = np.setdiff1d(rd, w)
        rmask = np.zeros(len(r), dtype=np.int64)
        keep = np.isin(rd, r)
        np.bitwise_or.at(rmask, np.searchsorted(r, rd[keep]), rm[keep])
        wmask = wm.copy()
        both = np.isin(rd, w)
        if both.any():
            pos = {int(b): i for i, b in enumerate(w)}
            for b, m in zip(rd[both], rm[both], strict=True):
                wmask[pos[int(b)]] |= m
        self.rows.append(np.concatenate([r, w]))
        self.modes.append(np.concatenate([np.zeros(len(r), dtype=np.uint8), np.full(len(w), write_mode, np.uint8)]))
        self.pages.append(np.concatenate([rmask, wmask]))
        self.times.append(max(1, int(ns)))

    def trace(self, name: str) -> SimTrace:
        return make_trace(name, self.rows, np.array(self.times, dtype=np.uint64), N_CHUNKS,
                          modes=np.concatenate(self.modes), pages=np.concatenate(self.pages).astype(np.uint32))


def _dense(ops: _Ops, base: int, n: int, per_op: int = 16, out: int | None = None) -> None:
    """One coalesced pass over chunks [base, base+n) (threads along a row: every byte read once), optionally
    writing the matching chunk of an output at ``out``."""
    for c in range(0, n, per_op):
        r = np.arange(base + c, base + min(n, c + per_op), dtype=np.int64)
        w = None if out is None else r - base + out
        ops.add(r, w, ns=len(r) * NS_PER_CHUNK * (1 if w is None else 2), write_mode=1)


def sweep_masks(n: int, row_bytes: int, k: int) -> I64:
    """Sweep ``k`` of :func:`_sparse_sweeps` over a matrix of ``n`` blocks: per block, the 64 KiB groups holding
    page ``k`` (bytes ``[k, k + 1)`` x 4 KB) of its rows."""
    rows = n * CHUNK_BYTES // row_bytes
    lo = np.arange(rows, dtype=np.int64) * row_bytes + k * PAGE
    blocks, mask = span_masks(lo, lo + PAGE)
    out = np.zeros(n, dtype=np.int64)
    keep = blocks < n
    out[blocks[keep]] = mask[keep]
    return out


def _sparse_sweeps(ops: _Ops, bases: list[int], n: int, row_bytes: int, per_op: int = 64) -> None:
    """Thread per row, each looping over its row: at any moment every row is at about the same column, so
    the kernel sweeps all of the matrix's blocks once per 4 KB page of a row, each touch reading page ``k``
    of each of the block's rows (:func:`sweep_masks`; interleaved over ``bases``: GESUMMV reads A and B row
    by row together)."""
    sweeps = max(1, row_bytes // PAGE)
    frac = PAGE / row_bytes
    for k in range(sweeps):
        masks = sweep_masks(n, row_bytes, k)
        for c in range(0, n, per_op):
            sl = slice(c, min(n, c + per_op))
            idx = np.arange(sl.start, sl.stop, dtype=np.int64)
            r = np.concatenate([idx + b for b in bases])
            m = np.concatenate([masks[sl] for _ in bases])
            live = m != 0
            ops.add(r[live], ns=len(r) * NS_PER_CHUNK * frac, read_masks=m[live])


def two_dc() -> SimTrace:
    """Polybench 2DCONV: a 3x3 stencil, 2D thread blocks walking row strips in order: A read and B written
    once, strip by strip."""
    ops = _Ops()
    half = N_CHUNKS // 2
    _dense(ops, 0, half, out=half)
    return ops.trace("ariadne-2DC")


def _matrix_product(name: str) -> SimTrace:
    """Polybench GEMM (and HeCBench hellinger, the same loop nest with a square root): C = A x B, a thread per
    C element, 32x8 blocks in row-major block order; the resident blocks of one 8-row tile of A read all of
    B's columns down the k loop, so each tile sweeps B once."""
    ops = _Ops()
    per = N_CHUNKS // 3
    a0, b0, c0 = 0, per, 2 * per
    n = int(math.isqrt(per * CHUNK_BYTES // 4))
    tiles = n // 8
    flops_tile = 2.0 * 8 * n * n
    step = 32
    chunks_b = np.arange(b0, b0 + per, dtype=np.int64)
    tile_bytes = 8 * n * 4
    for t in range(tiles):
        # the tile's 8 rows of A (read) and of C (written at the end): their blocks and 64 KiB groups
        lo = np.array([t * tile_bytes])
        a, am = span_masks(a0 * CHUNK_BYTES + lo, a0 * CHUNK_BYTES + lo + tile_bytes)
        c, cm = span_masks(c0 * CHUNK_BYTES + lo, c0 * CHUNK_BYTES + lo + tile_bytes)
        parts = range(0, per, step)
        for k in parts:
            last = k + step >= per
            b = chunks_b[k:k + step]
            ops.add(np.concatenate([a, b]), c if last else None, ns=flops_tile / FLOPS_PER_S * 1e9 / len(parts),
                    read_masks=np.concatenate([am, np.full(len(b), ALL, dtype=np.int64)]),
                    write_masks=cm if last else None)
    return ops.trace(name)


def gemm() -> SimTrace:
    return _matrix_product("ariadne-GEMM")


def hel() -> SimTrace:
    return _matrix_product("ariadne-HEL")


def _square_row_bytes(n_chunks: int) -> int:
    return int(math.isqrt(n_chunks * CHUNK_BYTES // 4)) * 4


def atax() -> SimTrace:
    """Polybench ATAX: tmp = A x (a thread per row: sparse sweeps), then y = A^T tmp (a thread per column:
    one coalesced pass)."""
    ops = _Ops()
    _sparse_sweeps(ops, [0], N_CHUNKS, _square_row_bytes(N_CHUNKS))
    _dense(ops, 0, N_CHUNKS)
    return ops.trace("ariadne-ATAX")


def bicg() -> SimTrace:
    """Polybench BICG: s = A^T r (a thread per column: one coalesced pass), then q = A p (a thread per row)."""
    ops = _Ops()
    _dense(ops, 0, N_CHUNKS)
    _sparse_sweeps(ops, [0], N_CHUNKS, _square_row_bytes(N_CHUNKS))
    return ops.trace("ariadne-BICG")


def mvt() -> SimTrace:
    """Polybench MVT: x1 += A y1 (a thread per row), then x2 += A^T y2 (a thread per column)."""
    ops = _Ops()
    _sparse_sweeps(ops, [0], N_CHUNKS, _square_row_bytes(N_CHUNKS))
    _dense(ops, 0, N_CHUNKS)
    return ops.trace("ariadne-MVT")


def gemv() -> SimTrace:
    """Polybench GESUMMV ("scalar, vector and matrix multiplication"): y = alpha A x + beta B x, a thread per
    row reading its rows of A and B together."""
    ops = _Ops()
    half = N_CHUNKS // 2
    _sparse_sweeps(ops, [0, half], half, _square_row_bytes(half))
    return ops.trace("ariadne-GEMV")


def nw() -> SimTrace:
    """Rodinia NW: two (N+1)^2 int matrices (scores and reference), 16x16 blocks computed one anti-diagonal per
    kernel launch, the upper-left triangle then the lower-right: a diagonal reads a 16-row strip of both
    matrices for every block on it."""
    ops = _Ops()
    half = N_CHUNKS // 2
    n = _square_row_bytes(half) // 4
    nb = n // 16
    per_op = 64
    block_bytes = (17 * 17 + 16 * 16) * 4
    row = np.arange(17, dtype=np.int64)
    for d in range(2 * nb - 1):
        lo, hi = max(0, d - nb + 1), min(d, nb - 1)
        for b0 in range(lo, hi + 1, per_op):
            i = np.arange(b0, min(hi + 1, b0 + per_op), dtype=np.int64)[:, None]
            j = d - i
            # block (i, j) reads its 17 x 17 score tile (the halo row and column included) and its 16 x 16
            # reference tile, and writes the score tile's 16 x 16 interior: 68 or 64 bytes of each row
            s_lo = (((16 * i + row) * n + 16 * j) * 4).reshape(-1)
            r_lo = (((16 * i + 1 + row[:16]) * n + 16 * j + 1) * 4).reshape(-1)
            score, sm = span_masks(s_lo, s_lo + 68)
            ref, rm = span_masks(r_lo, r_lo + 64)
            ops.add(ref[ref < half] + half, score[score < half], ns=i.size * block_bytes / CHUNK_BYTES * NS_PER_CHUNK,
                    read_masks=rm[ref < half], write_masks=sm[score < half])
    return ops.trace("ariadne-NW")


def bfs() -> SimTrace:
    """Rodinia BFS (:func:`huvm.sim.traversal.rodinia_bfs_trace`)."""
    from .traversal import rodinia_bfs_trace

    return rodinia_bfs_trace(FOOTPRINT, ns_per_chunk=NS_PER_CHUNK)


KERNELS = {"2DC": two_dc, "ATAX": atax, "BICG": bicg, "GEMM": gemm, "GEMV": gemv, "MVT": mvt, "BFS": bfs,
           "HEL": hel, "NW": nw}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
