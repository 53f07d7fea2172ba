"""Traces whose footprint falls: segments released by empty_cache (schema: segments.free_op), the chunks'
free ops the simulator sees, the bundled lender-spiky, and traces written before releases existed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huvmlab import traces
from huvmlab.sim import NodeConfig, TenantSpec, run_scenario
from huvmlab.traces.builder import Builder
from huvmlab.traces.schema import MODE_READ, MODE_WRITE_NEW, TraceFormatError, read_tables, write_tables

MIB = 1 << 20
GIB = 1 << 30


def _rise_and_fall(empty: bool) -> traces.trace.SimTrace:
    b = Builder()
    base = b.storage(4 * MIB, "param", "float32", "base", before_op=-1)
    spike = b.storage(64 * MIB, "other", "float32", "spike")
    b.op("up", "spike", fixed_ns=1000)
    b.access_all(base, MODE_READ)
    b.access_all(spike, MODE_WRITE_NEW)
    b.free(spike)
    if empty:
        b.empty_cache()
    b.op("down", "base", fixed_ns=1000)
    b.access_all(base, MODE_READ)
    t = b.tables({"kind": "test", "name": "rise-and-fall"})
    return traces.trace.Trace(t).to_sim_events("v100")


def test_empty_cache_releases_the_segment_and_its_chunks() -> None:
    kept = _rise_and_fall(empty=False)
    freed = _rise_and_fall(empty=True)
    # the caching allocator keeps a freed storage's segment unless the cache is emptied
    assert (kept.chunk_free_op == -1).all()
    spike = freed.chunk_alloc_op == 0
    assert spike.sum() == 32 and (freed.chunk_free_op[spike] == 0).all()
    assert (freed.chunk_free_op[~spike] == -1).all()


def test_released_segments_round_trip_and_old_traces_still_load(tmp_path: Path) -> None:
    b = Builder()
    s = b.storage(8 * MIB, "other", "float32", "x")
    b.op("a", "p", fixed_ns=10)
    b.access_all(s, MODE_WRITE_NEW)
    b.free(s)
    b.empty_cache()
    t = b.tables({"kind": "test"})
    write_tables(t, tmp_path / "new.trace")
    back = read_tables(tmp_path / "new.trace")
    assert back.g_free_op.tolist() == [0] and back.meta["empty_cache_ops"] == [0]
    # a trace written before segments had free_op: every segment kept
    write_tables(t, tmp_path / "old.trace")
    f = tmp_path / "old.trace" / "segments.parquet"
    old = pq.read_table(f)
    md = old.schema.metadata
    legacy = old.drop(["free_op"]).replace_schema_metadata(md)
    pq.write_table(legacy, f, compression="zstd")
    got = read_tables(tmp_path / "old.trace")
    assert got.segment_free_ops().tolist() == [-1]
    # a segment released before it is allocated is refused, naming the table
    bad = pq.read_table(tmp_path / "new.trace" / "segments.parquet")
    cols = {n: bad.column(n) for n in bad.column_names}
    cols["alloc_op"] = pa.array([0], pa.int32())
    cols["free_op"] = pa.array([-2], pa.int32())
    pq.write_table(pa.table(cols, schema=bad.schema), tmp_path / "new.trace" / "segments.parquet")
    with pytest.raises(TraceFormatError, match="segments.*free_op out of range"):
        read_tables(tmp_path / "new.trace")


def test_bundled_lender_spiky_rises_and_falls_on_the_node() -> None:
    """1 GiB throughout plus 10 GiB for the first half of each 1 s period, looped in the background next to
    a 2.5 s foreground clock: its GPU's footprint goes up and down every second."""
    assert "lender-spiky" in {g.name for g in traces.BUNDLED}
    t = traces.load(traces.bundled("lender-spiky")).to_sim_events("v100")
    assert int(t.op_time_ns.sum()) == 1_000_000_000
    from huvmlab.sim.workloads import horizon_trace

    node = NodeConfig.preset("aws-p3.8xlarge").subset(1)
    res = run_scenario(node, [TenantSpec(0, t, background=True, managed=False),
                              TenantSpec(0, horizon_trace(2_500_000_000), name="clock")], "stock",
                       sample_interval_ns=50_000_000)
    own = res.samples.own_bytes[:, 0].astype(np.int64)
    assert own.max() > 10 * GIB and own[own > 0].min() < 2 * GIB
    highs = np.flatnonzero(own > 5 * GIB)
    assert len(highs) and (np.diff(highs) > 1).sum() >= 2      # at least three separate spikes
    assert res.tenant(0).steps_done >= 2
