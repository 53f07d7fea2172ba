"""The schema of a simulated node's table (``[node]`` of an experiment, a ``--sim-config`` file): pydantic
models, every limit from the simulator's own header (``driver/sim/huvm_sim_cdef.h``, through cffi).

A table is ``preset`` plus overrides, or a whole node (``name``, ``gpus``, ``topology``); see
:meth:`huvm.sim.config.NodeConfig.from_dict`. Sizes are integers or strings in :mod:`huvm.units`' grammar.
"""

from __future__ import annotations

from typing import Annotated

from huvm import abi
from huvm.schema import FileModel, describe, size_value
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError

from .errors import SimConfigError

_lib = abi.lib
CHUNK = abi.CHUNK_SIZE
MAX_GPUS: int = _lib.HUVM_SIM_MAX_GPUS
MAX_MEMORY_BYTES: int = _lib.HUVM_SIM_MAX_MEMORY_BYTES
MAX_HOST_MEMORY_BYTES: int = _lib.HUVM_SIM_MAX_HOST_MEMORY_BYTES
MAX_MBYTE_PER_S: int = _lib.HUVM_SIM_MAX_MBYTE_PER_S
MAX_COST_NS: int = _lib.HUVM_SIM_MAX_COST_NS
MAX_LINK_COUNT: int = _lib.HUVM_SIM_MAX_LINK_COUNT
MAX_FAULT_BATCH: int = _lib.HUVM_SIM_MAX_FAULT_BATCH
MAX_FAULTS_PER_CHUNK: int = _lib.HUVM_SIM_MAX_FAULTS_PER_CHUNK
NVLINK_GENERATIONS = (1, 2, 3, 4)  # HUVM_LINK_NVLINK_1..4


def _gpu_preset(name: str) -> str:
    from ..traces.roofline import PRESETS

    if name not in PRESETS:
        raise ValueError(f"unknown GPU preset {name!r}; known: {', '.join(PRESETS)}")
    return name


def _nvlink_generation(n: int) -> int:
    if n not in NVLINK_GENERATIONS:
        raise ValueError(f"NVLink generation {n} is not 1..4")
    return n


GpuMemory = Annotated[int, BeforeValidator(size_value), Field(ge=CHUNK, le=MAX_MEMORY_BYTES)]
Reserve = Annotated[int, BeforeValidator(size_value), Field(ge=0, le=MAX_MEMORY_BYTES)]
Bandwidth = Annotated[int, Field(ge=1, le=MAX_MBYTE_PER_S)]
CostNs = Annotated[int, Field(ge=0, le=MAX_COST_NS)]


class GpuTable(FileModel):
    """One entry of ``gpus``."""

    name: str
    memory_bytes: GpuMemory
    reserved_bytes: Reserve | None = None
    pcie_mbyte_per_s: Bandwidth | None = None
    pcie_switch: Annotated[int, Field(ge=0, le=MAX_GPUS)] | None = None


class CostsTable(FileModel):
    """``[node.costs]``: the UVM costs of the model (docs/simulator.md, "Constants")."""

    fault_batch_ns: CostNs | None = None
    fault_service_ns: CostNs | None = None
    populate_ns: CostNs | None = None
    pcie_latency_ns: CostNs | None = None
    nvlink_latency_ns: CostNs | None = None
    fault_batch_max: Annotated[int, Field(ge=1, le=MAX_FAULT_BATCH)] | None = None
    faults_per_chunk: Annotated[int, Field(ge=1, le=MAX_FAULTS_PER_CHUNK)] | None = None
    peer_fault_service_ns: CostNs | None = None
    lend_chunk_ns: CostNs | None = None
    migrate_service_ns: CostNs | None = None
    evict_service_ns: CostNs | None = None
    prefetch_threshold: Annotated[int, Field(ge=1, le=100)] | None = None
    fault_entries_per_group: Annotated[int, Field(ge=0, le=16)] | None = None


class NodeTable(FileModel):
    """A node: ``preset`` plus overrides, or every field."""

    preset: str | None = None
    name: str | None = None
    source: str | None = None
    gpu_preset: Annotated[str, AfterValidator(_gpu_preset)] | None = None
    gpus: Annotated[list[GpuTable], Field(min_length=1, max_length=MAX_GPUS)] | None = None
    topology: list[list[str]] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=MAX_GPUS)] | None = None
    gpu_memory_bytes: GpuMemory | None = None
    gpu_reserved_bytes: Reserve | None = None
    host_memory_bytes: Annotated[int, BeforeValidator(size_value), Field(ge=0, le=MAX_HOST_MEMORY_BYTES)] | None \
        = None
    nvlink_generation: Annotated[int, AfterValidator(_nvlink_generation)] | None = None
    nvlink_mbyte_per_s_per_link: Bandwidth | None = None
    nvswitch: bool | None = None
    nvswitch_links: Annotated[int, Field(ge=0, le=MAX_LINK_COUNT)] | None = None
    pcie_switch_mbyte_per_s: Annotated[int, Field(ge=0, le=MAX_MBYTE_PER_S)] | None = None
    costs: CostsTable | None = None


def node_table(d: object) -> NodeTable:
    """d checked against :class:`NodeTable`; SimConfigError naming the first refused key otherwise."""
    try:
        return NodeTable.model_validate(d)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ""
        for part in err["loc"]:
            field += f"[{part}]" if isinstance(part, int) else ("." if field else "") + str(part)
        raise SimConfigError(describe(err, NodeTable), field=field or "node") from None
