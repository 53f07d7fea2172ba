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
whole block. **XSB** (:func:`xsb`) is XSBench's event-based CUDA lookup kernel on the unionized grid: each
lookup's binary search on the unionized energy grid (the groups it visits), its row of the index grid and, per
nuclide of the sampled material, the group holding that nuclide's two grid points; its 17 M lookups are
simulated as a prefix and extrapolated (:func:`xsb_runtime`). The mix's geomean is over all ten.

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
#: Table I (ARIADNE): the ten benchmarks and the suite each comes from
TABLE_I: dict[str, str] = {
    "2DC": "Polybench", "ATAX": "Polybench", "BICG": "Polybench", "GEMM": "Polybench", "GEMV": "Polybench",
    "MVT": "Polybench", "XSB": "XSBench", "BFS": "Rodinia", "HEL": "HeCBench", "NW": "Rodinia",
}
#: Table I benchmarks not modelled (none since XSB, issue 24)
NOT_MODELLED: tuple[str, ...] = ()


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


# XSBench (Tramm, Siegel, Islam, Schulz: "XSBench - The Development and Verification of a Performance
# Abstraction for Monte Carlo Reactor Analysis", PHYSOR 2014; github.com/ANL-CESAR/XSBench, commit ba08e52,
# cuda/). Shape constants, each from that source:
#: H-M "large": nuclides (cuda/io.cu, read_CLI: ``input.n_isotopes = 355``)
XSB_ISOTOPES = 355
#: H-M "large": grid points per nuclide (cuda/io.cu: ``input.n_gridpoints = 11303``); see :data:`XSB_GRIDPOINTS`
XSB_GRIDPOINTS_LARGE = 11_303
#: event-based lookups by default: 34 per particle x 500,000 particles (cuda/io.cu, read_CLI: ``-m event``
#: sets ``lookups = lookups * particles``)
XSB_LOOKUPS = 34 * 500_000
#: nuclides per material, the 12 H-M materials (cuda/Materials.cu, load_num_nucs, large: fuel 321)
XSB_NUM_NUCS = (321, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9)
#: probability a lookup samples each material (cuda/Simulation.cu, pick_mat: ``dist[]``)
XSB_MAT_DIST = (0.140, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013)
#: bytes: a unionized-grid energy (double), an index-grid entry (int), a NuclideGridPoint (6 doubles:
#: energy and five cross sections; cuda/XSbench_header.cuh)
XSB_EGRID_ENTRY, XSB_INDEX_ENTRY, XSB_POINT = 8, 4, 48
#: grid points per nuclide in 4 GiB: the H-M large data set is n_isotopes x n_gridpoints x (8 + 4 n_isotopes +
#: 48) bytes (cuda/XSutils.cu: ``size_UEG``, ``all_nuclide_grids``), 5.92 GB at 11,303; ARIADNE gives every
#: benchmark a 4 GB footprint, which XSBench's ``-g`` reaches with everything else at "large" (assumption: how
#: ARIADNE sized it is not published): the most points that fit 4 GiB
XSB_GRIDPOINTS = FOOTPRINT // (XSB_ISOTOPES * (XSB_EGRID_ENTRY + XSB_INDEX_ENTRY * XSB_ISOTOPES + XSB_POINT))
#: lookups simulated: a prefix of the 17 M, run at this many and half as many (:func:`xsb_extrapolate`); the
#: half must be past the warm-up, where the run at 100 % has migrated all it will (measured, docs/simulator.md
#: table 1a: the extrapolated slowdowns move by under 0.5 % from 120k/240k to 160k/320k lookups, by 5 % from
#: 80k/160k, where the run at 100 % is still migrating)
XSB_SIM_LOOKUPS = 240_000


def _xsb_mats() -> list[I64]:
    """The nuclide ids of each H-M large material (cuda/Materials.cu, load_mats: fuel's 34 small-core ids then
    ids 68..354; the others listed there)."""
    fuel = [58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7, 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52,
            53, 54, 55, 56, 18, 23, 41] + list(range(68, 68 + 321 - 34))
    water = [24, 41, 4, 5]
    rpv = [19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29, 30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16,
           17]
    refl = [24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 49, 50, 51, 11, 12, 13, 14]
    fa = [24, 41, 4, 5, 63, 64, 65, 66, 67]
    mats = [fuel, [63, 64, 65, 66, 67], water, water, rpv, refl, refl, refl, refl, refl, fa, fa]
    return [np.array(m, dtype=np.int64) for m in mats]


def xsb_layout(gridpoints: int = XSB_GRIDPOINTS) -> dict[str, tuple[int, int]]:
    """Byte ranges ``(lo, hi)`` of XSB's three arrays in the tenant's space: the nuclide grids, the unionized
    energy grid, its index grid (cuda/GridInit.cu builds them in that order)."""
    n_u = XSB_ISOTOPES * gridpoints
    nuc = XSB_ISOTOPES * gridpoints * XSB_POINT
    eg = n_u * XSB_EGRID_ENTRY
    ix = n_u * XSB_ISOTOPES * XSB_INDEX_ENTRY
    return {"nuclide_grids": (0, nuc), "egrid": (nuc, nuc + eg), "index_grid": (nuc + eg, nuc + eg + ix)}


def xsb_lookups(lookups: int, seed: int = 24, gridpoints: int = XSB_GRIDPOINTS) -> tuple[I64, I64, I64]:
    """The byte ranges XSB's first ``lookups`` lookups read: ``(lookup, lo, hi)`` per read, lookups in order.

    A lookup (cuda/Simulation.cu, ``xs_lookup_kernel_baseline``) samples an energy (uniform in [0, 1)) and a
    material (:data:`XSB_MAT_DIST`), binary-searches the unionized grid (``grid_search``: each probe reads one
    double), reads its index-grid row's entry for each nuclide of the material and, per nuclide, the two grid
    points that entry names (``calculate_micro_xs``). Grid energies are uniform random and sorted
    (cuda/GridInit.cu), so the unionized index is about energy x its length and a nuclide's entry about energy x
    ``gridpoints`` (the model uses exactly that)."""
    rng = np.random.default_rng(seed)
    lay = xsb_layout(gridpoints)
    n_u = XSB_ISOTOPES * gridpoints
    # two draws per lookup, lookup by lookup (as the kernel's seed is fast-forwarded 2 per lookup): a shorter run
    # is a prefix of a longer one
    draws = rng.random((lookups, 2))
    energy = draws[:, 0]
    cum = np.cumsum(XSB_MAT_DIST)
    mat = np.minimum(np.searchsorted(cum / cum[-1], draws[:, 1], side="right"), len(cum) - 1)
    target = np.minimum((energy * n_u).astype(np.int64), n_u - 2)
    # grid_search: lowerLimit 0, upperLimit n - 1, probe the middle until the interval is one wide
    lo = np.zeros(lookups, dtype=np.int64)
    hi = np.full(lookups, n_u - 1, dtype=np.int64)
    ids, starts = [], []
    while True:
        live = hi - lo > 1
        if not live.any():
            break
        mid = lo + (hi - lo) // 2
        ids.append(np.flatnonzero(live))
        starts.append(lay["egrid"][0] + mid[live] * XSB_EGRID_ENTRY)
        right = target >= mid
        lo = np.where(live & right, mid, lo)
        hi = np.where(live & ~right, mid, hi)
    search_id = np.concatenate(ids)
    search_lo = np.concatenate(starts)
    # per nuclide of the material: its index-grid entry (row ``target``) and its two grid points
    mats = _xsb_mats()
    nnuc = np.array([len(m) for m in mats], dtype=np.int64)[mat]
    nid = np.repeat(np.arange(lookups, dtype=np.int64), nnuc)
    off = np.arange(int(nnuc.sum()), dtype=np.int64) - np.repeat(np.cumsum(nnuc) - nnuc, nnuc)
    table = np.full((len(mats), max(len(m) for m in mats)), -1, dtype=np.int64)
    for i, m in enumerate(mats):
        table[i, :len(m)] = m
    nuc = table[mat[nid], off]
    point = np.minimum((energy[nid] * gridpoints).astype(np.int64), gridpoints - 2)
    idx_lo = lay["index_grid"][0] + (target[nid] * XSB_ISOTOPES + nuc) * XSB_INDEX_ENTRY
    pt_lo = lay["nuclide_grids"][0] + (nuc * gridpoints + point) * XSB_POINT
    look = np.concatenate([search_id, nid, nid])
    start = np.concatenate([search_lo, idx_lo, pt_lo])
    size = np.concatenate([np.full(len(search_lo), XSB_EGRID_ENTRY), np.full(len(nid), XSB_INDEX_ENTRY),
                           np.full(len(nid), 2 * XSB_POINT)])
    order = np.argsort(look, kind="stable")
    return look[order], start[order], (start + size)[order]


def xsb(lookups: int = XSB_SIM_LOOKUPS, seed: int = 24) -> SimTrace:
    """XSBench's event-based lookups as a trace: one op per lookup, touching the 64 KiB groups it reads
    (:func:`xsb_lookups`), compute at the A5000's memory bandwidth for the bytes read."""
    look, lo, hi = xsb_lookups(lookups, seed)
    g0, g1 = lo // GROUP, (hi - 1) // GROUP
    cnt = g1 - g0 + 1
    g = np.repeat(g0 - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()), dtype=np.int64)
    key = np.repeat(look, cnt) * N_CHUNKS + g // GROUPS
    order = np.argsort(key, kind="stable")
    key, bit = key[order], np.left_shift(1, g % GROUPS)[order]
    head = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    keys = key[head]
    mask = np.bitwise_or.reduceat(bit, head)
    op = keys // N_CHUNKS
    first = np.zeros(lookups + 1, dtype=np.uint32)
    first[1:] = np.cumsum(np.bincount(op, minlength=lookups))
    nbytes = np.bincount(look, weights=(hi - lo).astype(np.float64), minlength=lookups)
    ns = np.maximum(1, (nbytes / CHUNK_BYTES * NS_PER_CHUNK)).astype(np.uint64)
    return SimTrace(name="ariadne-XSB", gpu_preset="synthetic", op_time_ns=ns, op_first_touch=first,
                    touch_chunk=(keys % N_CHUNKS).astype(np.uint32), touch_mode=np.zeros(len(keys), dtype=np.uint8),
                    chunk_alloc_op=np.full(N_CHUNKS, -1, dtype=np.int32),
                    chunk_free_op=np.full(N_CHUNKS, -1, dtype=np.int32), peak_live_bytes=FOOTPRINT,
                    touch_pages=mask.astype(np.uint32))


def xsb_extrapolate(t_half: float, t_full: float, lookups: int = XSB_SIM_LOOKUPS,
                    total: int = XSB_LOOKUPS) -> float:
    """XSB's runtime at ``total`` lookups from its runs of the first ``lookups // 2`` and ``lookups`` lookups
    (``t_half``, ``t_full``): past the warm-up every lookup is drawn from the same distribution, so the runtime
    grows by the same cost per lookup, the one measured between the two prefixes."""
    half = lookups // 2
    return t_full + (t_full - t_half) / (lookups - half) * (total - lookups)


KERNELS = {"2DC": two_dc, "ATAX": atax, "BICG": bicg, "GEMM": gemm, "GEMV": gemv, "MVT": mvt, "XSB": xsb,
           "BFS": bfs, "HEL": hel, "NW": nw}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
