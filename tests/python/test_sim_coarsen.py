"""huvmlab.sim.workloads.coarsen: a trace at the emulated node's granularity (k trace chunks per 2 MiB UVM block),
used to compare the simulator with the emulated node at the same granularity (docs/simulator.md, "Cross-check
against the emulated node")."""

from __future__ import annotations

import numpy as np
import pytest
from huvmlab.sim import NodeConfig, TenantSpec, run_scenario, workloads
from huvmlab.sim.config import GIB, MIB
from huvmlab.sim.errors import SimConfigError
from huvmlab.traces.trace import SimTrace


def _trace() -> SimTrace:
    # op 0 writes chunks 0, 1 (new data) and reads 5; op 1 reads 2, read-modify-writes 3 and reads 4;
    # chunk 4 is reserved at op 1 and released after it, chunk 5 released after op 1, the rest never
    per_op = [np.array([0, 1, 5]), np.array([2, 3, 4])]
    modes = np.array([1, 1, 0, 0, 2, 0], dtype=np.uint8)
    alloc = np.array([-1, -1, 0, 0, 1, 0], dtype=np.int32)
    free = np.array([-1, -1, -1, -1, 1, 1], dtype=np.int32)
    return workloads.make_trace("t", per_op, [10, 20], 6, modes, alloc, free)


def test_blocks_of_k_chunks() -> None:
    c = workloads.coarsen(_trace(), 2)
    assert c.n_chunks == 3 and c.n_ops == 2
    assert c.op_first_touch.tolist() == [0, 2, 4]
    assert c.touch_chunk.tolist() == [0, 2, 1, 2]
    # block 0: both chunks written with new data -> 1; block 2 (chunk 5 read) -> 0; block 1 (read + rmw) -> 2;
    # block 2 in op 1 (chunk 4 read) -> 0
    assert c.touch_mode.tolist() == [1, 0, 2, 0]
    # a block is reserved with its first chunk, released after its last one, never if one chunk never is
    assert c.chunk_alloc_op.tolist() == [-1, 0, 0]
    assert c.chunk_free_op.tolist() == [-1, -1, 1]
    assert c.op_time_ns.tolist() == [10, 20]


def test_k_one_is_the_trace_and_a_partial_last_block_counts() -> None:
    t = _trace()
    assert workloads.coarsen(t, 1) is t
    c = workloads.coarsen(t, 4)
    assert c.n_chunks == 2
    assert c.touch_chunk.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("k", [0, -2, 1.5, True, "8"])
def test_bad_k_is_refused(k: object) -> None:
    with pytest.raises(SimConfigError) as e:
        workloads.coarsen(_trace(), k)  # type: ignore[arg-type]
    assert e.value.field == "k"


def test_coarse_run_counts_blocks() -> None:
    # a 3 GiB loop on a 2 GiB GPU under stock: at 4 chunks per block on a GPU of 1/4 the memory the same
    # loop evicts about as many chunk equivalents, counted in blocks
    loop = workloads.streaming(3 * GIB, passes=3, chunks_per_op=8)
    node = NodeConfig.preset("aws-p3.8xlarge").subset(1)
    full = run_scenario(node.with_gpu_memory(2 * GIB + 256 * MIB, 256 * MIB), [TenantSpec(0, loop)], "stock")
    coarse = run_scenario(node.with_gpu_memory((2 * GIB + 256 * MIB) // 4, 64 * MIB),
                          [TenantSpec(0, workloads.coarsen(loop, 4))], "stock")
    a = full.stats["gpus"][0]["evict_to_host"]
    b = coarse.stats["gpus"][0]["evict_to_host"]
    assert a > 0 and b > 0
    assert abs(b * 4 - a) <= 0.05 * a
