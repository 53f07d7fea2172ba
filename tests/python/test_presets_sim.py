"""The `huvm` preset (the default) is not slower than the prototype's `huvm-atc22` in the simulator (by more
than huvmlab.sim.matrix.NOISE, 1 %).

docs/policy.md ("Measurements behind the `huvm` values") and docs/evaluation.md have the numbers; these tests keep them
from regressing: the shipped consolidation scenarios (pyctl/huvm/examples) and the calibration's Fig 9 runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from huvm.abi import lib
from huvmlab.experiment import run as run_experiment
from huvmlab.experiment.spec import load as load_spec
from huvmlab.sim import NodeConfig, SimNode, TenantSpec, calibrate, run_scenario, workloads
from huvmlab.sim.config import MIB
from huvmlab.sim.matrix import NOISE
from huvmlab.sim.replicate import fig9_node

EXAMPLES = Path(__file__).resolve().parents[2] / "pyctl" / "huvm" / "examples"
PAIR = ("huvm-atc22", "huvm")
GIB = 1 << 30


def _runtimes(example: str) -> dict[str, int]:
    """Foreground makespan (ns) of each of the two presets on a shipped example (no ideal, no stock)."""
    spec = load_spec(EXAMPLES / example)
    spec = replace(spec, policies=tuple(p for p in spec.policies if p.name in PAIR), ideal=False)
    res = run_experiment(spec)
    out = {}
    for name in PAIR:
        run = res.run(name)
        assert run is not None
        out[name] = run.foreground_runtime_ns()
    return out


@pytest.mark.parametrize("example", ["consolidation.toml", "two-harvesters.toml"])
def test_huvm_not_slower_than_prototype_on_consolidation(example: str) -> None:
    rt = _runtimes(example)
    assert 0 < rt["huvm"] <= rt["huvm-atc22"] * (1 + NOISE), rt


@pytest.mark.parametrize("spare_pct", [5, 40])
def test_huvm_not_slower_than_prototype_on_fig9(spare_pct: int) -> None:
    """The calibration's Fig 9 setup: GPUs 1-2 of a p3.8xlarge, PageRank-like harvester, harvestee leaving
    spare_pct free. At 40 % the former 16 / 8 pre-eviction reserve ran dry (2.37x over Base against the
    prototype's 3.21x on GPUs 0-1)."""
    node = fig9_node()
    harvester = workloads.pagerank(vertices=41_652_230, edges=4_900_000_000, iterations=6,
                                   edge_chunks_per_op=32, gathers_per_op=32, name="pagerank-twitter-like")
    alloc_mb = dict(calibrate.FIG9_SPARE)[spare_pct]
    tenants = [TenantSpec(0, harvester, role="harvester"), TenantSpec(1, static_bytes=alloc_mb * MIB, role="lender")]
    rt = {p: run_scenario(node, tenants, p).tenant(0).runtime_ns for p in PAIR}
    assert rt["huvm"] <= rt["huvm-atc22"] * (1 + NOISE), rt
    if spare_pct == 40:
        old = run_scenario(node, tenants, "huvm", policy_overrides={"preevict_chunks": 16, "preevict_batch": 8})
        assert old.tenant(0).runtime_ns > rt["huvm"] * 1.2     # the reserve that ran dry


def test_huvm_preset_values() -> None:
    """The values docs/policy.md justifies with the measurements above."""
    node = NodeConfig.preset("aws-p3.8xlarge").subset(2)
    with SimNode(node, "huvm") as sim:
        pol = sim.get_policy()
        assert (pol.preevict_chunks, pol.preevict_batch, pol.hysteresis_ms, pol.peer_usage_max_pct) == (64, 64, 5, 90)
        assert pol.peer_select == lib.HUVM_PEER_SELECT_FASTEST_LINK
        assert (pol.prefetch_mode, pol.prefetch_chunks, pol.prefetch_stride) == (lib.HUVM_PREFETCH_TWO_STAGE, 16, 2)
        assert pol.gpus[0].flags == (lib.HUVM_GPU_POLICY_PREEVICT_ON_PRESSURE | lib.HUVM_GPU_POLICY_LEND_ABOVE_PEAK |
                                     lib.HUVM_GPU_POLICY_PREFETCH_FEEDBACK | lib.HUVM_GPU_POLICY_PREFETCH_PROPORTIONAL)
        mem = node.gpus[0].memory_bytes - node.gpus[0].reserved_bytes  # what UVM can use: the core's memory
        assert pol.gpus[0].lend_reserve_bytes == max(mem // 20, min(GIB, mem // 16))
    small = node.with_gpu_memory(3 * GIB, 0)
    with SimNode(small, "huvm") as sim:
        assert sim.get_policy().gpus[0].lend_reserve_bytes == 3 * GIB // 16   # 192 MiB, not a quarter
