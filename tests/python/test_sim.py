"""The simulated node: determinism, conservation, policy behaviour, ioctl surface (huvmlab.sim, driver/sim)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from huvm import abi, errors
from huvmlab.sim import GIB, MIB, NodeConfig, SimNode, SimResult, TenantSpec, run_comparison, run_scenario, workloads

CHUNK = 2 * MIB


def small_node(gpus: int = 2, mem: int = 256 * MIB) -> NodeConfig:
    """The prototype's machine (p3.8xlarge: NVLink 2, PCIe 3), scaled down for speed."""
    return NodeConfig.preset("aws-p3.8xlarge").subset(gpus).with_gpu_memory(mem, 0)


def harvester_and_idle_lender(ws: int = 384 * MIB, passes: int = 4) -> list[TenantSpec]:
    return [TenantSpec(0, workloads.streaming(ws, passes), name="harvester", role="harvester"),
            TenantSpec(1, static_bytes=32 * MIB, name="idle", role="lender")]


def comparable(res: SimResult) -> str:
    d = res.to_dict(samples=True)
    d.pop("wall_s")
    return json.dumps(d, sort_keys=True)


def test_determinism_bit_identical() -> None:
    tenants = [TenantSpec(0, workloads.random_access(384 * MIB, 400, seed=7), name="h", role="harvester"),
               TenantSpec(1, workloads.rising(32 * MIB, 160 * MIB, 300, 150, op_time_ns=20_000), managed=False,
                          background=True, name="l", role="lender")]
    a = run_scenario(small_node(), tenants, "huvm")
    b = run_scenario(small_node(), tenants, "huvm")
    assert comparable(a) == comparable(b)
    assert a.samples.t_ns.size > 10
    assert a.stats["gpus"][0]["faults"] > 0


def test_counters_conserve_and_match_traffic() -> None:
    res = run_scenario(small_node(3), [
        TenantSpec(0, workloads.hot_cold(512 * MIB, 600), role="harvester"),
        TenantSpec(1, static_bytes=64 * MIB, role="lender"),
        TenantSpec(2, workloads.rising(16 * MIB, 200 * MIB, 400, 50, op_time_ns=1_000_000), managed=False,
                   background=True, role="lender"),
    ], "huvm-atc22")
    st, n = res.stats, res.stats["gpu_count"]
    g, pairs = st["gpus"], st["pairs"]
    for o in range(n):
        for h in range(n):
            p = pairs[o][h]
            assert (p["evict_chunks"] + p["prefetch_chunks"] - p["fetch_chunks"] - p["giveback_chunks"]) * CHUNK \
                == p["held_bytes"], (o, h)
    for h in range(n):
        assert g[h]["lent_bytes"] == sum(pairs[o][h]["held_bytes"] for o in range(n))
        assert g[h]["giveback"] == sum(pairs[o][h]["giveback_chunks"] for o in range(n))
    for o in range(n):
        assert g[o]["harvested_bytes"] == sum(pairs[o][h]["held_bytes"] for h in range(n))
        assert g[o]["evict_to_peer"] == sum(pairs[o][h]["evict_chunks"] for h in range(n))
        assert g[o]["evict_to_host"] == sum(g[o]["host_reason"])
    # The model's own chunk placement agrees with the core's gauges.
    t0 = res.tenant(0)
    assert t0.peer_chunks * CHUNK == g[0]["harvested_bytes"]
    # Every counted movement is a transfer of the model, and vice versa.
    tr = res.traffic
    nv = sum(sum(r) for r in tr["gpu_to_gpu"])
    assert nv == sum((x["evict_to_peer"] + x["fetch_from_peer"]) * CHUNK for x in g)
    assert sum(tr["gpu_to_host"]) == sum(x["bytes_to_host"] for x in g)
    assert sum(tr["host_to_gpu"]) == sum(x["bytes_from_host"] for x in g)
    assert g[0]["faults"] == t0.faults and g[0]["fault_batches"] == t0.fault_batches
    assert g[2]["giveback"] > 0


def test_stock_never_evicts_to_peer() -> None:
    res = run_scenario(small_node(4), harvester_and_idle_lender() + [
        TenantSpec(2, static_bytes=8 * MIB, role="lender"), TenantSpec(3, role="lender")], "stock")
    g = res.stats["gpus"]
    assert g[0]["evict_to_host"] > 0
    assert all(x["evict_to_peer"] == 0 and x["prefetch_to_peer"] == 0 and x["fetch_from_peer"] == 0 for x in g)
    assert all(p["held_bytes"] == 0 and p["evict_chunks"] == 0 for row in res.stats["pairs"] for p in row)
    assert g[0]["host_reason"][1] == g[0]["evict_to_host"]  # HUVM_REASON_TIER_OFF
    assert res.traffic_bytes()["nvlink"] == 0


def test_huvm_beats_stock_with_idle_lender() -> None:
    cmp = run_comparison(small_node(), harvester_and_idle_lender())
    rt = {p: cmp[p].tenant("harvester").runtime_ns for p in cmp.results}
    assert rt["ideal"] < rt["huvm"] < rt["stock"]
    assert rt["stock"] / rt["huvm"] > 2.0
    assert rt["stock"] / rt["huvm-atc22"] > 2.0
    h = cmp["huvm"].stats["gpus"][0]
    assert h["evict_to_peer"] > 0 and h["fetch_from_peer"] > 0
    ratios = [r["ratio_to_ideal"] for r in cmp.rows() if r["tenant"] == "harvester"]
    assert ratios[0] == 1.0 and all(r >= 1.0 for r in ratios)


def test_giveback_when_lender_footprint_rises() -> None:
    node = small_node()
    lender = workloads.rising(16 * MIB, 224 * MIB, 400, 100, op_time_ns=100_000)
    res = run_scenario(node, [TenantSpec(0, workloads.streaming(384 * MIB, 6), role="harvester"),
                              TenantSpec(1, lender, managed=False, background=True, role="lender")], "huvm")
    g = res.stats["gpus"]
    assert g[1]["giveback"] > 0
    assert res.stats["pairs"][0][1]["giveback_chunks"] == g[1]["giveback"]
    # The lender got its memory: 224 MiB pinned, guests squeezed to what is left (256 MiB GPU).
    peak_own = int(res.samples.own_bytes[:, 1].max())
    assert peak_own == 224 * MIB
    assert int((res.samples.own_bytes[:, 1] + res.samples.guest_bytes[:, 1]).max()) <= 256 * MIB
    assert g[1]["lent_peak_bytes"] > g[1]["lent_bytes"]


def test_remote_map_fetch_mode() -> None:
    res = run_scenario(small_node(), harvester_and_idle_lender(), "huvm", policy_overrides={"fetch_mode": 1})
    g = res.stats["gpus"][0]
    assert g["remote_map"] > 0 and g["fetch_from_peer"] == 0
    assert res.traffic_bytes()["nvlink_remote"] > 0
    assert res.tenant("harvester").remote_stall_ns >= 0


def test_multipath_prefetch_uses_both_pcie_links() -> None:
    # Chunks fetched back from the peer recently go to host (hysteresis), so faults also come from host:
    # multi-path prefetch then pulls chunks over both GPUs' PCIe links while the peer has room. A pass here
    # takes ~20 ms, so the window must be longer than the preset's 10 ms (docs/policy.md).
    res = run_scenario(small_node(), [TenantSpec(0, workloads.streaming(512 * MIB, 3), role="harvester"),
                                      TenantSpec(1, static_bytes=64 * MIB, role="lender")], "huvm",
                       policy_overrides={"hysteresis_ms": 50, "prefetch_mode": 3, "prefetch_stride": 1})
    g = res.stats["gpus"]
    assert g[0]["prefetch_local"] > 0 and g[0]["prefetch_to_peer"] > 0
    assert res.traffic["host_to_gpu"][1] > 0          # the peer's own PCIe link carried prefetches
    assert g[0]["preevict_to_host"] + g[0]["preevict_to_peer"] > 0


def test_ideal_is_compute_plus_cold_faults() -> None:
    tr = workloads.random_access(384 * MIB, 300, seed=3)
    res = run_scenario(small_node(), [TenantSpec(0, tr)], "ideal")
    t = res.tenant(0)
    distinct = len(np.unique(tr.touch_chunk))
    assert t.faults == t.first_touches == distinct
    assert t.runtime_ns == t.compute_ns + t.fault_stall_ns
    assert t.compute_ns == int(tr.op_time_ns.sum())


def test_ioctl_through_simnode() -> None:
    lib = abi.lib
    with SimNode(small_node(4), "huvm") as node:
        info = abi.new_params(lib.HUVM_IOCTL_GET_INFO)
        assert node.ioctl(lib.HUVM_IOCTL_GET_INFO, info) == lib.HUVM_NV_OK
        assert info.backend == lib.HUVM_BACKEND_SIM and info.gpu_count == 4
        assert info.links[0][3].link_type == lib.HUVM_LINK_NVLINK_2 and info.links[0][3].link_count == 2
        assert info.links[0][1].link_count == 1 and info.links[0][1].mbyte_per_s == 25_000
        assert info.gpus[0].memory_bytes == 256 * MIB and info.gpus[0].free_bytes == 256 * MIB

        node.add_tenant(TenantSpec(0, workloads.streaming(384 * MIB, 2), name="h"))
        node.add_tenant(TenantSpec(1, static_bytes=16 * MIB, name="idle"))
        gen = node.set_policy(roles={0: "harvester", 1: "lender", 2: "none", 3: "none"},
                              overrides={"preevict_chunks": 4})
        pol = abi.new_params(lib.HUVM_IOCTL_GET_POLICY)
        assert node.ioctl(lib.HUVM_IOCTL_GET_POLICY, pol) == lib.HUVM_NV_OK
        assert pol.policy.generation == gen and pol.policy.preevict_chunks == 4
        assert pol.policy.preset == lib.HUVM_PRESET_CUSTOM
        roles = sorted(int(pol.policy.gpus[i].role) for i in range(pol.policy.gpu_count))
        assert roles == [0, 0, 1, 2]
        assert node.run()
        node.check()

        stats = abi.new_params(lib.HUVM_IOCTL_GET_STATS)
        assert node.ioctl(lib.HUVM_IOCTL_GET_STATS, stats) == lib.HUVM_NV_OK
        assert stats.gpus[0].evict_to_peer > 0 and stats.timestamp_ns == node.now_ns
        # A raw buffer works as well as a cffi struct.
        buf = bytearray(abi.as_buffer(stats))
        assert node.ioctl(lib.HUVM_IOCTL_GET_STATS, buf) == lib.HUVM_NV_OK

        vas = abi.new_params(lib.HUVM_IOCTL_LIST_VA_SPACES)
        assert node.ioctl(lib.HUVM_IOCTL_LIST_VA_SPACES, vas) == lib.HUVM_NV_OK
        assert vas.total == 2 and vas.count == 2
        assert abi.cstr(vas.entries[0].comm) == "h" and vas.entries[0].evict_to_peer == stats.gpus[0].evict_to_peer

        reset = abi.new_params(lib.HUVM_IOCTL_RESET_STATS)
        reset.reset_flags = lib.HUVM_RESET_COUNTERS
        assert node.ioctl(lib.HUVM_IOCTL_RESET_STATS, reset) == lib.HUVM_NV_OK
        after = node.stats()
        assert after["gpus"][0]["evict_to_peer"] == 0
        assert after["gpus"][1]["lent_bytes"] == stats.gpus[1].lent_bytes    # gauges stay

        bad = abi.new_params(lib.HUVM_IOCTL_GET_STATS)
        bad.hdr.size = 8
        assert node.ioctl(lib.HUVM_IOCTL_GET_STATS, bad) == lib.HUVM_NV_ERR_INVALID_PARAM_STRUCT
        ev = abi.new_params(lib.HUVM_IOCTL_TEST_EVENT)
        assert node.ioctl(lib.HUVM_IOCTL_TEST_EVENT, ev) == lib.HUVM_NV_ERR_NOT_SUPPORTED
        assert ev.rmStatus == lib.HUVM_NV_ERR_NOT_SUPPORTED


def test_bundled_traces_run() -> None:
    from huvmlab import traces  # part of the lab: always there
    h = traces.load(traces.bundled("llama-tiny")).to_sim_events("v100")
    lender = traces.load(traces.bundled("lender-rising")).to_sim_events("v100")
    node = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(1 * GIB, 0, gpus=[0])
    res = run_comparison(node, [TenantSpec(0, h, role="harvester", steps=2),
                                TenantSpec(1, lender, role="lender", managed=False, background=True)],
                         policies=("stock", "huvm"))
    t_stock, t_huvm = res["stock"].tenant(0), res["huvm"].tenant(0)
    assert t_stock.done and t_huvm.done and t_stock.steps_done == 2
    assert t_stock.touches == 2 * h.n_touches
    assert t_huvm.runtime_ns < t_stock.runtime_ns
    assert t_stock.ratio_to_ideal is not None and t_stock.ratio_to_ideal > 1.0


@pytest.mark.parametrize("name", ["aws-p3.8xlarge", "dgx-a100", "dgx-a100-80g", "hgx-h100", "ariadne-a5000"])
def test_presets_build(name: str) -> None:
    cfg = NodeConfig.preset(name)
    with SimNode(cfg, "stock") as node:
        info = abi.new_params(abi.lib.HUVM_IOCTL_GET_INFO)
        node.ioctl(abi.lib.HUVM_IOCTL_GET_INFO, info)
        errors.check(abi.lib.HUVM_IOCTL_GET_INFO, info)
        assert info.gpu_count == cfg.gpu_count
        assert info.gpus[0].memory_bytes == cfg.gpus[0].memory_bytes - cfg.gpus[0].reserved_bytes


def _dict_roundtrip(d: dict[str, Any]) -> NodeConfig:
    return NodeConfig.from_dict(d)


def test_from_dict_and_topology() -> None:
    from huvmlab.sim import parse_topo

    cfg = _dict_roundtrip({"preset": "dgx-a100", "gpu_count": 2, "gpu_memory_bytes": GIB})
    assert cfg.gpu_count == 2 and cfg.gpus[1].memory_bytes == GIB and cfg.nvswitch
    text = """
            GPU0    GPU1    GPU2    CPU Affinity
    GPU0     X      NV2     SYS     0-15
    GPU1    NV2      X      PIX     0-15
    GPU2    SYS     PIX      X      16-31
    """
    topo = parse_topo(text)
    assert topo == (("X", "NV2", "SYS"), ("NV2", "X", "PIX"), ("SYS", "PIX", "X"))
    node = NodeConfig.preset("aws-p3.8xlarge").subset(3)
    node = NodeConfig(name="t", gpus=node.gpus, topology=topo)
    assert node.link(0, 1)[:2] == (3, 2) and node.link(1, 2)[0] == 1 and node.link(0, 2)[0] == 0


def test_run_in_slices_equals_one_run() -> None:
    tenants = harvester_and_idle_lender(passes=2)
    whole = run_scenario(small_node(), tenants, "huvm")
    with SimNode(small_node(), "huvm") as node:
        for t in tenants:
            node.add_tenant(t)
        node.set_roles({0: "harvester", 1: "lender"})
        slices = 0
        while not node.run(until_ns=node.now_ns + 5_000_000):
            slices += 1
        assert slices > 3
        assert node.stats()["gpus"] == whole.stats["gpus"]
        assert node.tenant_result(0)["runtime_ns"] == whole.tenant(0).runtime_ns


def test_zero_time_background_tenant_does_not_hang() -> None:
    empty = workloads.make_trace("nothing", [np.zeros(0, dtype=np.int64)], 0, 1)
    res = run_scenario(small_node(), [TenantSpec(0, workloads.streaming(64 * MIB)),
                                      TenantSpec(1, empty, background=True)], "stock")
    assert res.tenant(0).done and res.tenant(1).done
