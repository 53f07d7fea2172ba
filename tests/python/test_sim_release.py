"""Release accounting: an owner that frees data sitting on a peer (va_block destroyed, range freed) takes
it off the core's held/lent/harvested gauges (huvm_account_release), in the simulator (driver/sim,
release_chunk) and in the core directly."""

from __future__ import annotations

from typing import Any

import numpy as np
from huvmlab.sim import MIB, NodeConfig, SimNode, TenantSpec, run_scenario, workloads

CHUNK = 2 * MIB
N = 192                       # 384 MiB on a 256 MiB GPU: part of it ends up on the peer


def small_node() -> NodeConfig:
    return NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(256 * MIB, 0)


def freeing_trace(free_at_end: bool) -> Any:
    """Two passes over N chunks; then the first half is freed and the second half is touched once more
    (free_at_end: everything is freed after the last op)."""
    per_op = [np.arange(i, i + 8, dtype=np.int64) for p in range(2) for i in range(0, N, 8)]
    per_op += [np.arange(i, i + 8, dtype=np.int64) for i in range(N // 2, N, 8)]
    free_op = np.full(N, -1, dtype=np.int32)
    free_op[: N // 2] = 2 * (N // 8) - 1          # after the second pass
    if free_at_end:
        free_op[N // 2:] = len(per_op) - 1
    return workloads.make_trace("freeing", per_op, 20_000, N, free_op=free_op)


def held_balance(stats: dict[str, Any], o: int, h: int) -> int:
    """What the movements alone would leave on holder h of owner o's data."""
    p = stats["pairs"][o][h]
    return int(p["evict_chunks"] + p["prefetch_chunks"] - p["fetch_chunks"] - p["giveback_chunks"]) * CHUNK


def conserved(stats: dict[str, Any]) -> None:
    g, pairs, n = stats["gpus"], stats["pairs"], stats["gpu_count"]
    for h in range(n):
        assert g[h]["lent_bytes"] == sum(pairs[o][h]["held_bytes"] for o in range(n))
        assert g[h]["harvested_bytes"] == sum(pairs[h][o]["held_bytes"] for o in range(n))


def test_freeing_harvested_data_lowers_gauges() -> None:
    res = run_scenario(small_node(), [TenantSpec(0, freeing_trace(False), role="harvester"),
                                      TenantSpec(1, static_bytes=32 * MIB, role="lender")], "huvm")
    st = res.stats
    conserved(st)
    released = held_balance(st, 0, 1) - st["pairs"][0][1]["held_bytes"]
    assert released > 0 and released % CHUNK == 0          # chunks freed while on the peer left the gauges
    # The gauges agree with where the model has the data now.
    t0 = res.tenant(0)
    assert t0.done
    assert st["gpus"][0]["harvested_bytes"] == t0.peer_chunks * CHUNK
    assert st["gpus"][1]["lent_bytes"] == t0.peer_chunks * CHUNK


def test_freeing_everything_empties_the_peer_tier() -> None:
    with SimNode(small_node(), "huvm") as node:
        node.add_tenant(TenantSpec(0, freeing_trace(True), role="harvester"))
        node.add_tenant(TenantSpec(1, static_bytes=32 * MIB, role="lender"))
        node.set_roles({0: "harvester", 1: "lender"})
        assert node.run()
        st = node.stats()
        assert node.tenant_result(0)["peer_chunks"] == 0
    g = st["gpus"]
    assert g[0]["evict_to_peer"] > 0 and g[1]["lent_peak_bytes"] > 0    # the peer did hold data
    assert g[0]["harvested_bytes"] == g[1]["lent_bytes"] == st["pairs"][0][1]["held_bytes"] == 0
    assert held_balance(st, 0, 1) > 0                                     # what only a release removes
    conserved(st)


def test_core_release_direct() -> None:
    """huvm_account_release on a bare core: gauges only, conserved, saturating, no counter changes."""
    from huvm._huvm_cffi import ffi, lib

    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_CORE, lib.HUVM_PRESET_HUVM)
    for i in range(3):
        info = ffi.new("huvm_gpu_info_t *")
        info.uuid[0] = i + 1
        info.memory_bytes = 1 << 34
        info.free_bytes = 1 << 34
        info.flags = lib.HUVM_GPU_FLAG_PRESENT
        assert lib.huvm_core_set_gpu(core, i, info) == lib.HUVM_NV_OK
    lib.huvm_account_evict(core, 0, 1, lib.HUVM_REASON_PEER, 0, 3 * CHUNK, 0)
    lib.huvm_account_evict(core, 2, 1, lib.HUVM_REASON_PEER, 0, CHUNK, 0)
    before = bytes(ffi.buffer(core.counters))
    lib.huvm_account_release(core, 0, 1, CHUNK, 0x200000)
    assert core.pairs[0][1].held_bytes == 2 * CHUNK
    assert core.counters[1].lent_bytes == 3 * CHUNK and core.counters[0].harvested_bytes == 2 * CHUNK
    assert core.counters[1].lent_peak_bytes == 4 * CHUNK
    assert core.counters[0].evict_to_peer == 3 and core.pairs[0][1].evict_chunks == 3
    lib.huvm_account_release(core, 0, 1, 50 * CHUNK, 0)                  # more than held: saturates
    assert core.pairs[0][1].held_bytes == 0 and core.counters[0].harvested_bytes == 0
    assert core.counters[1].lent_bytes == CHUNK                          # GPU 2's chunk stays
    assert bytes(ffi.buffer(core.counters)) != before                    # gauges moved ...
    lent = ffi.offsetof("huvm_gpu_counters_t", "lent_bytes")
    assert bytes(ffi.buffer(core.counters))[:lent] == before[:lent]      # ... counters before them did not
