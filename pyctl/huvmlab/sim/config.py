"""Simulated node configurations: GPUs, the NVLink topology (``nvidia-smi topo -m`` style), PCIe, UVM costs.

Presets (sources in docs/simulator.md, "Node presets"): ``aws-p3.8xlarge`` (the HUVM prototype's machine),
``dgx-a100`` (= ``dgx-a100-40g``), ``dgx-a100-80g``, ``hgx-h100``, and ``ariadne-a5000`` (the single-GPU
PCIe 4 machine of the ARIADNE measurements, for calibration). Bandwidths are MB/s (10^6 B/s) per direction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from huvm.units import format_size

from .errors import SimConfigError
from .measured import COST_KEYS, NodeMeasurement, derive, slug
from .measured import H100_COSTS as _H100
from .measured import REFERENCE_COSTS as _REF
from .measured import REFERENCE_RECORD as _H200

MIB = 1 << 20
GIB = 1 << 30
CHUNK_BYTES = 2 * MIB

# Link types: the ABI's HUVM_LINK_* values.
LINK_NONE, LINK_PCIE, LINK_NVLINK_1, LINK_NVLINK_2, LINK_NVLINK_3, LINK_NVLINK_4, LINK_C2C, LINK_NVLINK_5 = range(8)
NVLINK_GENERATIONS: dict[int, int] = {1: LINK_NVLINK_1, 2: LINK_NVLINK_2, 3: LINK_NVLINK_3, 4: LINK_NVLINK_4,
                                      5: LINK_NVLINK_5}
#: topology labels without a direct NVLink: PIX/PXB (a PCIe switch: P2P possible) and the rest (no peer path).
PCIE_P2P_LABELS = ("PIX", "PXB")
NO_PEER_LABELS = ("PHB", "NODE", "SYS", "SOC")
_NV_LABEL = re.compile(r"^NV(\d+)$")


def _int_in(v: object, lo: int, hi: int) -> bool:
    """v is an int (not a bool) in lo..hi."""
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


@dataclass(frozen=True)
class Costs:
    """UVM costs of the model, by path (docs/simulator.md, "Constants", has each one's source). The defaults are
    derived from the project's H200 measurement (:mod:`huvm.sim.measured`) and apply to every preset."""

    fault_batch_ns: int = _REF["fault_batch_ns"]            # fixed cost per replayable fault batch (isolated fault)
    fault_service_ns: int = _REF["fault_service_ns"]        # per demand-faulted 2 MiB block, serial per GPU
    populate_ns: int = 3_000            # first touch: zero-fill a 2 MiB chunk (assumption)
    pcie_latency_ns: int = _REF["pcie_latency_ns"]          # G10 PCIe_latency_us
    nvlink_latency_ns: int = 1_000      # assumption (no stored measurement)
    fault_batch_max: int = 256          # uvm_perf_fault_batch_count
    faults_per_chunk: int = 1           # fault entries per faulted chunk after coalescing
    peer_fault_service_ns: int = _REF["peer_fault_service_ns"]  # per faulted block a peer holds: + its unmap
    lend_chunk_ns: int = 2_330          # lender's HBM time per guest chunk copied in or out: 2 MiB / 900 GB/s
    migrate_service_ns: int = _REF["migrate_service_ns"]    # per block moved without a fault (prefetch, to a peer)
    evict_service_ns: int = _REF["evict_service_ns"]        # per block moved GPU -> host (eviction, give-back)
    prefetch_threshold: int = 51        # uvm_perf_prefetch_threshold (%): upstream's default
    fault_entries_per_group: int = 0    # a fault batch's fill: 0 a block per entry; 16 a 4 KiB page per entry


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    reserved_bytes: int = 512 * MIB     # CUDA context and driver (docs/simulator.md, "Constants")
    pcie_mbyte_per_s: int = 12_000
    pcie_switch: int = 0                # 1..16: GPUs with the same id share that PCIe switch's uplink; 0: own link


@dataclass(frozen=True)
class NodeConfig:
    """One node. ``topology[a][b]`` is an ``nvidia-smi topo -m`` label: ``X`` on the diagonal, ``NV<n>`` for
    n NVLink links, ``PIX``/``PXB`` (PCIe peer-to-peer through a switch), ``PHB``/``NODE``/``SYS`` (no peer
    path). With ``nvswitch`` every GPU's NVLink traffic shares one port of ``nvswitch_links`` links."""

    name: str
    gpus: tuple[GpuSpec, ...]
    topology: tuple[tuple[str, ...], ...]
    nvlink_generation: int = 2
    nvlink_mbyte_per_s_per_link: int = 25_000
    nvswitch: bool = False
    nvswitch_links: int = 0
    host_memory_bytes: int = 0          # 0: unlimited
    pcie_switch_mbyte_per_s: int = 0    # a shared PCIe switch's uplink per direction; 0: its GPUs' slowest link
    gpu_preset: str = "v100"            # roofline preset of huvm.traces (op times of loaded traces)
    costs: Costs = field(default_factory=Costs)
    source: str = ""

    # ---- construction ----

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> NodeConfig:
        """A preset by name (see :data:`PRESETS`), with dataclass fields replaced by ``overrides``."""
        key = name.strip().lower()
        key = PRESET_ALIASES.get(key, key)
        if key not in PRESETS:
            raise SimConfigError(f"unknown node preset {name!r}; known: {', '.join(preset_names())}",
                                 field="preset")
        cfg = PRESETS[key]
        return replace(cfg, **overrides) if overrides else cfg

    def with_gpu_memory(self, memory_bytes: int, reserved_bytes: int | None = None,
                        gpus: Sequence[int] | None = None) -> NodeConfig:
        """The same node with other GPU memory sizes (all GPUs, or those listed): for scaled-down runs."""
        sel = set(range(len(self.gpus)) if gpus is None else gpus)
        new = tuple(replace(g, memory_bytes=memory_bytes,
                            reserved_bytes=g.reserved_bytes if reserved_bytes is None else reserved_bytes)
                    if i in sel else g for i, g in enumerate(self.gpus))
        return replace(self, gpus=new)

    def with_costs(self, **costs: int) -> NodeConfig:
        return replace(self, costs=replace(self.costs, **costs))

    def subset(self, n: int) -> NodeConfig:
        """The first n GPUs of the node."""
        if not 1 <= n <= len(self.gpus):
            raise SimConfigError(f"cannot take {n} of {len(self.gpus)} GPUs", field="gpus")
        return replace(self, name=f"{self.name}[:{n}]", gpus=self.gpus[:n],
                       topology=tuple(tuple(r[:n]) for r in self.topology[:n]))

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def switch_mbyte_per_s(self, switch: int) -> int:
        """Uplink bandwidth of PCIe switch ``switch`` (each direction)."""
        if self.pcie_switch_mbyte_per_s:
            return self.pcie_switch_mbyte_per_s
        return min(g.pcie_mbyte_per_s for g in self.gpus if g.pcie_switch == switch)

    def usable_bytes(self, gpu: int) -> int:
        """Memory UVM can use on gpu (whole 2 MiB chunks)."""
        g = self.gpus[gpu]
        return (g.memory_bytes - g.reserved_bytes) // CHUNK_BYTES * CHUNK_BYTES

    # ---- validation ----

    def link(self, a: int, b: int) -> tuple[int, int, int]:
        """(HUVM_LINK_* type, link count, MB/s per direction) between a and b per the topology."""
        label = self.topology[a][b].strip().upper()
        m = _NV_LABEL.match(label)
        if m:
            n = int(m.group(1))
            return NVLINK_GENERATIONS[self.nvlink_generation], n, n * self.nvlink_mbyte_per_s_per_link
        if label in PCIE_P2P_LABELS:
            return LINK_PCIE, 0, min(self.gpus[a].pcie_mbyte_per_s, self.gpus[b].pcie_mbyte_per_s)
        return LINK_NONE, 0, 0

    def validate(self) -> None:
        """Raise :class:`SimConfigError` naming the first refused field."""
        from . import schema as lim  # the simulator's limits (huvm_sim_cdef.h)

        n = len(self.gpus)
        if not 1 <= n <= lim.MAX_GPUS:
            raise SimConfigError(f"{n} GPUs; a node has 1..{lim.MAX_GPUS}", field="gpus")
        for i, g in enumerate(self.gpus):
            if not isinstance(g.memory_bytes, int) or not CHUNK_BYTES <= g.memory_bytes <= lim.MAX_MEMORY_BYTES:
                raise SimConfigError(f"memory {g.memory_bytes!r} bytes is not in "
                                     f"{format_size(CHUNK_BYTES)}..{format_size(lim.MAX_MEMORY_BYTES)}",
                                     field=f"gpus[{i}].memory_bytes")
            if not isinstance(g.reserved_bytes, int) or g.reserved_bytes < 0:
                raise SimConfigError(f"reserve {g.reserved_bytes!r} bytes is negative",
                                     field=f"gpus[{i}].reserved_bytes")
            if g.memory_bytes - g.reserved_bytes < CHUNK_BYTES:
                raise SimConfigError(f"reserve {g.reserved_bytes} bytes leaves less than one 2 MiB chunk of the "
                                     f"GPU's {g.memory_bytes} bytes", field=f"gpus[{i}].reserved_bytes")
            if not isinstance(g.pcie_mbyte_per_s, int) or not 0 < g.pcie_mbyte_per_s <= lim.MAX_MBYTE_PER_S:
                raise SimConfigError(f"PCIe bandwidth {g.pcie_mbyte_per_s!r} MB/s is not in 1..{lim.MAX_MBYTE_PER_S}",
                                     field=f"gpus[{i}].pcie_mbyte_per_s")
            if not isinstance(g.pcie_switch, int) or not 0 <= g.pcie_switch <= lim.MAX_GPUS:
                raise SimConfigError(f"PCIe switch {g.pcie_switch!r} is not in 0..{lim.MAX_GPUS}",
                                     field=f"gpus[{i}].pcie_switch")
        if not isinstance(self.pcie_switch_mbyte_per_s, int) or \
                not 0 <= self.pcie_switch_mbyte_per_s <= lim.MAX_MBYTE_PER_S:
            raise SimConfigError(f"{self.pcie_switch_mbyte_per_s!r} MB/s is not in 0..{lim.MAX_MBYTE_PER_S}",
                                 field="pcie_switch_mbyte_per_s")
        if self.nvlink_generation not in NVLINK_GENERATIONS:
            raise SimConfigError(f"NVLink generation {self.nvlink_generation} is not 1..4",
                                 field="nvlink_generation")
        if not isinstance(self.nvlink_mbyte_per_s_per_link, int) or \
                not 0 < self.nvlink_mbyte_per_s_per_link <= lim.MAX_MBYTE_PER_S:
            raise SimConfigError(f"NVLink bandwidth {self.nvlink_mbyte_per_s_per_link!r} MB/s per link is not in "
                                 f"1..{lim.MAX_MBYTE_PER_S}", field="nvlink_mbyte_per_s_per_link")
        if len(self.topology) != n or any(len(r) != n for r in self.topology):
            raise SimConfigError(f"the topology matrix must be {n}x{n}", field="topology")
        for a in range(n):
            for b in range(n):
                label = str(self.topology[a][b]).strip().upper()
                f = f"topology[{a}][{b}]"
                if a == b:
                    if label != "X":
                        raise SimConfigError(f"the diagonal must be 'X', not {label!r}", field=f)
                    continue
                m = _NV_LABEL.match(label)
                if m is None and label not in PCIE_P2P_LABELS + NO_PEER_LABELS:
                    raise SimConfigError(f"unknown topology label {label!r} (NV<n>, PIX, PXB, PHB, NODE, SYS)",
                                         field=f)
                if m is not None and not 1 <= int(m.group(1)) <= lim.MAX_LINK_COUNT:
                    raise SimConfigError(f"{label}: link count must be 1..{lim.MAX_LINK_COUNT}", field=f)
                if label != str(self.topology[b][a]).strip().upper():
                    raise SimConfigError(f"{label!r} differs from topology[{b}][{a}] "
                                         f"{self.topology[b][a]!r}", field=f)
                if m is not None and int(m.group(1)) * self.nvlink_mbyte_per_s_per_link > lim.MAX_MBYTE_PER_S:
                    raise SimConfigError(f"{label}: link bandwidth too large", field=f)
        if self.nvswitch and not 0 < self.nvswitch_links * self.nvlink_mbyte_per_s_per_link <= lim.MAX_MBYTE_PER_S:
            raise SimConfigError("an NVSwitch node needs nvswitch_links >= 1", field="nvswitch_links")
        if not isinstance(self.host_memory_bytes, int) or not 0 <= self.host_memory_bytes <= lim.MAX_HOST_MEMORY_BYTES:
            raise SimConfigError(f"host memory {self.host_memory_bytes!r} bytes is not in "
                                 f"0..{format_size(lim.MAX_HOST_MEMORY_BYTES)}",
                                 field="host_memory_bytes")
        c = self.costs
        for name in ("fault_batch_ns", "fault_service_ns", "populate_ns", "pcie_latency_ns", "nvlink_latency_ns",
                     "peer_fault_service_ns", "lend_chunk_ns", "migrate_service_ns", "evict_service_ns"):
            v = getattr(c, name)
            if not _int_in(v, 0, lim.MAX_COST_NS):
                raise SimConfigError(f"{v!r} ns is not in 0..{lim.MAX_COST_NS}", field=f"costs.{name}")
        top = lim.MAX_FAULT_BATCH
        if not _int_in(c.fault_batch_max, 1, top):
            raise SimConfigError(f"{c.fault_batch_max!r} is not in 1..{top}", field="costs.fault_batch_max")
        top = lim.MAX_FAULTS_PER_CHUNK
        if not _int_in(c.faults_per_chunk, 1, top):
            raise SimConfigError(f"{c.faults_per_chunk!r} is not in 1..{top}", field="costs.faults_per_chunk")
        if not _int_in(c.prefetch_threshold, 1, 100):
            raise SimConfigError(f"{c.prefetch_threshold!r} is not in 1..100 (%)", field="costs.prefetch_threshold")
        if not _int_in(c.fault_entries_per_group, 0, 16):
            raise SimConfigError(f"{c.fault_entries_per_group!r} is not in 0..16",
                                 field="costs.fault_entries_per_group")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpus": [vars(g).copy() for g in self.gpus],
            "topology": [list(r) for r in self.topology],
            "nvlink_generation": self.nvlink_generation,
            "nvlink_mbyte_per_s_per_link": self.nvlink_mbyte_per_s_per_link,
            "nvswitch": self.nvswitch,
            "nvswitch_links": self.nvswitch_links,
            "host_memory_bytes": self.host_memory_bytes,
            "pcie_switch_mbyte_per_s": self.pcie_switch_mbyte_per_s,
            "gpu_preset": self.gpu_preset,
            "costs": vars(self.costs).copy(),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeConfig:
        """Build from a mapping (a TOML table): ``preset`` plus overrides, or every field, checked against
        :class:`huvm.sim.schema.NodeTable` (no coercion: ``gpu_count = "4"``, ``4.7`` or ``true`` is refused;
        sizes are integers or strings in :mod:`huvm.units`' grammar, ``"16GiB"``). Errors name the key."""
        from .schema import node_table

        table = node_table(dict(d))
        given = table.model_dump(exclude_unset=True)
        gpus = given.pop("gpus", None)
        costs = given.pop("costs", None)
        mem = given.pop("gpu_memory_bytes", None)
        res = given.pop("gpu_reserved_bytes", None)
        count = given.pop("gpu_count", None)
        preset = given.pop("preset", None)
        if "topology" in given:
            given["topology"] = tuple(tuple(r) for r in given["topology"])
        if preset is None:
            if gpus is None or "topology" not in given or "name" not in given:
                raise SimConfigError("a node needs 'preset', or 'name', 'gpus' and 'topology'", field="preset")
            cfg = cls(gpus=(), **given)
        else:
            cfg = replace(cls.preset(preset), **given)
        if gpus is not None:
            cfg = replace(cfg, gpus=tuple(GpuSpec(**{k: v for k, v in g.items() if v is not None}) for g in gpus))
        if costs is not None:
            cfg = replace(cfg, costs=replace(cfg.costs, **{k: v for k, v in costs.items() if v is not None}))
        if count is not None:
            if count > cfg.gpu_count:
                raise SimConfigError(f"{count} is not in 1..{cfg.gpu_count} (the GPUs of {cfg.name})",
                                     field="gpu_count")
            cfg = cfg.subset(count)
        if mem is not None:
            cfg = cfg.with_gpu_memory(mem, res)
        elif res is not None:
            cfg = replace(cfg, gpus=tuple(replace(g, reserved_bytes=res) for g in cfg.gpus))
        try:
            cfg.validate()
        except SimConfigError as exc:
            # a GPU field set for every GPU by an override: name the key that was written
            overrides = {"memory_bytes": ("gpu_memory_bytes", mem), "reserved_bytes": ("gpu_reserved_bytes", res)}
            key, written = overrides.get(exc.path[-1] if exc.path[:1] == ("gpus",) else "", ("", None))
            if written is not None:
                raise SimConfigError(exc.reason, field=key) from None
            raise
        return cfg


def _matrix(rows: str) -> tuple[tuple[str, ...], ...]:
    """Parse the GPU part of ``nvidia-smi topo -m`` (header line first, one row per GPU)."""
    lines = [ln.split() for ln in rows.strip().splitlines()]
    n = len(lines) - 1
    return tuple(tuple(ln[1:1 + n]) for ln in lines[1:])


def parse_topo(text: str) -> tuple[tuple[str, ...], ...]:
    """The GPU-to-GPU block of ``nvidia-smi topo -m`` output (other columns and legend ignored)."""
    rows = [r for r in (ln.split() for ln in text.strip().splitlines())
            if len(r) > 1 and re.fullmatch(r"GPU\d+", r[0]) and not r[1].startswith("GPU")]
    n = len(rows)
    if n == 0:
        raise SimConfigError("no 'GPU<n>' rows in the topology text", field="topology")
    mat = tuple(tuple(r[1:1 + n]) for r in rows)
    if any(len(r) != n for r in mat):
        raise SimConfigError("a GPU row is shorter than the GPU count", field="topology")
    return mat


def _uniform(n: int, label: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple("X" if a == b else label for b in range(n)) for a in range(n))


# The HUVM artifact's docs/README.md (github.com/casys-kaist/HUVM): GPU0-GPU3, GPU1-GPU2, GPU2-GPU3 NV2; the
# other pairs NV1.
_P3_TOPO = _matrix("""
      GPU0 GPU1 GPU2 GPU3
GPU0  X    NV1  NV1  NV2
GPU1  NV1  X    NV2  NV1
GPU2  NV1  NV2  X    NV2
GPU3  NV2  NV1  NV2  X
""")

# DGX-1 with V100 (= AWS p3.16xlarge): the hybrid cube-mesh. Each GPU has NVLink to four others (NV1 or NV2:
# its six links), none to the other three, which sit behind the other CPU socket (SYS: no peer-to-peer path).
# GPU0's links (NV1 to GPUs 1 and 2, NV2 to GPUs 3 and 4) and GPU1's (NV2 to 2 and 5, NV1 to 3) as in the
# topology NCCL dumped on a DGX-1 V100 (github.com/NVIDIA/nccl/issues/671); GPUs 0-3 are p3.8xlarge's.
_DGX1_TOPO = _matrix("""
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
GPU0  X    NV1  NV1  NV2  NV2  SYS  SYS  SYS
GPU1  NV1  X    NV2  NV1  SYS  NV2  SYS  SYS
GPU2  NV1  NV2  X    NV2  SYS  SYS  NV1  SYS
GPU3  NV2  NV1  NV2  X    SYS  SYS  SYS  NV1
GPU4  NV2  SYS  SYS  SYS  X    NV1  NV1  NV2
GPU5  SYS  NV2  SYS  SYS  NV1  X    NV2  NV1
GPU6  SYS  SYS  NV1  SYS  NV1  NV2  X    NV2
GPU7  SYS  SYS  SYS  NV1  NV2  NV1  NV2  X
""")

# 4x L40S on PCIe 4 only (no NVLink: the L40S has none, NVIDIA L40S datasheet): two PCIe switches of two GPUs
# each (peer-to-peer through the switch: PIX), the switches under different CPU sockets (SYS: no peer path).
_L40S_TOPO = _matrix("""
      GPU0 GPU1 GPU2 GPU3
GPU0  X    PIX  SYS  SYS
GPU1  PIX  X    SYS  SYS
GPU2  SYS  SYS  X    PIX
GPU3  SYS  SYS  PIX  X
""")

# 4x H100 NVL: NVLink bridges join pairs only (three bridges = 12 NVLink 4 links, 600 GB/s bidirectional: NVIDIA
# H100 NVL product brief); the pairs sit under different CPU sockets (no peer path between them).
_H100_NVL_TOPO = _matrix("""
      GPU0 GPU1 GPU2 GPU3
GPU0  X    NV12 SYS  SYS
GPU1  NV12 X    SYS  SYS
GPU2  SYS  SYS  X    NV12
GPU3  SYS  SYS  NV12 X
""")

# Mixed: 2x A100 40 GB PCIe bridged (NV12: A100 PCIe NVLink bridge, 600 GB/s bidirectional) and 2x H100 80 GB
# PCIe bridged (NV12), all four behind one PCIe switch tree (peer-to-peer over PCIe between the pairs: PXB).
_MIXED_TOPO = _matrix("""
      GPU0 GPU1 GPU2 GPU3
GPU0  X    NV12 PXB  PXB
GPU1  NV12 X    PXB  PXB
GPU2  PXB  PXB  X    NV12
GPU3  PXB  PXB  NV12 X
""")

def _hbm_ns(gbyte_per_s: int) -> int:
    """A lender's HBM time for one 2 MiB guest copy (read or written once) at the GPU's memory bandwidth."""
    return -(-CHUNK_BYTES // gbyte_per_s)


def node_from_measurement(m: NodeMeasurement, *, name: str | None = None) -> NodeConfig:
    """A one-GPU node with a calibration record's memory, context reserve, link and costs
    (:func:`huvm.sim.measured.derive`); more GPUs: give the node TOML a topology."""
    d = derive(m)
    gpu = GpuSpec(m.gpu_name, m.memory_total_bytes, m.memory_total_bytes - m.memory_free_bytes,
                  d["pcie_mbyte_per_s"])
    date = f", {m.info['date']}" if "date" in m.info else ""
    return NodeConfig(name=name or slug(m), gpus=(gpu,), topology=(("X",),), nvlink_generation=4,
                      gpu_preset="h100", costs=Costs(**{k: d[k] for k in COST_KEYS}),
                      source=f"calibrated: {m.gpu_name}, driver {m.driver}{date}")


#: the measured H100's costs (hgx-h100; h100-nvl with its own HBM rate)
_H100_COSTS = Costs(**{k: _H100[k] for k in COST_KEYS})

PRESETS: dict[str, NodeConfig] = {
    "dgx-1": NodeConfig(
        name="dgx-1",
        gpus=tuple(GpuSpec(f"Tesla V100-SXM2-16GB #{i}", 16 * GIB, 512 * MIB, 12_000, pcie_switch=i // 2 + 1)
                   for i in range(8)),
        topology=_DGX1_TOPO, nvlink_generation=2, nvlink_mbyte_per_s_per_link=25_000,
        host_memory_bytes=512 * GIB, gpu_preset="v100", costs=Costs(lend_chunk_ns=_hbm_ns(900)),
        source="DGX-1 V100 hybrid cube-mesh (NVIDIA/nccl#671 topology dump; p3.16xlarge is the same machine): "
               "8x V100 16 GB, NVLink 2 at 25 GB/s per link per direction, PCIe 3 ~12 GB/s effective, "
               "512 GB host; the pairs without NVLink cross the CPU sockets (no peer path); GPUs 0-1, 2-3, 4-5, "
               "6-7 share a PCIe switch's x16 uplink (NVIDIA DGX-1 System Architecture white paper)"),
    "aws-p3.8xlarge": NodeConfig(
        name="aws-p3.8xlarge",
        gpus=tuple(GpuSpec(f"Tesla V100-SXM2-16GB #{i}", 16 * GIB, 512 * MIB, 12_000, pcie_switch=i // 2 + 1)
                   for i in range(4)),
        topology=_P3_TOPO, nvlink_generation=2, nvlink_mbyte_per_s_per_link=25_000,
        host_memory_bytes=244 * 10**9, gpu_preset="v100", costs=Costs(lend_chunk_ns=_hbm_ns(900)),
        source="HUVM artifact docs/README.md (4x V100 16 GB, NVLink 2, PCIe 3, 244 GB); NVLink 2 25 GB/s per "
               "link per direction; PCIe 3 x16 ~12 GB/s effective (15.754 theoretical); GPUs 0-1 and 2-3 share a "
               "PCIe switch (half a DGX-1 / p3.16xlarge)"),
    "dgx-a100-40g": NodeConfig(
        name="dgx-a100-40g",
        gpus=tuple(GpuSpec(f"A100-SXM4-40GB #{i}", 40 * GIB, 512 * MIB, 24_000) for i in range(8)),
        topology=_uniform(8, "NV12"), nvlink_generation=3, nvlink_mbyte_per_s_per_link=25_000,
        nvswitch=True, nvswitch_links=12, host_memory_bytes=1024 * GIB, gpu_preset="a100",
        costs=Costs(lend_chunk_ns=_hbm_ns(1555)),
        source="DGX A100: NVSwitch, 12 NVLink 3 links x 25 GB/s = 300 GB/s per direction per GPU; PCIe 4 "
               "x16 (31.5 theoretical, 24 effective assumed: PCIe 3's 76 % efficiency); 1 TB host"),
    "dgx-a100-80g": NodeConfig(
        name="dgx-a100-80g",
        gpus=tuple(GpuSpec(f"A100-SXM4-80GB #{i}", 80 * GIB, 512 * MIB, 24_000) for i in range(8)),
        topology=_uniform(8, "NV12"), nvlink_generation=3, nvlink_mbyte_per_s_per_link=25_000,
        nvswitch=True, nvswitch_links=12, host_memory_bytes=2048 * GIB, gpu_preset="a100",
        costs=Costs(lend_chunk_ns=_hbm_ns(2039)),
        source="as dgx-a100-40g with 80 GB GPUs and 2 TB host"),
    "hgx-h100": NodeConfig(
        name="hgx-h100",
        gpus=tuple(GpuSpec(f"H100-SXM5-80GB #{i}", 80 * GIB, 512 * MIB, _H100["pcie_mbyte_per_s"])
                   for i in range(8)),
        topology=_uniform(8, "NV18"), nvlink_generation=4, nvlink_mbyte_per_s_per_link=21_111,
        nvswitch=True, nvswitch_links=18, host_memory_bytes=2048 * GIB, gpu_preset="h100",
        costs=_H100_COSTS,
        source="HGX H100: NVSwitch, 18 NVLink 4 links = 450 GB/s per direction line rate, 380 GB/s measured "
               "(NVIDIA/nccl#1264) = 18 x 21.1 GB/s; PCIe 5 x16, HBM copy rate and UVM's per-block costs measured "
               "on one H100 80GB HBM3 in a VM (driver 580.159.04, 2026-11-28: "
               "huvm/data/calibration/h100-80gb-hbm3-580.159.04-2026-11-28.json)"),
    "hgx-h200": NodeConfig(
        name="hgx-h200",
        gpus=tuple(GpuSpec(f"H200-SXM-141GB #{i}", _H200.memory_total_bytes,
                           _H200.memory_total_bytes - _H200.memory_free_bytes, _REF["pcie_mbyte_per_s"])
                   for i in range(8)),
        topology=_uniform(8, "NV18"), nvlink_generation=4, nvlink_mbyte_per_s_per_link=21_111,
        nvswitch=True, nvswitch_links=18, host_memory_bytes=2048 * GIB, gpu_preset="h100",
        costs=Costs(lend_chunk_ns=_REF["lend_chunk_ns"]),
        source="HGX H200: the hgx-h100 fabric (NVSwitch, 18 NVLink 4 links) with the H200 of the h200 preset: "
               "memory, context reserve, PCIe 5, HBM copy rate and UVM's per-block costs measured on one H200 in a "
               "VM (driver 580.159.04)"),
    "h200": replace(
        node_from_measurement(_H200, name="h200"),
        source="one NVIDIA H200 measured by the project in a VM (driver 580.159.04, CUDA 13.0, 2026-11-27 and "
               "2026-11-28, pooled; huvm/data/calibration/h200-580.159.04*.json): memory and context reserve from "
               "cudaMemGetInfo, PCIe 5 x16 pinned-copy rate, HBM copy rate, UVM's per-block costs "
               "(huvm.sim.measured)"),
    "l40s-pcie": NodeConfig(
        name="l40s-pcie",
        gpus=tuple(GpuSpec(f"L40S-48GB #{i}", 48 * GIB, 512 * MIB, 24_000, pcie_switch=i // 2 + 1)
                   for i in range(4)),
        topology=_L40S_TOPO, nvlink_generation=4, host_memory_bytes=512 * GIB, gpu_preset="a100",
        costs=Costs(lend_chunk_ns=_hbm_ns(864)),
        source="4x L40S 48 GB GDDR6 (864 GB/s), PCIe 4 x16 only, no NVLink (NVIDIA L40S datasheet); 24 GB/s "
               "effective PCIe assumed as for dgx-a100; two GPUs per PCIe switch (peer-to-peer through it), the "
               "switches on different sockets (assumption: a common 4-GPU 2-socket server layout)"),
    "h100-nvl": NodeConfig(
        name="h100-nvl",
        gpus=tuple(GpuSpec(f"H100-NVL-94GB #{i}", 94 * GIB, 512 * MIB, _H100["pcie_mbyte_per_s"])
                   for i in range(4)),
        topology=_H100_NVL_TOPO, nvlink_generation=4, nvlink_mbyte_per_s_per_link=21_111,
        host_memory_bytes=1024 * GIB, gpu_preset="h100", costs=replace(_H100_COSTS, lend_chunk_ns=_hbm_ns(3900)),
        source="4x H100 NVL 94 GB (HBM3 3.9 TB/s, PCIe 5; NVIDIA H100 NVL product brief): NVLink bridges join "
               "pairs 0-1 and 2-3 only (12 NVLink 4 links, at hgx-h100's measured 21.1 GB/s per link); no "
               "peer path between the pairs (different sockets: assumption); PCIe 5 and UVM's per-block costs "
               "as measured on the H100 SXM (hgx-h100; assumption: the NVL board's are the same)"),
    "gh200-nvl2": NodeConfig(
        name="gh200-nvl2",
        gpus=tuple(GpuSpec(f"GH200-96GB #{i}", 96 * GIB, 512 * MIB, 450_000) for i in range(2)),
        topology=_uniform(2, "NV18"), nvlink_generation=4, nvlink_mbyte_per_s_per_link=21_111,
        host_memory_bytes=2 * 480 * GIB, gpu_preset="h100", costs=Costs(lend_chunk_ns=_hbm_ns(4000)),
        source="GH200 NVL2: two Grace Hopper superchips (96 GB HBM3 at 4 TB/s, 480 GB LPDDR5X each), each GPU's "
               "host memory over NVLink-C2C at 450 GB/s per direction (900 GB/s total; NVIDIA GH200 datasheet) -- "
               "faster than the peer over NVLink 4 (18 links at hgx-h100's measured 21.1 GB/s = 380 GB/s); "
               "C2C at its line rate and UVM's per-block costs as measured over PCIe on the H200 (assumptions)"),
    "gh200": NodeConfig(
        name="gh200",
        gpus=(GpuSpec("GH200-96GB", 96 * GIB, 512 * MIB, 450_000),),
        topology=(("X",),), nvlink_generation=4, host_memory_bytes=480 * GIB, gpu_preset="h100",
        costs=Costs(lend_chunk_ns=_hbm_ns(4000)),
        source="one GH200 superchip (a node of one GPU: no peer, huvm has nothing to lend or harvest): host "
               "memory over NVLink-C2C at 450 GB/s per direction (NVIDIA GH200 datasheet; line rate, assumption)"),
    "mixed-a100-h100": NodeConfig(
        name="mixed-a100-h100",
        gpus=(GpuSpec("A100-PCIe-40GB #0", 40 * GIB, 512 * MIB, 24_000, pcie_switch=1),
              GpuSpec("A100-PCIe-40GB #1", 40 * GIB, 512 * MIB, 24_000, pcie_switch=1),
              GpuSpec("H100-PCIe-80GB #2", 80 * GIB, 512 * MIB, _H100["pcie_mbyte_per_s"], pcie_switch=2),
              GpuSpec("H100-PCIe-80GB #3", 80 * GIB, 512 * MIB, _H100["pcie_mbyte_per_s"], pcie_switch=2)),
        topology=_MIXED_TOPO, nvlink_generation=3, nvlink_mbyte_per_s_per_link=25_000,
        host_memory_bytes=1024 * GIB, gpu_preset="a100", costs=Costs(lend_chunk_ns=_hbm_ns(1555)),
        source="2x A100 40 GB PCIe (HBM2 1.56 TB/s, PCIe 4) bridged and 2x H100 80 GB PCIe (PCIe 5) bridged (NVLink "
               "bridges: 600 GB/s bidirectional = 12 links x 25 GB/s; NVIDIA A100 / H100 PCIe product briefs), "
               "peer-to-peer over PCIe between the pairs; the lender HBM cost of the slower A100 for all "
               "(assumption: the model has one per node)"),
    "ariadne-a5000": NodeConfig(
        name="ariadne-a5000",
        gpus=(GpuSpec("RTX A5000", 24 * GIB, 512 * MIB, 24_000),),
        topology=(("X",),), nvlink_generation=3, gpu_preset="a100", costs=Costs(lend_chunk_ns=_hbm_ns(768)),
        source="ARIADNE's platform: RTX A5000 24 GB, PCIe 4 (24 GB/s effective assumed), driver 535.86"),
}
PRESET_ALIASES: dict[str, str] = {"dgx-a100": "dgx-a100-40g", "p3.8xlarge": "aws-p3.8xlarge",
                                  "hgx-h100-80g": "hgx-h100", "p3.16xlarge": "dgx-1", "aws-p3.16xlarge": "dgx-1"}


def preset_names() -> list[str]:
    return sorted(set(PRESETS) | set(PRESET_ALIASES))
