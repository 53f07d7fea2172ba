"""The prototype's prefetch as huvm-atc22 runs it in the simulator (docs/simulator.md "UVM paging", the
prototype's prefetch): one item per fault batch on a per-GPU kthread, each block serviced through the fault
path's per-block service and waited for before the next, and a pending item killed by the next fault batch
(casys-kaist/HUVM, uvm_gpu_replayable_faults.c)."""

from __future__ import annotations

import numpy as np
from huvmlab.sim.config import NodeConfig
from huvmlab.sim.scenario import SimResult, run_scenario
from huvmlab.sim.tenants import TenantSpec
from huvmlab.sim.workloads import make_trace

#: the prototype's local prefetch (uvm_prefetch_flags=1), a 4-block window of consecutive blocks
LOCAL4 = {"prefetch_mode": 1, "prefetch_chunks": 4, "prefetch_stride": 1}


def _run(ops: list[list[int]], op_ns: list[int], policy: str = "huvm-atc22") -> SimResult:
    node = NodeConfig.preset("h200")
    tr = make_trace("proto-prefetch", [np.array(o, dtype=np.int64) for o in ops], op_ns, 256)
    return run_scenario(node, [TenantSpec(0, tr, host_resident=True)], policy, policy_overrides=dict(LOCAL4),
                        sample_interval_ns=0)


def test_each_prefetched_block_pays_the_block_service_in_turn() -> None:
    """Op 0 faults block 0; its item brings blocks 1-4, one after another, each a block service and its copy:
    op 1 (no fault) waits for the last of them, at least four services after its fault."""
    res = _run([[0], [1, 2, 3, 4]], [0, 0])
    t = res.tenant(0)
    svc = NodeConfig.preset("h200").costs.fault_service_ns
    assert t.faults == 1
    assert t.inflight_wait_ns >= 3 * svc, f"waited {t.inflight_wait_ns} ns for 4 blocks (service {svc} ns)"


def test_our_prefetch_is_link_bound() -> None:
    """The same trace under huvm's own prefetch (asynchronous migrations): the window arrives at the link's
    rate, well before one block service per block."""
    res = _run([[0], [1, 2, 3, 4]], [0, 0], policy="huvm")
    svc = NodeConfig.preset("h200").costs.fault_service_ns
    assert res.tenant(0).faults == 1
    assert res.tenant(0).inflight_wait_ns < svc


def test_a_new_fault_batch_kills_the_pending_item() -> None:
    """Item A (after block 0) is running when the batches of blocks 100 and 200 come: B (100's window) waits
    behind A and is killed by C (200's); C runs when A ends. So 201-204 are prefetched and 101-102 fault (B kept
    and C dropped: 4 faults on 201-204; every item queued: none)."""
    res = _run([[0], [100], [200], [201, 202, 203, 204], [101, 102]], [0, 0, 5_000_000, 0, 0])
    assert res.tenant(0).faults == 3 + 2


def test_the_running_item_is_never_killed() -> None:
    """Batches come while A runs, none pending behind it: A brings its whole window."""
    res = _run([[0], [100], [1, 2, 3, 4]], [0, 5_000_000, 0])
    assert res.tenant(0).faults == 2


def test_the_block_service_evicts_for_a_prefetched_block() -> None:
    """On a full GPU (8 chunks, pre-eviction off) the prototype's item still brings its window: its block service
    allocates with eviction (block_alloc_gpu_chunk), where huvm's worker never evicts for a prefetch. Op 0 faults
    8 blocks; its item brings 8-11 (evicting 0-3); op 1 touches 8-11 without a fault."""
    node = NodeConfig.preset("h200").with_gpu_memory(8 * 2**21, 0)
    tr = make_trace("proto-full", [np.arange(8, dtype=np.int64), np.arange(8, 12, dtype=np.int64)], [0, 0], 16)
    res = run_scenario(node, [TenantSpec(0, tr, host_resident=True)], "huvm-atc22",
                       policy_overrides={**LOCAL4, "preevict_chunks": 0}, sample_interval_ns=0)
    assert res.tenant(0).faults == 8
