"""The simulated multi-GPU node (driver/sim in C, with the real policy core): docs/simulator.md.

    from huvm.sim import NodeConfig, TenantSpec, run_comparison, workloads
    cmp = run_comparison("aws-p3.8xlarge", [TenantSpec(0, workloads.streaming(20 << 30, 3), role="harvester"),
                                            TenantSpec(1, static_bytes=2 << 30, role="lender")])

Library API: :class:`NodeConfig` (presets), :class:`TenantSpec`, :class:`SimNode` (one node, ``ioctl`` through
the core's dispatch), :func:`run_scenario` -> :class:`SimResult`, :func:`run_comparison` -> :class:`Comparison`,
:mod:`huvm.sim.workloads` (synthetic traces). Errors: :mod:`huvm.sim.errors`.
"""

from .config import CHUNK_BYTES, GIB, MIB, PRESETS, Costs, GpuSpec, NodeConfig, parse_topo, preset_names
from .errors import SimConfigError, SimRunError, SimTraceError, SimUnavailable
from .node import SimNode
from .scenario import POLICIES, Comparison, MemorySeries, SimResult, TenantResult, run_comparison, run_scenario
from .tenants import SimTraceLike, TenantSpec

__all__ = [
    "CHUNK_BYTES", "GIB", "MIB", "POLICIES", "PRESETS", "Comparison", "Costs", "GpuSpec", "MemorySeries",
    "NodeConfig", "SimConfigError", "SimNode", "SimResult", "SimRunError", "SimTraceError", "SimTraceLike",
    "SimUnavailable", "TenantResult", "TenantSpec", "parse_topo", "preset_names", "run_comparison",
    "run_scenario",
]
