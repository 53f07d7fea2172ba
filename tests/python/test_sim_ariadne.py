"""ARIADNE's stock-UVM benchmark mix (huvm.sim.ariadne; docs/simulator.md, table 1a): Table I's benchmarks,
each kernel's loop nest at chunk granularity, aggregated as ARIADNE does (geomean of each benchmark's runtime
over its own run without oversubscription)."""

from __future__ import annotations

import math

import numpy as np
from huvmlab.sim import ariadne, calibrate
from huvmlab.sim.config import CHUNK_BYTES


def _ops(tr: object) -> list[np.ndarray]:
    first = np.asarray(tr.op_first_touch, dtype=np.int64)  # type: ignore[attr-defined]
    touch = np.asarray(tr.touch_chunk, dtype=np.int64)  # type: ignore[attr-defined]
    return [touch[first[i]:first[i + 1]] for i in range(len(first) - 1)]


def test_table_i_and_what_is_modelled() -> None:
    assert len(ariadne.TABLE_I) == 10
    assert set(ariadne.KERNELS) == set(ariadne.TABLE_I)
    assert ariadne.NOT_MODELLED == ()
    for k, fn in ariadne.KERNELS.items():
        tr = fn()
        # 4 GiB each (BFS's arrays rounded to whole chunks: within one chunk per array)
        assert abs(tr.chunk_alloc_op.shape[0] - ariadne.N_CHUNKS) <= 6, k


def test_row_threads_sweep_the_matrix_once_per_page_of_a_row() -> None:
    """ATAX: a thread per row touches every block of A once per 4 KB page of its 128 KiB row (32 sweeps),
    then the column pass reads A once more, in order."""
    touches = np.concatenate(_ops(ariadne.atax()))
    counts = np.bincount(touches, minlength=ariadne.N_CHUNKS)
    row = math.isqrt(ariadne.N_CHUNKS * CHUNK_BYTES // 4) * 4
    assert row == 128 * 1024
    assert (counts == row // 4096 + 1).all()
    assert np.array_equal(touches[-ariadne.N_CHUNKS:], np.arange(ariadne.N_CHUNKS))      # then one pass in order


def test_gemm_sweeps_b_once_per_tile_and_nw_walks_the_diagonals() -> None:
    tr = ariadne.gemm()
    per = ariadne.N_CHUNKS // 3
    n = math.isqrt(per * CHUNK_BYTES // 4)
    ops = _ops(tr)
    counts = np.bincount(np.concatenate(ops), minlength=ariadne.N_CHUNKS)
    assert (counts[per:2 * per] == n // 8).all()                     # B: once per 8-row tile of A
    # A: its tile's one block, or two where the tile's 8 rows cross a block boundary, through the k loop
    assert all(1 <= int(((o >= 0) & (o < per)).sum()) <= 2 for o in ops)
    nw = _ops(ariadne.nw())
    half = ariadne.N_CHUNKS // 2
    nb = math.isqrt(half * CHUNK_BYTES // 4) // 16
    # the first diagonal is one block (one block-row of each matrix); the longest reads every block-row
    assert sorted(nw[0].tolist()) == [0, half]
    assert len(np.unique(np.concatenate(nw))) == ariadne.N_CHUNKS
    # chunk 0 holds block-rows 0 and 1 (1448 block-rows over 1024 chunks): diagonals 0..nb-1 and 1..nb
    assert (nb, half) == (1448, 1024) and sum(1 for o in nw if 0 in o.tolist()) == nb + 1


def test_mix_is_aggregated_as_ariadne_does() -> None:
    rows = calibrate.ariadne_slowdowns((1.0, 2.0))
    at100, at200 = rows
    assert all(abs(float(at100[k]) - 1.0) < 1e-9 for k in ariadne.KERNELS)  # type: ignore[arg-type]
    vals = [float(at200[k]) for k in ariadne.KERNELS]  # type: ignore[arg-type]
    assert float(at200["geomean"]) == math.exp(sum(map(math.log, vals)) / 10)  # type: ignore[arg-type]
    assert all(v >= 1.0 for v in vals)
    # the sparse row-thread kernels thrash at any oversubscription; the dense ones do not at 200 %
    assert all(float(at200[k]) > 10 for k in ("ATAX", "BICG", "MVT", "GEMV"))  # type: ignore[arg-type]
    assert all(float(at200[k]) < 2 for k in ("2DC", "GEMM", "HEL"))  # type: ignore[arg-type]


def test_gemm_refaults_b_in_whole_sweeps_under_least_recently_migrated_eviction() -> None:
    """UVM evicts the least recently migrated root chunk, and a GPU touch of a resident block migrates nothing.
    Once memory fills at 200 %, B's chunks (migrated in the first sweep) are the oldest: the first one evicted
    starts one sweep in which each B chunk, faulted back, evicts the next; B then sits behind the A and C chunks
    migrated since, until those are all evicted. So the faults beyond the run at 100 % come in whole sweeps of
    B, a few over the run; at 300 % B alone fills the GPU and faults on nearly every sweep. An eviction that
    followed touches (LRU) would never evict B at 200 %."""
    tr = ariadne.gemm()
    per = ariadne.N_CHUNKS // 3

    def faults(ratio: float) -> int:
        return int(calibrate.mix_result(tr, ratio).tenant(0).faults)

    base = faults(1.0)
    extra = faults(2.0) - base
    assert extra % per == 0 and 1 <= extra // per <= 4, (base, extra)
    sweeps = math.isqrt(per * CHUNK_BYTES // 4) // 8
    assert faults(3.0) - base > per * sweeps // 2


def _pop(m: int) -> int:
    return int(m).bit_count()


def test_extents_are_the_loop_nests_footprints() -> None:
    """touch_pages per kernel (docs/simulator.md "Partial-block migration"): ATAX's row threads read page k of
    each of a block's 16 rows of 128 KiB (k < 16: the even 64 KiB groups, else the odd ones), its column pass
    the whole block; a GEMM tile reads 8 rows of A (8 x 75.6 KB: 10 or 11 groups) and B whole; an NW
    diagonal block reads 16 rows of its reference tile and writes 17 of its score tile (92.7 KB apart: one
    group each)."""
    tr = ariadne.atax()
    pages = np.asarray(tr.touch_pages, dtype=np.int64)
    first = np.asarray(tr.op_first_touch, dtype=np.int64)
    per_sweep = ariadne.N_CHUNKS // 64
    assert (pages[first[0]:first[1]] == 0x55555555).all()
    assert (pages[first[16 * per_sweep]:first[16 * per_sweep + 1]] == 0xAAAAAAAA).all()
    assert (pages[-ariadne.N_CHUNKS:] == 0xFFFFFFFF).all()
    g = ariadne.gemm()
    gp, gf, gt = np.asarray(g.touch_pages), np.asarray(g.op_first_touch), np.asarray(g.touch_chunk)
    per = ariadne.N_CHUNKS // 3
    for k in range(0, 2000, 97):
        sl = slice(int(gf[k]), int(gf[k + 1]))
        a = gt[sl] < per
        assert sum(_pop(m) for m in gp[sl][a]) in (10, 11)
        b = (gt[sl] >= per) & (gt[sl] < 2 * per)
        assert (gp[sl][b] == 0xFFFFFFFF).all()
    nw = ariadne.nw()
    npg, nf, nt = np.asarray(nw.touch_pages), np.asarray(nw.op_first_touch), np.asarray(nw.touch_chunk)
    first_op = {int(c): _pop(m) for c, m in zip(nt[nf[0]:nf[1]], npg[nf[0]:nf[1]], strict=True)}
    assert first_op == {0: 17, ariadne.N_CHUNKS // 2: 16}
    for fn in (ariadne.two_dc,):
        assert (np.asarray(fn().touch_pages) == 0xFFFFFFFF).all()


def test_xsb_has_xsbench_shape() -> None:
    """XSB (XSBench event-based, H-M large on the unionized grid, sized to 4 GiB): 17 M lookups; each a binary
    search of the unionized grid (22 probes), then per nuclide of its material one index-grid entry (all in the
    lookup's one row) and that nuclide's two grid points; materials drawn with XSBench's ``pick_mat``
    distribution."""
    assert ariadne.XSB_LOOKUPS == 17_000_000 and ariadne.XSB_ISOTOPES == 355
    lay = ariadne.xsb_layout()
    assert ariadne.XSB_GRIDPOINTS == 8196
    end = max(hi for _, hi in lay.values())
    assert end <= ariadne.FOOTPRINT < end + 355 * (8 + 4 * 355 + 48)
    assert lay["index_grid"][1] - lay["index_grid"][0] == 355 * 8196 * 355 * 4
    n = 20_000
    look, lo, hi = ariadne.xsb_lookups(n)
    size = hi - lo
    assert np.array_equal(np.unique(look), np.arange(n))
    in_ix = (lo >= lay["index_grid"][0]) & (lo < lay["index_grid"][1])
    in_eg = (lo >= lay["egrid"][0]) & (lo < lay["egrid"][1])
    in_nuc = lo < lay["nuclide_grids"][1]
    assert (size[in_ix] == 4).all() and (size[in_eg] == 8).all() and (size[in_nuc] == 96).all()
    probes = np.bincount(look[in_eg], minlength=n)
    assert set(probes.tolist()) <= {21, 22} and (probes == 22).mean() > 0.5    # log2(2.9 M points)
    nucs = np.bincount(look[in_ix], minlength=n)
    assert (nucs == np.bincount(look[in_nuc], minlength=n)).all()
    assert set(nucs.tolist()) == set(ariadne.XSB_NUM_NUCS)
    expect = sum(p * k for p, k in zip(ariadne.XSB_MAT_DIST, ariadne.XSB_NUM_NUCS, strict=True))
    assert abs(nucs.mean() - expect) < 0.05 * expect                          # 55.7 nuclide reads a lookup
    assert abs((nucs == 321).mean() - 0.140) < 0.01                           # fuel
    # a lookup's index-grid entries lie in its one row of 355 ints
    row = (lo[in_ix] - lay["index_grid"][0]) // (355 * 4)
    first = np.searchsorted(look[in_ix], np.arange(n))
    assert (row == np.repeat(row[first], nucs)).all()
    # the trace: one op per lookup, each touching the 64 KiB groups of its reads; runs are prefixes
    tr = ariadne.xsb(2000)
    short = ariadne.xsb(1000)
    assert len(tr.op_time_ns) == 2000
    f = np.asarray(tr.op_first_touch)
    assert np.array_equal(np.asarray(short.touch_chunk), np.asarray(tr.touch_chunk)[:f[1000]])
    pages = np.asarray(tr.touch_pages, dtype=np.int64)
    chunk = np.asarray(tr.touch_chunk, dtype=np.int64)
    ix_blocks = chunk * CHUNK_BYTES >= lay["index_grid"][0] // CHUNK_BYTES * CHUNK_BYTES + CHUNK_BYTES
    for k in range(0, 2000, 37):
        sl = slice(int(f[k]), int(f[k + 1]))
        assert 1 <= sum(_pop(m) for m in pages[sl][ix_blocks[sl]]) <= 2       # the row: 1,420 bytes


def test_xsb_extrapolates_linearly_past_the_prefix() -> None:
    # 1 s at 120k lookups, 2 s at 240k: 1 s per 120k lookups on to 17 M
    t = ariadne.xsb_extrapolate(1.0, 2.0, 240_000, 17_000_000)
    assert math.isclose(t, 2.0 + (17_000_000 - 240_000) / 120_000)
    assert ariadne.xsb_extrapolate(5.0, 5.0) == 5.0


def test_xsb_prefixes_are_past_the_warm_up() -> None:
    """The extrapolation holds only where the shorter prefix is past the warm-up: from there the run at 100 %
    migrates nothing more (its runtime grows by the lookups' compute alone, a few ns each), and the run at
    200 % grows by a fault stall per lookup far above that."""
    half, full = calibrate._xsb_half(), calibrate._mix_traces()["XSB"]
    n = ariadne.XSB_SIM_LOOKUPS - ariadne.XSB_SIM_LOOKUPS // 2
    at100 = (calibrate._mix_runtime(full, 1.0) - calibrate._mix_runtime(half, 1.0)) / n
    at200 = (calibrate._mix_runtime(full, 2.0) - calibrate._mix_runtime(half, 2.0)) / n
    compute = float(np.asarray(full.op_time_ns)[ariadne.XSB_SIM_LOOKUPS // 2:].mean())  # type: ignore[attr-defined]
    assert compute <= at100 < 2 * compute
    assert at200 > 10_000 * at100
