"""The simulator's model fixes of issue 14 item 4: in-flight copies hold memory, demand traffic delays
background copies already issued, shared PCIe switches, the lender's cost of lending, the cost of a fault on
peer-held data (docs/simulator.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from huvmlab.sim import NodeConfig, TenantSpec, run_scenario, workloads
from huvmlab.sim.config import GIB, MIB, Costs, GpuSpec
from huvmlab.sim.errors import SimConfigError


def _pair(memory: int, switch: int = 0, **costs: int) -> NodeConfig:
    """Two V100-like GPUs over NV2, optionally behind one PCIe switch."""
    node = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(memory + 256 * MIB, 256 * MIB)
    node = replace(node, gpus=tuple(replace(g, pcie_switch=switch) for g in node.gpus))
    return node.with_costs(**costs) if costs else node


def test_presets_share_pcie_switches_in_pairs() -> None:
    dgx1 = NodeConfig.preset("dgx-1")
    assert [g.pcie_switch for g in dgx1.gpus] == [1, 1, 2, 2, 3, 3, 4, 4]
    p3 = NodeConfig.preset("aws-p3.8xlarge")
    assert [g.pcie_switch for g in p3.gpus] == [1, 1, 2, 2]
    assert p3.switch_mbyte_per_s(1) == 12_000
    assert all(g.pcie_switch == 0 for g in NodeConfig.preset("dgx-a100").gpus)
    # each preset's lender cost is its GPU's HBM time for 2 MiB
    assert NodeConfig.preset("hgx-h100").costs.lend_chunk_ns < dgx1.costs.lend_chunk_ns


def test_bad_switch_and_costs_are_refused() -> None:
    node = _pair(GIB)
    bad = replace(node, gpus=(replace(node.gpus[0], pcie_switch=17), node.gpus[1]))
    with pytest.raises(SimConfigError) as e:
        bad.validate()
    assert e.value.field == "gpus[0].pcie_switch"
    with pytest.raises(SimConfigError) as e:
        NodeConfig.from_dict({"preset": "dgx-1", "costs": {"lend_chunk_ns": -1}})
    assert "lend_chunk_ns" in str(e.value.field)
    cfg = NodeConfig.from_dict({"preset": "dgx-1", "gpu_count": 2, "pcie_switch_mbyte_per_s": 6000,
                                "costs": {"peer_fault_service_ns": 40_000}})
    assert cfg.switch_mbyte_per_s(1) == 6000 and cfg.costs.peer_fault_service_ns == 40_000


def test_shared_pcie_switch_slows_host_traffic_of_a_pair() -> None:
    """Two jobs that stream from host on the two GPUs of one switch share its uplink. Where the copies bound
    them (a small block service), an uplink at half the two links' rate cannot move both GPUs' host -> GPU
    bytes faster than its rate. Where the block service bounds them (the calibrated costs), each job pays at
    most the other GPU's copies on the uplink: it waits behind them, not behind the other's block services
    (an op run to its end in one event made the two take turns: each ran ~1.9x as long)."""
    tr = workloads.streaming(512 * MIB, passes=3)
    tenants = [TenantSpec(0, tr), TenantSpec(1, tr)]
    copy_bound = {"fault_service_ns": 25_000, "evict_service_ns": 0, "migrate_service_ns": 0}
    own = run_scenario(_pair(256 * MIB, **copy_bound), tenants, "stock", sample_interval_ns=0)
    half = replace(_pair(256 * MIB, switch=1, **copy_bound), pcie_switch_mbyte_per_s=6_000)
    shared = run_scenario(half, tenants, "stock", sample_interval_ns=0)
    uplink_ns = shared.traffic_bytes()["pcie_h2d"] * 1000 // 6_000
    assert max(own.tenant(0).runtime_ns, own.tenant(1).runtime_ns) < uplink_ns
    assert max(shared.tenant(0).runtime_ns, shared.tenant(1).runtime_ns) >= uplink_ns
    # service-bound: the cost of sharing is bounded by the other GPU's copies (both directions, 12 GB/s)
    own = run_scenario(_pair(256 * MIB), tenants, "stock", sample_interval_ns=0)
    shared = run_scenario(_pair(256 * MIB, switch=1), tenants, "stock", sample_interval_ns=0)
    for g in (0, 1):
        other = 1 - g
        other_ns = (own.traffic["host_to_gpu"][other] + own.traffic["gpu_to_host"][other]) * 1000 // 12_000
        assert own.tenant(g).runtime_ns < shared.tenant(g).runtime_ns <= own.tenant(g).runtime_ns + other_ns
    # one job alone behind the switch has the uplink to itself: no cost
    alone_own = run_scenario(_pair(256 * MIB), tenants[:1], "stock", sample_interval_ns=0)
    alone_sw = run_scenario(_pair(256 * MIB, switch=1), tenants[:1], "stock", sample_interval_ns=0)
    assert alone_sw.tenant(0).runtime_ns == alone_own.tenant(0).runtime_ns


def test_inflight_copies_hold_memory() -> None:
    """A job that only writes new chunks on a full GPU (no host -> GPU copy per fault) cannot outrun the
    GPU -> host copies making its room: pre-evicted memory is not free while its copy is on the link."""
    usable = 128 * MIB
    n = 1024
    tr = workloads.make_trace("writer", np.arange(n, dtype=np.int64).reshape(n, 1), np.full(n, 1000), n)
    node = NodeConfig("one", (GpuSpec("g", usable + 256 * MIB, 256 * MIB, 12_000),), (("X",),))
    res = run_scenario(node, [TenantSpec(0, tr)], "huvm-atc22", sample_interval_ns=0)
    evicted = res.counter_total("evict_to_host")
    assert res.counter_total("preevict_to_host") > 0
    copy_ns = 2 * MIB * 1000 // 12_000
    assert res.tenant(0).runtime_ns >= (evicted - usable // (2 * MIB)) * copy_ns


def test_lending_costs_the_lender_and_peer_faults_cost_more() -> None:
    usable = 256 * MIB
    harvester = workloads.streaming(usable * 3 // 2, passes=4)
    lender = workloads.streaming(usable // 8, passes=200)
    tenants = [TenantSpec(0, harvester, role="harvester"), TenantSpec(1, lender, role="lender")]
    free = run_scenario(_pair(usable, lend_chunk_ns=0), tenants, "huvm-atc22", sample_interval_ns=0)
    paid = run_scenario(_pair(usable, lend_chunk_ns=20_000), tenants, "huvm-atc22", sample_interval_ns=0)
    assert free.counter_total("evict_to_peer") > 0
    assert free.tenant(1).lend_stall_ns == 0 and paid.tenant(1).lend_stall_ns > 0
    assert paid.tenant(1).runtime_ns > free.tenant(1).runtime_ns
    assert paid.tenant(1).stall_ns >= paid.tenant(1).lend_stall_ns
    assert paid.tenant(0).lend_stall_ns == 0
    base = Costs().fault_service_ns
    cheap = run_scenario(_pair(usable, peer_fault_service_ns=base), tenants, "huvm-atc22", sample_interval_ns=0)
    dear = run_scenario(_pair(usable, peer_fault_service_ns=base + 200_000), tenants, "huvm-atc22",
                        sample_interval_ns=0)
    assert cheap.counter_total("fetch_from_peer") > 0
    assert dear.tenant(0).runtime_ns > cheap.tenant(0).runtime_ns


def test_lender_below_its_reserve_gives_back_in_the_background() -> None:
    """The kernel's worker (issue 12 item 9, uvm_huvm_preevict.c): a lender whose own allocation takes its
    free memory below its lend reserve gives guests' chunks back at once, in the background, until the
    reserve is free again (huvm_giveback_need), not only when a later allocation finds no free memory."""
    from huvmlab.sim import SimNode

    usable = 512 * MIB
    node = _pair(usable)
    n = 2 * usable // (2 * MIB)
    # the harvester overflows onto the lender once, then loops over chunks that stay on its own GPU
    per_op = [np.arange(i, i + 8, dtype=np.int64) for i in range(0, n, 8)]
    per_op += [np.arange(n - 32, n, dtype=np.int64)] * 2000
    harvester = workloads.make_trace("fill-then-hot", per_op, 20_000, n)
    base, rise, ops = 64 * MIB, 40 * MIB, 400
    lender = workloads.rising(base, base + rise, ops, ops // 2, op_time_ns=200_000)    # +40 MiB at 40 ms
    with SimNode(node, "huvm") as sim:
        sim.add_tenant(TenantSpec(0, harvester, role="harvester"))
        sim.add_tenant(TenantSpec(1, lender, role="lender", background=True, managed=False))
        sim.set_roles({0: "harvester", 1: "lender"})
        reserve = int(sim.get_policy().gpus[1].lend_reserve_bytes)
        sim.run(39_000_000)
        lent = sim.stats()["gpus"][1]["lent_bytes"]
        free_after_rise = usable - base - lent - rise
        assert 0 <= free_after_rise < reserve          # the rise needs no eviction, but eats into the reserve
        sim.run(60_000_000)
        g = sim.stats()["gpus"][1]
        assert sim.tenant_result(1)["alloc_stall_ns"] == 0
    assert g["giveback"] == -(-(reserve - free_after_rise) // (2 * MIB))
    assert g["lent_bytes"] == lent - g["giveback"] * 2 * MIB
