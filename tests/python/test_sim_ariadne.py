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
    assert set(ariadne.KERNELS) == set(ariadne.TABLE_I) - set(ariadne.NOT_MODELLED)
    assert ariadne.NOT_MODELLED == ("XSB",)
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
    assert all(int(((o >= 0) & (o < per)).sum()) == 1 for o in ops)  # A: its tile's block, through the k loop
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
    assert float(at200["geomean"]) == math.exp(sum(map(math.log, vals)) / 9)  # type: ignore[arg-type]
    assert all(v >= 1.0 for v in vals)
    # the sparse row-thread kernels thrash at any oversubscription; the dense ones do not at 200 %
    assert all(float(at200[k]) > 10 for k in ("ATAX", "BICG", "MVT", "GEMV"))  # type: ignore[arg-type]
    assert all(float(at200[k]) < 2 for k in ("2DC", "GEMM", "HEL"))  # type: ignore[arg-type]
