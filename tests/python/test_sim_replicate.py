"""Replications of the HUVM prototype (docs/simulator.md, "Replications"): the artifact's Fig 6 numbers from
its history next to the simulator's, Fig 8 on Fig 6 case 1, Fig 9 on the artifact's GPU pair in MiB."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvmlab.sim import replicate
from huvmlab.sim.config import LINK_NVLINK_2, MIB
from huvmlab.sim.errors import SimConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def test_artifact_fig6_rows() -> None:
    rows = replicate.artifact_fig6()
    assert {(r.case, r.workload) for r in rows} == {
        (1, "pagerank"), (1, "vgg"), (1, "wcc"), (2, "bfs"), (2, "mobilenet"), (2, "resnet"),
        (3, "bfs"), (3, "pagerank"), (3, "wcc")}
    assert all(r.base_s > 0 and r.pre_ef_host_s > 0 and r.ours_s > 0 for r in rows)
    assert all(r.csv_path.startswith("scripts/fig6/") and r.csv_path.endswith(f"{r.workload}.csv") for r in rows)
    # the harvesters are the ones HUVM sped up in the artifact; every case has one
    assert {r.case for r in rows if r.role == "harvester"} == {1, 2, 3}
    assert all(r.ours_s < r.base_s for r in rows if r.role == "harvester")


def test_fig6_tenants_stand_for_every_artifact_workload() -> None:
    for case in (1, 2, 3):
        node, tenants, which = replicate.fig6_case(case)
        names = {r.workload for r in replicate.artifact_fig6() if r.case == case}
        assert set(which) == names
        assert all(0 <= i < len(tenants) for idx in which.values() for i in idx)
        assert node.name == "aws-p3.8xlarge"
    with pytest.raises(SimConfigError):
        replicate.fig6_case(4)


def test_fig9_uses_the_artifacts_pair_and_mib() -> None:
    node = replicate.fig9_node()
    assert node.gpu_count == 2 and node.link(0, 1)[:2] == (LINK_NVLINK_2, 2)       # GPUs 1-2: NV2
    assert node.gpus[0].pcie_switch != node.gpus[1].pcie_switch
    assert dict(replicate.FIG9_SPARE_MIB)[60] * MIB == 6164 * 2**20


def test_doc_holds_the_generated_tables(tmp_path: Path) -> None:
    """docs/simulator.md carries exactly what the module generates now (make replicate-doc)."""
    text = DOC.read_text(encoding="utf-8")
    assert replicate.DOC_BEGIN in text and replicate.DOC_END in text
    block = text.split(replicate.DOC_BEGIN, 1)[1].split(replicate.DOC_END, 1)[0]
    assert block == "\n" + replicate.doc_block()
    bad = tmp_path / "x.md"
    bad.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(SimConfigError):
        replicate.update_doc(str(bad))


def test_traversals_run_on_the_scripts_datasets() -> None:
    """Case 2's BFS runs on web-uk-2005, case 3's BFS and WCC on soc-twitter-2010 (scripts/fig6), each a real
    traversal at PageRank's footprint; PageRank keeps its streaming stand-in."""
    from huvmlab.sim import traversal

    for case, kind, ds in ((2, "bfs", "web-uk-2005"), (3, "bfs", "soc-twitter-2010"),
                           (3, "wcc", "soc-twitter-2010")):
        _, tenants, which = replicate.fig6_case(case)
        tr = tenants[which[kind][0]].trace
        assert tr is not None and tr.name == f"{kind}-{ds}"
        assert abs(int(tr.chunk_alloc_op.shape[0]) * 2 * MIB - replicate.graph_footprint_bytes()) <= 6 * 2 * MIB
        levels, _ = traversal.op_levels(tr)
        assert int(levels.max()) >= 2          # several levels / rounds, not one sweep
    _, tenants, which = replicate.fig6_case(1)
    assert tenants[which["pagerank"][0]].trace is not None
    assert tenants[which["pagerank"][0]].trace.name == "pagerank-twitter-like"


def test_fig6_sensitivity_variants() -> None:
    """The variant moves what it models and nothing else: case 1 (one harvester, no paging neighbour on its
    PCIe switch) is the same in both; in cases 2-3 two paging jobs share an uplink, so stock (Base) is never
    faster behind the shared switch than without it; and case 3's BFS, whose copies share the uplink with case
    3's WCC's whole blocks in Base, gains more from HUVM (which moves the WCC's evictions to NVLink) behind the
    switch than without it (docs/simulator.md, "What the switch still does")."""
    rows = replicate.fig6_sensitivity()
    by = {(r["variant"], r["case"], r["workload"]): r for r in rows}
    assert {v.label for v in replicate.SENSITIVITY} == {r["variant"] for r in rows}
    # case 1's PageRank reads whole blocks: the density prefetcher's threshold cannot move it either
    batches = "fault batches of 4 KiB-page entries"
    assert len({(round(r["huvm"], 9), round(r["host"], 9)) for r in rows
                if r["case"] == 1 and r["variant"] != batches}) == 1
    # batches of one whole block each: one prototype prefetch window per faulted block, not per ~33
    assert by[(batches, 1, "pagerank")]["host"] > by[("as modelled", 1, "pagerank")]["host"]
    for key in ((2, "bfs"), (3, "bfs"), (3, "wcc")):
        modelled, alone = by[("as modelled", *key)], by[("no shared switch", *key)]
        assert modelled["base_s"] >= alone["base_s"]
        assert modelled["huvm_artifact"] == alone["huvm_artifact"]
    assert by[("as modelled", 3, "bfs")]["huvm"] > by[("no shared switch", 3, "bfs")]["huvm"]
    # the prototype's driver's threshold moves only the prototype's runs: Base is the same run
    upstream = "prototype at upstream's prefetch threshold"
    for key in ((2, "bfs"), (3, "bfs"), (3, "wcc")):
        assert by[(upstream, *key)]["base_s"] == by[("as modelled", *key)]["base_s"]


def test_sensitivity_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert replicate.main(["--sensitivity"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| variant | case | workload | huvm |") and "no shared switch" in out
    assert "prototype at upstream's prefetch threshold" in out
    for flag in ("--seeds", "--scales"):
        assert replicate.main([flag]) == 2
        assert "need --sensitivity" in capsys.readouterr().err


def test_the_prototype_runs_on_its_drivers_prefetch_threshold() -> None:
    """The artifact loads its own driver for pre-ef-host and Ours, whose uvm_perf_prefetch_threshold default is
    1 % (Base: driver_base, upstream's 51 %): a fault on one 64 KiB group of a block brings the whole block
    under ``huvm-atc22`` and only that group under stock."""
    import numpy as np
    from huvmlab.sim import TenantSpec, workloads
    from huvmlab.sim.config import Costs, GpuSpec, NodeConfig

    n = 8
    node = NodeConfig("one", (GpuSpec("g", 64 * MIB + 256 * MIB, 256 * MIB, 12_000),), (("X",),),
                      costs=Costs())
    tr = workloads.make_trace("sparse", [np.arange(n, dtype=np.int64)], 1000, n,
                              pages=np.full(n, 1, dtype=np.uint32))
    spec = [TenantSpec(0, tr, host_resident=True)]
    stock = replicate._run(node, spec, "stock").traffic_bytes()["pcie_h2d"]
    proto = replicate._run(node, spec, "huvm-atc22", (("prefetch_mode", 0),)).traffic_bytes()["pcie_h2d"]
    upstream = replicate._run(node, spec, "huvm-atc22", (("prefetch_mode", 0),),
                              prototype_threshold=replicate.HUVM_PREFETCH_THRESHOLD).traffic_bytes()["pcie_h2d"]
    assert stock == upstream == n * 64 * 1024
    assert proto == n * 2 * MIB
