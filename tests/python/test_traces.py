"""Trace format, validator, allocator, roofline, graph and lender traces (no torch needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import huvmlab.traces as T
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huvmlab.traces import chunks, graph, lenders, roofline, schema
from huvmlab.traces.builder import Builder

MiB = 1 << 20


def _files(p: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(p.iterdir())}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tr") / "bfs.trace"
    return T.generate("bfs-tiny", out)


# ------------------------------------------------------------------ allocator and chunk expansion


def test_allocator_pools_and_rounding() -> None:
    a = chunks.CachingAllocator()
    x = a.malloc(100, 0)  # small pool: one 2 MiB segment, 512 B rounding
    y = a.malloc(600, 0)
    assert (x, y) == (0, 512)
    assert a.segments == [(0, 2 * MiB, 0)]
    z = a.malloc(3 * MiB, 1)  # large, < 10 MiB: a 20 MiB segment
    assert z == 2 * MiB and a.segments[-1] == (2 * MiB, 20 * MiB, 1)
    w = a.malloc(4 * MiB, 1)  # fits in the rest of the 20 MiB segment
    assert w == 5 * MiB and len(a.segments) == 2
    big = a.malloc(13 * MiB + 1, 2)  # >= 10 MiB and more than the 13 MiB left: own segment, 2 MiB rounding
    assert a.segments[-1] == (22 * MiB, 14 * MiB, 2) and big == 22 * MiB
    assert a.malloc(11 * MiB, 2) == 9 * MiB  # best fit: the 13 MiB remainder of the 20 MiB segment
    a.free(z)
    a.free(9 * MiB)
    a.free(w)  # coalesces with z's block and the tail: the whole 20 MiB is free again
    assert a.malloc(19 * MiB, 3) == 2 * MiB and len(a.segments) == 3


def test_allocator_best_fit_reuses_freed_block() -> None:
    a = chunks.CachingAllocator()
    p = [a.malloc(12 * MiB, 0), a.malloc(16 * MiB, 0), a.malloc(12 * MiB, 0)]
    a.free(p[1])
    a.free(p[0])  # 12 MiB segment free
    assert a.malloc(12 * MiB, 1) == p[0]  # best fit: the 12 MiB block, not the 16 MiB one
    assert a.malloc(14 * MiB, 1) == p[1]
    assert len(a.segments) == 3


def _tiny_tables() -> schema.Tables:
    b = Builder()
    s0 = b.storage(3 * MiB, "param", "float32", "(3M,)", before_op=-1)
    b.op("a", "fwd")
    s1 = b.storage(5 * MiB, "other", "float32", "(5M,)")
    b.op("b", "fwd")
    b.access(s0, 0, 3 * MiB, schema.MODE_READ)
    b.access(s1, 0, 5 * MiB, schema.MODE_WRITE_NEW)
    b.access(s0, 2 * MiB, MiB, schema.MODE_WRITE_NEW)  # same chunk read and written: rmw
    b.free(s1)
    b.op("c", "bwd")
    b.access(s0, 0, 1, schema.MODE_RMW)
    return b.tables({"kind": "test", "model": "tiny"})


def test_expand_touches_and_modes() -> None:
    t = _tiny_tables()
    # s0: 3 MiB -> 20 MiB segment at 0; s1: 5 MiB fits in the same segment at 3 MiB
    assert t.s_addr.tolist() == [0, 3 * MiB]
    assert t.c_op.tolist() == [1, 1, 1, 1, 2]
    assert t.c_chunk.tolist() == [0, 1, 2, 3, 0]
    # chunk 1 is read (s0) and written new (s0 tail and s1 head): rmw; chunks 2-3 only written new
    assert t.c_mode.tolist() == [0, 2, 1, 1, 2]
    assert t.o_live_bytes.tolist() == [3 * MiB, 8 * MiB, 3 * MiB]


# ------------------------------------------------------------------ format, validator, SimTrace


def test_roundtrip_and_sim_events(tmp_path: Path) -> None:
    out = schema.write_tables(_tiny_tables(), tmp_path / "t.trace")
    tr = T.load(out)
    st = tr.to_sim_events("V100")
    assert st.op_time_ns.dtype == np.uint64 and st.op_time_ns.shape == (3,)
    assert st.op_first_touch.dtype == np.uint32 and st.op_first_touch.tolist() == [0, 0, 4, 5]
    assert st.touch_chunk.dtype == np.uint32 and st.touch_chunk.tolist() == [0, 1, 2, 3, 0]
    assert st.touch_mode.dtype == np.uint8 and st.touch_mode.tolist() == [0, 2, 1, 1, 2]
    assert st.n_chunks == 10 and st.footprint_bytes == 20 * MiB
    assert st.chunk_alloc_op.dtype == np.int32 and set(st.chunk_alloc_op.tolist()) == {-1}
    assert st.chunk_free_op.tolist() == [-1] * 10
    assert st.peak_live_bytes == 8 * MiB
    i = T.info(out)
    assert (i.n_ops, i.n_touches, i.n_chunks, i.peak_live_bytes, i.peak_op) == (3, 5, 10, 8 * MiB, 1)


def test_truncated_file_is_refused(small_trace: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.trace"
    bad.mkdir()
    for f in small_trace.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    acc = bad / "accesses.parquet"
    acc.write_bytes(acc.read_bytes()[: acc.stat().st_size // 2])
    with pytest.raises(T.TraceFormatError) as ei:
        T.load(bad)
    msg = str(ei.value)
    assert str(acc) in msg and "'accesses'" in msg and "row footer" in msg
    assert isinstance(ei.value, ValueError) and ei.value.table == "accesses"


def _rewrite(path: Path, table: str, fn: object) -> None:
    f = path / f"{table}.parquet"
    t = pq.read_table(f)
    md = t.schema.metadata
    t = fn(t)  # type: ignore[operator]
    pq.write_table(t.replace_schema_metadata(md), f, compression="zstd")


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_bad_row_is_named(small_trace: Path, tmp_path: Path) -> None:
    bad = _copy(small_trace, tmp_path / "bad.trace")
    n_sto = pq.read_metadata(bad / "storages.parquet").num_rows

    def corrupt(t: pa.Table) -> pa.Table:
        sid = t.column("sid").to_numpy().copy()
        sid[3] = n_sto + 7
        return t.set_column(1, "sid", pa.array(sid, type=pa.int32()))

    _rewrite(bad, "accesses", corrupt)
    with pytest.raises(T.TraceFormatError) as ei:
        T.load(bad)
    assert ei.value.row == 3 and ei.value.table == "accesses"
    assert "row 3" in str(ei.value) and "sid out of range" in str(ei.value)
    assert str(bad / "accesses.parquet") in str(ei.value)


def test_lifetime_violation_is_named(tmp_path: Path) -> None:
    out = schema.write_tables(_tiny_tables(), tmp_path / "t.trace")

    def corrupt(t: pa.Table) -> pa.Table:
        fr = t.column("free_op").to_numpy().copy()
        fr[1] = 0  # storage 1 is allocated before op 1: freeing it after op 0 is impossible
        return t.set_column(3, "free_op", pa.array(fr, type=pa.int32()))

    _rewrite(out, "storages", corrupt)
    with pytest.raises(T.TraceFormatError, match=r"table 'storages', row 1: freed before allocated"):
        T.load(out)


def test_version_and_schema_checks(small_trace: Path, tmp_path: Path) -> None:
    bad = _copy(small_trace, tmp_path / "v.trace")
    f = bad / "ops.parquet"
    t = pq.read_table(f)
    md = dict(t.schema.metadata)
    md[schema.VERSION_KEY] = b"999"
    pq.write_table(t.replace_schema_metadata(md), f)
    with pytest.raises(T.TraceFormatError, match="'ops', row metadata: schema version"):
        T.load(bad)
    bad2 = _copy(small_trace, tmp_path / "s.trace")
    _rewrite(bad2, "chunks", lambda t: t.drop_columns(["mode"]))
    with pytest.raises(T.TraceFormatError, match="'chunks', row schema"):
        T.load(bad2)
    (bad2 / "segments.parquet").unlink()
    with pytest.raises(T.TraceFormatError, match="table 'segments': file missing"):
        T.load(bad2)


def test_deterministic_bytes(tmp_path: Path) -> None:
    for model in ("wcc-tiny", "lender-rising"):
        a = T.generate(model, tmp_path / f"a-{model}.trace", seconds=5)
        b = T.generate(model, tmp_path / f"b-{model}.trace", seconds=5)
        assert _files(a) == _files(b)
        assert len(_files(a)) == 5


# ------------------------------------------------------------------ roofline


def test_roofline_numbers() -> None:
    flops = np.array([10**12, 0, 10**12, 0], dtype=np.int64)
    nbytes = np.array([0, 10**9, 0, 0], dtype=np.int64)
    fixed = np.array([-1, -1, -1, 1234], dtype=np.int64)
    names = ["aten.mm.default", "aten.add.Tensor", "aten.convolution.default", "x"]
    dts = ["torch.bfloat16", "torch.float32", "torch.float32", "torch.float32"]
    h = roofline.op_times_ns("H100", names, dts, flops, nbytes, fixed)
    assert h[0] == round(1e12 / (0.6 * 989.5e12) * 1e9 + 5000)
    assert h[1] == round(1e9 / (0.8 * 3350e9) * 1e9 + 5000)
    assert h[2] == round(1e12 / (0.6 * 494.5e12) * 1e9 + 5000)  # fp32 conv uses TF32
    assert h[3] == 1234
    v = roofline.op_times_ns("v100-16gb", names, dts, flops, nbytes, fixed)
    assert v[0] == round(1e12 / (0.6 * 15.7e12) * 1e9 + 5000)  # no bf16 tensor cores on V100
    with pytest.raises(KeyError):
        roofline.preset("P100")


# ------------------------------------------------------------------ graph and lender traces


def test_graph_generator_sane() -> None:
    spec = graph.GRAPHS["tiny"]
    g = graph.make_graph(spec)
    assert g.v == spec.vertices and g.e == spec.edges
    assert int(g.offsets[-1]) == spec.edges and np.all(np.diff(g.offsets) >= 0)
    assert g.indices.min() >= 0 and g.indices.max() < spec.vertices
    indeg = np.bincount(g.indices, minlength=g.v)
    assert indeg.max() > 20 * indeg.mean()  # heavy tail
    g2 = graph.make_graph.__wrapped__(spec)  # uncached: same seed, same graph
    assert np.array_equal(g.indices, g2.indices)


def test_graph_traces_sane(tmp_path: Path) -> None:
    spec = graph.GRAPHS["tiny"]
    pr = T.load(T.generate("pagerank", tmp_path / "pr.trace", graph="tiny"))
    it = pr.meta["iterations"]
    assert 5 <= it < graph.PR_MAX_ITER and it == graph.pagerank_iterations(graph.make_graph(spec))
    names = pr.tables.o_name
    assert names.count("pagerank.l1_norm") == it and names.count("pagerank.spmv") == it  # one segment
    assert pr.meta["edges"] == spec.edges
    # every spmv reads the whole index array: 4 bytes per edge
    acc = pr.tables
    idx_sid = 1
    per_op = np.bincount(acc.a_op[acc.a_sid == idx_sid], weights=acc.a_nbytes[acc.a_sid == idx_sid])
    spmv = [i for i, n in enumerate(names) if n == "pagerank.spmv"]
    assert np.all(per_op[spmv] == 4 * spec.edges)
    bfs = T.load(T.generate("bfs", tmp_path / "bfs.trace", graph="tiny"))
    assert bfs.meta["levels"] >= 3 and 0.5 * spec.vertices < bfs.meta["reached"] <= spec.vertices
    assert bfs.tables.o_name.count("bfs.expand") >= bfs.meta["levels"]
    wcc = T.load(T.generate("wcc", tmp_path / "wcc.trace", graph="tiny"))
    assert wcc.tables.o_name.count("wcc.pointer_jump") == wcc.meta["iterations"] >= 2


def test_lender_shapes() -> None:
    idle = T.Trace(lenders.lender_trace("idle", mem_bytes=16 << 30, seconds=10))
    steady = T.Trace(lenders.lender_trace("steady", mem_bytes=16 << 30, seconds=10))
    rising = T.Trace(lenders.lender_trace("rising", mem_bytes=16 << 30, seconds=10))
    assert idle.peak_live_bytes < 0.05 * (16 << 30)
    assert len(idle.tables.c_op) == idle.n_chunks  # every chunk touched once, at init
    lb = steady.tables.o_live_bytes
    assert lb.min() == lb.max() and 0.1 * (16 << 30) < lb.max() < 0.25 * (16 << 30)
    r = rising.tables.o_live_bytes
    at = rising.meta["rise_at_op"]
    assert r[:at].max() == lb.max() and r[at:].min() > 0.6 * (16 << 30)
    for tr in (idle, steady, rising):
        st = tr.to_sim_events("v100")
        assert int(st.op_time_ns.sum()) == pytest.approx(10e9, rel=0.07)


# ------------------------------------------------------------------ bundled traces, packaging


def test_bundled_traces_load_and_fit() -> None:
    total = 0
    for spec in T.BUNDLED:
        p = T.bundled(spec.name)
        i = T.info(p)
        total += i.size_bytes
        st = T.load(p).to_sim_events("v100")
        assert st.n_touches == i.n_touches and st.n_ops == i.n_ops
        if st.n_touches:
            assert int(st.touch_chunk.max()) < st.n_chunks
    assert total < 6 * MiB
    v100 = roofline.preset("v100").mem_bytes
    demo = T.info(T.bundled("demo-harvester"))
    assert 1.3 * v100 < demo.peak_live_bytes < 2.0 * v100
    assert T.info(T.bundled("lender-steady")).peak_live_bytes < 0.3 * v100


def test_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import huvmlab.traces as T\n"
        "print(T.info(T.bundled('bfs-small')).n_ops)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) > 0
