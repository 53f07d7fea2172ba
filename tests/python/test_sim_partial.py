"""Partial-block migration (issue 24, docs/simulator.md "Partial-block migration"): a touch names the 64 KiB
groups of its 2 MiB block; a fault copies only the groups missing on the GPU, widened by UVM's density
prefetcher (uvm_perf_prefetch.c's tree rule at uvm_perf_prefetch_threshold, 51 % by default); eviction writes
back only the resident groups."""

from __future__ import annotations

import numpy as np
import pytest
from huvmlab.sim import NodeConfig, TenantSpec, run_scenario, workloads
from huvmlab.sim._native import lib
from huvmlab.sim.config import MIB, Costs, GpuSpec
from huvmlab.sim.errors import SimTraceError

GROUP = 64 * 1024
ALL = 0xFFFFFFFF


def _node(usable: int, threshold: int = 51) -> NodeConfig:
    return NodeConfig("one", (GpuSpec("g", usable + 256 * MIB, 256 * MIB, 12_000),), (("X",),),
                      costs=Costs(prefetch_threshold=threshold))


def _run(rows: list[list[int]], masks: list[list[int]] | None, n_chunks: int, usable: int = 64 * MIB,
         host: bool = True, threshold: int = 51) -> tuple[dict[str, int], int, int]:
    per_op = [np.array(r, dtype=np.int64) for r in rows]
    pages = None if masks is None else np.concatenate([np.array(m, dtype=np.uint32) for m in masks])
    tr = workloads.make_trace("t", per_op, 1000, n_chunks, pages=pages)
    res = run_scenario(_node(usable, threshold), [TenantSpec(0, tr, host_resident=host)], "stock",
                       sample_interval_ns=0)
    return res.traffic_bytes(), res.tenant(0).faults, res.tenant(0).runtime_ns


def _region(resident: int, faulted: int, threshold: int = 51) -> int:
    """uvm_perf_prefetch.c's compute_prefetch_region at 32 leaves, written from the rule's definition: for
    each faulted leaf, the largest aligned subtree holding it in which more than ``threshold`` % of the leaves
    are resident or faulted."""
    occ = resident | faulted
    out = faulted
    for leaf in range(32):
        if not faulted >> leaf & 1:
            continue
        best = 0
        for size in (1, 2, 4, 8, 16, 32):
            lo = leaf // size * size
            m = ((1 << size) - 1) << lo
            if (occ & m).bit_count() * 100 > size * threshold:
                best = m
        out |= best
    return out & ALL


def test_sparse_touch_copies_only_its_groups_and_other_groups_fault_again() -> None:
    # op 0 reads group 0 of block 0, op 1 group 31 of the same block, op 2 group 31 again (resident)
    traffic, faults, _ = _run([[0], [0], [0]], [[1], [1 << 31], [1 << 31]], 1)
    assert traffic["pcie_h2d"] == 2 * GROUP
    assert faults == 2
    whole, wfaults, _ = _run([[0], [0], [0]], None, 1)
    assert whole["pcie_h2d"] == 2 * MIB and wfaults == 1


def test_prefetcher_widens_a_dense_region_by_the_51_percent_rule() -> None:
    # groups 0..16 resident (17 of 32 > 51 %): a fault on group 17 takes the whole block
    resident = (1 << 17) - 1
    assert _region(resident, 1 << 17) == ALL
    traffic, _, _ = _run([[0], [0]], [[resident], [1 << 17]], 1)
    assert traffic["pcie_h2d"] == 2 * MIB
    # 16 of 32 is not more than 51 %: only the 16-group half holding the fault (9 of 16 counted) comes
    resident = 0xFF
    want = _region(resident, 1 << 8)
    assert want == 0xFFFF
    traffic, _, _ = _run([[0], [0]], [[resident], [1 << 8]], 1)
    assert traffic["pcie_h2d"] == 16 * GROUP


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold", [1, 25, 51, 100])
def test_prefetch_region_matches_the_rule_on_random_masks(seed: int, threshold: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        res = int(rng.integers(0, 1 << 32)) & int(rng.integers(0, 1 << 32))
        flt = int(rng.integers(1, 1 << 32)) & int(rng.integers(1, 1 << 32)) & ~res & ALL
        if not flt:
            continue
        assert lib.huvm_sim_prefetch_region(res, flt, threshold) == _region(res, flt, threshold)


def test_prefetch_threshold_one_takes_the_whole_block_on_any_fault() -> None:
    # the HUVM prototype's driver sets uvm_perf_prefetch_threshold to 1: one 64 KiB group of 32 is more than
    # 1 % of the block, so a sparse fault brings the whole block and the other groups never fault
    rows, masks = [[0], [0], [0]], [[1], [1 << 31], [1 << 15]]
    traffic, faults, _ = _run(rows, masks, 1, threshold=1)
    assert traffic["pcie_h2d"] == 2 * MIB and faults == 1
    sparse, sfaults, _ = _run(rows, masks, 1)
    assert sparse["pcie_h2d"] == 3 * GROUP and sfaults == 3
    # at 100 % nothing is ever more than the whole region: only the faulted groups come
    exact, efaults, _ = _run([[0]], [[0b1011]], 1, threshold=100)
    assert exact["pcie_h2d"] == 3 * GROUP and efaults == 1


def test_the_default_threshold_is_upstreams_in_c_and_python() -> None:
    assert Costs().prefetch_threshold == lib.HUVM_SIM_PREFETCH_THRESHOLD == 51


@pytest.mark.parametrize("bad", [0, 101, True, 51.0])
def test_prefetch_threshold_out_of_range_is_refused(bad: object) -> None:
    from huvmlab.sim.errors import SimConfigError
    with pytest.raises(SimConfigError) as e:
        run_scenario(_node(64 * MIB).with_costs(prefetch_threshold=bad), [TenantSpec(0, None)], "stock",  # type: ignore[arg-type]
                     sample_interval_ns=0)
    assert e.value.field == "costs.prefetch_threshold"


def test_eviction_writes_back_only_resident_groups() -> None:
    # 64 blocks on a GPU with room for 32, each read at one group: evictions carry one group each
    n = 64
    rows = [[c] for c in range(n)] * 2
    traffic, _, _ = _run(rows, [[1]] * (2 * n), n, usable=32 * 2 * MIB)
    assert traffic["pcie_d2h"] > 0
    assert traffic["pcie_d2h"] % GROUP == 0 and traffic["pcie_d2h"] <= 2 * n * GROUP
    whole, _, _ = _run(rows, None, n, usable=32 * 2 * MIB)
    assert whole["pcie_d2h"] == traffic["pcie_d2h"] // GROUP * 2 * MIB


def test_whole_block_masks_are_the_whole_block_model() -> None:
    tr = workloads.random_access(256 * MIB, 400, seed=5)
    full = workloads.make_trace("t", [tr.touch_chunk[a:b].astype(np.int64) for a, b in
                                      zip(tr.op_first_touch[:-1], tr.op_first_touch[1:], strict=True)],
                                tr.op_time_ns, tr.n_chunks, pages=np.full(tr.n_touches, ALL, np.uint32))
    a = run_scenario(_node(64 * MIB), [TenantSpec(0, tr)], "stock", sample_interval_ns=0)
    b = run_scenario(_node(64 * MIB), [TenantSpec(0, full)], "stock", sample_interval_ns=0)
    assert a.tenant(0).runtime_ns == b.tenant(0).runtime_ns and a.traffic == b.traffic


def test_bad_masks_are_refused() -> None:
    tr = workloads.make_trace("t", [np.array([0], dtype=np.int64)], 1000, 1, pages=np.array([0], np.uint32))
    with pytest.raises(SimTraceError) as e:
        run_scenario(_node(64 * MIB), [TenantSpec(0, tr)], "stock", sample_interval_ns=0)
    assert "touch_pages" in str(e.value.field)


def test_never_written_groups_are_zero_filled_not_copied() -> None:
    # not host-resident: op 0 first-touches group 0, op 1 group 31 (populated, no copy, no block service);
    # 64 such blocks on room for 32: the evictions write back 2 groups per block, never 2 MiB
    n = 64
    rows = [[c] for c in range(n)] * 2
    masks = [[1]] * n + [[1 << 31]] * n
    traffic, faults, runtime = _run(rows, masks, n, usable=32 * 2 * MIB, host=False)
    assert faults == 2 * n
    assert traffic["pcie_d2h"] > 0 and traffic["pcie_d2h"] % GROUP == 0
    assert traffic["pcie_d2h"] <= n * 2 * GROUP
    # group 31 never held data anywhere: nothing is copied to the GPU, evicted block or not
    assert traffic["pcie_h2d"] == 0
    # each fault only populated: no block service was charged (64 faults x 236.9 us would be 15.2 ms)
    assert runtime < 64 * Costs().fault_service_ns


def _batches(masks: list[int] | None, n: int, entries_per_group: int) -> tuple[int, int]:
    tr = workloads.make_trace("t", [np.arange(n, dtype=np.int64)], 1000, n,
                              pages=None if masks is None else np.array(masks, dtype=np.uint32))
    node = _node(64 * MIB).with_costs(fault_entries_per_group=entries_per_group)
    res = run_scenario(node, [TenantSpec(0, tr, host_resident=True)], "stock", sample_interval_ns=0)
    return res.tenant(0).faults, res.stats["gpus"][0]["fault_batches"]


def test_fault_batches_filled_by_entries_per_group() -> None:
    # by default a batch holds fault_batch_max (256) faulted blocks: 20 whole-block faults are one batch
    assert _batches(None, 20, 0) == (20, 1)
    # one entry per 4 KiB page: a whole block (512 entries) fills a batch on its own
    assert _batches(None, 20, 16) == (20, 20)
    # one 64 KiB group per fault: 16 entries each, 16 faults to a batch of 256
    assert _batches([1] * 20, 20, 16) == (20, 2)
    # two groups per fault: 32 entries, 8 faults to a batch
    assert _batches([3] * 20, 20, 16) == (20, 3)


@pytest.mark.parametrize("bad", [17, -1, True])
def test_fault_entries_per_group_out_of_range_is_refused(bad: object) -> None:
    from huvmlab.sim.errors import SimConfigError
    with pytest.raises(SimConfigError) as e:
        run_scenario(_node(64 * MIB).with_costs(fault_entries_per_group=bad), [TenantSpec(0, None)],  # type: ignore[arg-type]
                     "stock", sample_interval_ns=0)
    assert e.value.field == "costs.fault_entries_per_group"
