"""The cost model by path and its calibration (docs/simulator.md, "Cost model by path", "Constants", "Against
real GPUs"): a calibration record and the rules that derive the costs from it, the paths' services in the
link model, the serial per-GPU fault service, host-resident buffers, and `make calibration`'s rows."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from huvmlab.sim import fidelity
from huvmlab.sim.config import CHUNK_BYTES, Costs, NodeConfig, node_from_measurement
from huvmlab.sim.errors import SimConfigError
from huvmlab.sim.measured import (
    H100_COSTS,
    H100_RECORD,
    H100_RECORDS,
    REFERENCE_COSTS,
    REFERENCE_RECORD,
    REFERENCE_RECORDS,
    CalibrationRecordError,
    NodeMeasurement,
    copy_ns,
    derive,
)
from huvmlab.sim.node import SimNode
from huvmlab.sim.scenario import run_scenario
from huvmlab.sim.tenants import TenantSpec
from huvmlab.sim.workloads import make_trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def _record(**tests: list[float]) -> dict[str, Any]:
    d = REFERENCE_RECORD.to_dict()
    d["tests"].update(tests)
    return d


# ---- the record and the derivation ----

def test_the_shipped_record_round_trips_and_gives_the_default_costs(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(REFERENCE_RECORD.to_dict()), encoding="utf-8")
    again = NodeMeasurement.load(p)
    assert again == REFERENCE_RECORD
    c = Costs()
    assert (c.fault_service_ns, c.migrate_service_ns, c.evict_service_ns, c.fault_batch_ns) == (
        REFERENCE_COSTS["fault_service_ns"], REFERENCE_COSTS["migrate_service_ns"],
        REFERENCE_COSTS["evict_service_ns"], REFERENCE_COSTS["fault_batch_ns"])
    assert NodeConfig.preset("h200") == replace(node_from_measurement(REFERENCE_RECORD, name="h200"),
                                                source=NodeConfig.preset("h200").source)


def test_the_reference_pools_the_project_h200_records() -> None:
    """The model's defaults come from every H200 record pooled: each test's samples of both days together."""
    recs = [NodeMeasurement.builtin(n) for n in REFERENCE_RECORDS]
    assert len(recs) >= 2 and {r.gpu_name for r in recs} == {"NVIDIA H200"}
    for k in recs[0].tests:
        assert sorted(REFERENCE_RECORD.tests[k]) == sorted(x for r in recs for x in r.tests[k])
    assert REFERENCE_RECORD.block_fault_median_us() == statistics.median(
        x for r in recs for v in r.block_fault_us.values() for x in v)
    days = [derive(r) for r in recs]
    assert REFERENCE_COSTS not in days
    for k in ("fault_service_ns", "evict_service_ns", "fault_batch_ns"):
        assert min(d[k] for d in days) <= REFERENCE_COSTS[k] <= max(d[k] for d in days), k
    # the HBM rate: the measured copy where a record has one (the second day's), not the first's NVML peak
    assert REFERENCE_RECORD.hbm_mbyte_per_s == recs[1].hbm_mbyte_per_s != recs[0].hbm_mbyte_per_s


def test_pooling_refuses_another_gpu_or_nothing() -> None:
    with pytest.raises(CalibrationRecordError, match="cannot pool") as exc:
        NodeMeasurement.pooled([REFERENCE_RECORD, H100_RECORD])
    assert exc.value.field == "record" and "\n" not in str(exc.value)
    with pytest.raises(CalibrationRecordError, match="no records"):
        NodeMeasurement.pooled([])


def test_every_shipped_record_loads() -> None:
    from importlib import resources

    names = sorted(f.name.removesuffix(".json") for f in resources.files("huvm.data").joinpath("calibration")
                   .iterdir() if f.name.endswith(".json"))
    assert set(REFERENCE_RECORDS) | set(H100_RECORDS) <= set(names)
    for n in names:
        assert derive(NodeMeasurement.builtin(n))["fault_service_ns"] > 0


def test_the_h100_presets_take_the_measured_h100s_costs() -> None:
    for name in ("hgx-h100", "h100-nvl"):
        node = NodeConfig.preset(name)
        c = node.costs
        assert (c.fault_batch_ns, c.fault_service_ns, c.migrate_service_ns, c.evict_service_ns,
                c.peer_fault_service_ns) == tuple(H100_COSTS[k] for k in (
                    "fault_batch_ns", "fault_service_ns", "migrate_service_ns", "evict_service_ns",
                    "peer_fault_service_ns")), name
        assert {g.pcie_mbyte_per_s for g in node.gpus} == {H100_COSTS["pcie_mbyte_per_s"]}
    assert NodeConfig.preset("hgx-h100").costs.lend_chunk_ns == H100_COSTS["lend_chunk_ns"]
    # a GPU nobody measured keeps the H200's services; the H200 nodes keep theirs
    for name in ("dgx-a100", "aws-p3.8xlarge", "hgx-h200"):
        assert NodeConfig.preset(name).costs.fault_service_ns == REFERENCE_COSTS["fault_service_ns"], name
    assert H100_COSTS["fault_service_ns"] != REFERENCE_COSTS["fault_service_ns"]


def test_each_service_is_its_paths_time_less_the_copy() -> None:
    """One rule per constant: a path's per-block time less the 2 MiB copy at the pinned rate."""
    d = _record(pinned_h2d=[50_000.0], pinned_d2h=[40_000.0], prefetch_h2d=[25_000.0], prefetch_d2h=[10_000.0],
                fault_serial_2m_us=[30.0])
    d["block_fault_us"] = {"1": [300.0], "64": [500.0, 100.0]}
    c = derive(NodeMeasurement.from_dict(d))
    assert c["pcie_mbyte_per_s"] == 40_000                      # the slower direction
    assert c["migrate_service_ns"] == copy_ns(25_000) - copy_ns(50_000)
    assert c["evict_service_ns"] == copy_ns(10_000) - copy_ns(40_000)
    assert c["fault_batch_ns"] == 30_000
    # median over every block sample (300 us), less the copy at the link's rate and one transfer setup
    assert c["fault_service_ns"] == 300_000 - copy_ns(40_000) - c["pcie_latency_ns"]
    assert c["peer_fault_service_ns"] > c["fault_service_ns"]
    assert c["lend_chunk_ns"] == copy_ns(REFERENCE_RECORD.hbm_mbyte_per_s)


def test_a_path_faster_than_the_link_has_no_negative_service() -> None:
    d = _record(prefetch_h2d=[1e9], prefetch_d2h=[1e9])
    c = derive(NodeMeasurement.from_dict(d))
    assert c["migrate_service_ns"] == 0 and c["evict_service_ns"] == 0


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d["tests"].pop("prefetch_h2d"), "tests.prefetch_h2d"),
    (lambda d: d["tests"].update(pinned_h2d=[]), "tests.pinned_h2d"),
    (lambda d: d["tests"].update(pinned_h2d=[-1.0]), "tests.pinned_h2d"),
    (lambda d: d["tests"].update(pinned_h2d=[True]), "tests.pinned_h2d"),
    (lambda d: d["tests"].update(pinned_h2d=[float("nan")]), "tests.pinned_h2d"),
    (lambda d: d["node"].update(memory_free_bytes=0), "node.memory_free_bytes"),
    (lambda d: d["node"].pop("driver"), "node.driver"),
    (lambda d: d.update(block_fault_us={"x": [1.0]}), "block_fault_us"),
    (lambda d: d.update(block_fault_us={}), "block_fault_us"),
])
def test_a_bad_record_is_refused_naming_the_key(mutate: Any, field: str) -> None:
    d = REFERENCE_RECORD.to_dict()
    mutate(d)
    with pytest.raises(CalibrationRecordError) as exc:
        NodeMeasurement.from_dict(d)
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


def test_loading_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CalibrationRecordError, match="no such file"):
        NodeMeasurement.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(CalibrationRecordError, match="not JSON"):
        NodeMeasurement.load(bad)
    with pytest.raises(CalibrationRecordError, match="no built-in"):
        NodeMeasurement.builtin("nope")


# ---- the paths in the link model ----

def test_path_probe_runs_each_path_at_its_measured_rate() -> None:
    node = NodeConfig.preset("h200")
    n = 512
    got = {}
    for path in ("copy", "prefetch", "evict"):
        with SimNode(node, "stock", sample_interval_ns=0) as sim:
            got[path] = sim.path_probe(path, 0, n)
    link = copy_ns(node.gpus[0].pcie_mbyte_per_s)
    c = node.costs
    assert got["copy"] == pytest.approx(n * link, rel=1e-3)
    assert got["prefetch"] == pytest.approx(n * (link + c.migrate_service_ns), rel=1e-3)
    assert got["evict"] == pytest.approx(n * (link + c.evict_service_ns), rel=1e-3)
    with SimNode(node, "stock", sample_interval_ns=0) as sim, pytest.raises(SimConfigError):
        sim.path_probe("teleport", 0, 1)


def _host_pass(node: NodeConfig, tenants: int = 1, chunks: int = 256, per_op: int = 256, **kw: Any) -> list[int]:
    ops = [np.arange(i, min(i + per_op, chunks), dtype=np.int64) for i in range(0, chunks, per_op)]
    tr = make_trace("t", ops, [0] * len(ops), chunks)
    res = run_scenario(node, [TenantSpec(0, tr, host_resident=True, **kw) for _ in range(tenants)], "stock",
                       sample_interval_ns=0)
    return [t.runtime_ns for t in res.tenants]


def test_a_host_resident_buffer_faults_in_at_the_block_service() -> None:
    """Chunks the CPU wrote first: every touch migrates from host (the block service plus the copy); the same
    trace without host residency only populates."""
    node = NodeConfig.preset("h200")
    c = node.costs
    per_block = c.fault_service_ns + copy_ns(node.gpus[0].pcie_mbyte_per_s) + c.pcie_latency_ns
    (t,) = _host_pass(node)
    assert t == pytest.approx(256 * per_block + c.fault_batch_ns, rel=0.01)
    tr = make_trace("t", [np.arange(256, dtype=np.int64)], [0], 256)
    fresh = run_scenario(node, [TenantSpec(0, tr)], "stock", sample_interval_ns=0).tenant(0).runtime_ns
    assert fresh < t / 20


def test_host_resident_is_for_managed_memory_only() -> None:
    tr = make_trace("t", [np.arange(4, dtype=np.int64)], [0], 4)
    with pytest.raises(SimConfigError, match="host_resident"):
        run_scenario(NodeConfig.preset("h200"), [TenantSpec(0, tr, managed=False, host_resident=True)], "stock")


def test_fault_service_is_serial_per_gpu() -> None:
    """Two tenants of one GPU faulting at once (one block per op, so their ops interleave) queue for the block
    service (upstream services one block at a time per GPU): 1.5x the time of one (the batch overhead does not
    queue); on two GPUs they do not wait for each other."""
    one = NodeConfig.preset("h200")
    (alone,) = _host_pass(one, per_op=1)
    both = _host_pass(one, tenants=2, per_op=1)
    assert max(both) > 1.4 * alone           # the services (222 of 293 us a block) queue; batches do not
    two = NodeConfig.preset("hgx-h200").subset(2)
    ops = [np.array([i], dtype=np.int64) for i in range(256)]
    tr = make_trace("t", ops, [0] * 256, 256)
    res = run_scenario(two, [TenantSpec(g, tr, host_resident=True) for g in (0, 1)], "stock", sample_interval_ns=0)
    assert max(t.runtime_ns for t in res.tenants) < 1.2 * alone


def test_a_peer_fault_pays_the_block_service_a_peer_prefetch_does_not() -> None:
    c = NodeConfig.preset("hgx-h100").costs
    assert c.peer_fault_service_ns >= c.fault_service_ns > 10 * c.migrate_service_ns


# ---- make calibration ----

def test_calibration_rows_line_format_and_verdict() -> None:
    r = fidelity.Row("g", "x", 1.25, 1.0, "x")
    assert r.ok and r.line() == "replicate g/x: sim 1.25 reference 1 ratio 1.25 ok"
    assert not fidelity.Row("g", "x", 1.26, 1.0, "x").ok
    assert not fidelity.Row("g", "x", 0.74, 1.0, "x").ok


def test_a_measured_row_prints_its_samples_range_and_the_verdict_stays_the_medians() -> None:
    r = fidelity.Row("g", "x", 6.2, 4.9, "MB/s", samples=(4.9, 5.0, 6.3))
    assert not r.ok    # inside the range, off the median: still off
    assert r.line() == "replicate g/x: sim 6.2 reference 4.9 ratio 1.27 off (measured 4.9-6.3 over 3, sim inside)"
    far = fidelity.Row("g", "y", 9.0, 5.0, "MB/s", samples=(4.9, 5.0, 6.3))
    assert far.line().endswith("off (measured 4.9-6.3 over 3)")
    assert fidelity.Row("g", "z", 9.0, 5.0, "MB/s", samples=(5.0,)).spread == ""
    s = fidelity.summary([r, far, fidelity.Row("g", "w", 1.0, 1.0, "x")])
    assert s.endswith("; off but inside the measured range: g/x")
    assert "inside" not in fidelity.summary([far])
    # the h200 rows carry the record's samples
    rows = {x.name: x for x in fidelity.h200_rows()}
    assert rows["touch_seq"].samples == REFERENCE_RECORD.tests["fault_touch_seq"]
    assert len(rows["block_fault"].samples) == sum(len(v) for v in REFERENCE_RECORD.block_fault_us.values())


def test_the_h200_microbenchmarks_replicate() -> None:
    rows = fidelity.h200_rows()
    names = {r.name for r in rows}
    assert {"stream_read", "touch_seq", "touch_random", "block_fault", "prefetch_h2d", "evict_d2h"} <= names
    assert all(r.ok for r in rows), [r.line() for r in rows if not r.ok]
    # no gain from faults in flight: 1024 regions cost what 1 does, as measured
    scaling = next(r for r in rows if r.name.startswith("block_fault_1024"))
    assert 0.8 < scaling.sim < 1.1


def test_the_h100_microbenchmarks_run_on_its_own_node() -> None:
    """The h100 group: the H100 record's tests on the one-GPU node derived from it (its derived rows hold; the
    others are make calibration's to report)."""
    rows = fidelity.h100_rows()
    assert {r.group for r in rows} == {"h100"}
    derived = [r for r in rows if r.derived]
    assert len(derived) == 4 and all(r.ok for r in derived), [r.line() for r in derived]
    block = next(r for r in rows if r.name == "block_fault")
    assert block.reference == H100_RECORD.block_fault_median_us()
    assert abs(block.sim - next(r for r in fidelity.h200_rows() if r.name == "block_fault").sim) > 20  # not the H200's


def test_calibration_exits_nonzero_when_a_row_is_off(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(fidelity, "all_rows", lambda: [fidelity.Row("g", "a", 1.0, 1.0, "x")])
    assert fidelity.main([]) == 0
    monkeypatch.setattr(fidelity, "all_rows", lambda: [fidelity.Row("g", "a", 1.0, 1.0, "x"),
                                                       fidelity.Row("g", "b", 2.0, 1.0, "x")])
    assert fidelity.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "replicate g/b: sim 2 reference 1 ratio 2.00 off"
    assert out[-1].startswith("calibration: 1 of 2 rows within")


def test_doc_holds_the_generated_calibration_table() -> None:
    """docs/simulator.md carries exactly what `make calibration-doc` generates now."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(fidelity.DOC_BEGIN, 1)[1].split(fidelity.DOC_END, 1)[0]
    rows = fidelity.all_rows()
    assert block == "\n" + fidelity.doc_block(rows)
    # the README's count of rows within tolerance is today's
    readme = " ".join((DOC.parent.parent / "README.md").read_text(encoding="utf-8").split())
    assert f"({sum(r.ok for r in rows)} of {len(rows)} rows within ±25 % today;" in readme


def test_chunk_size_is_the_records() -> None:
    from huvmlab.sim import measured

    assert measured.CHUNK_BYTES == CHUNK_BYTES
