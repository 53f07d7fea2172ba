"""Topology: the node's GPUs by UUID with what NVML adds (index, PCIe, NVLink), degrading without NVML.

The huvm module's GET_INFO is the base (UUIDs, memory, the peer link matrix). NVML (``pynvml`` from
``nvidia-ml-py``) adds the NVML index, PCIe bus id, generation and width, per-link NVLink state and the peak
memory (HBM) bandwidth for GPUs it can match by UUID. Without NVML (no driver, no GPU, the simulated node)
every NVML field is None and ``notes`` says why; nothing fails.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from .info import NodeInfo


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    remote_bus_id: str | None


@dataclass(frozen=True)
class GpuTopology:
    index: int
    uuid: str
    name: str
    memory_bytes: int
    pcie_mbyte_per_s: int
    nvml_index: int | None = None
    pci_bus_id: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    hbm_mbyte_per_s: int | None = None      # peak memory bandwidth, MB/s (hbm_mbyte_per_s())


@dataclass(frozen=True)
class Topology:
    gpus: tuple[GpuTopology, ...]
    links: tuple[tuple[int, int, str, int], ...]  # (a, b, "NV2"/"PCIe", MB/s)
    nvml: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load_nvml(module: ModuleType | None) -> tuple[ModuleType | None, str | None]:
    if module is not None:
        nvml = module
    else:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None, "NVML unavailable: the pynvml module (nvidia-ml-py) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError_* (LibraryNotFound, DriverNotLoaded, ...)
        return None, f"NVML unavailable: {exc or type(exc).__name__}; NVML fields are left empty"
    return nvml, None


def _q(fn: Any, *args: Any) -> Any:
    """nvitop-style query: None instead of an NVML error."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def hbm_mbyte_per_s(bus_width_bits: int | None, max_mem_clock_mhz: int | None) -> int | None:
    """Peak memory bandwidth in MB/s from NVML's memory bus width (bits, ``nvmlDeviceGetMemoryBusWidth``) and
    maximum memory clock (MHz, ``nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_MEM)``; NVIDIA's NVML API reference,
    "Device Queries"): two transfers per clock, bits to bytes. Checks against NVIDIA's data sheets: V100 SXM2
    4096 x 877 -> 898,048 (900 GB/s), A100 40 GB 5120 x 1215 -> 1,555,200 (1,555 GB/s), H100 SXM 5120 x 2619
    -> 3,352,320 (3.35 TB/s). None when either is unknown or not positive."""
    if not bus_width_bits or not max_mem_clock_mhz or bus_width_bits <= 0 or max_mem_clock_mhz <= 0:
        return None
    return int(bus_width_bits) * int(max_mem_clock_mhz) * 2 // 8


def discover(info: NodeInfo, nvml_module: ModuleType | None = None) -> Topology:
    """Topology of the node; nvml_module overrides ``import pynvml`` (tests pass a fake)."""
    links = tuple((lk.a, lk.b, lk.short, lk.mbyte_per_s) for lk in info.links if lk.a < lk.b)
    nvml, note = _load_nvml(nvml_module)
    notes: list[str] = [note] if note else []
    by_uuid: dict[str, tuple[int, Any]] = {}
    if nvml is not None:
        try:
            count = int(nvml.nvmlDeviceGetCount())
            for i in range(count):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(_q(nvml.nvmlDeviceGetUUID, h))
                if uuid:
                    by_uuid[uuid.lower()] = (i, h)
        except Exception as exc:
            notes.append(f"NVML device enumeration failed: {exc}")
    gpus = []
    for g in info.gpus:
        hit = by_uuid.get(g.uuid.lower())
        if nvml is None or hit is None:
            if nvml is not None:
                notes.append(f"GPU {g.index} ({g.uuid}) is not known to NVML")
            gpus.append(GpuTopology(g.index, g.uuid, g.name, g.memory_bytes, g.pcie_mbyte_per_s))
            continue
        idx, h = hit
        pci = _q(nvml.nvmlDeviceGetPciInfo, h)
        nvlinks = []
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        for link in range(max_links):
            state = _q(nvml.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                continue
            remote = _q(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            nvlinks.append(NvLink(link, bool(state), _text(getattr(remote, "busId", None))))
        clock_mem = getattr(nvml, "NVML_CLOCK_MEM", 2)
        hbm = hbm_mbyte_per_s(_q(getattr(nvml, "nvmlDeviceGetMemoryBusWidth", None), h),
                              _q(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), h, clock_mem))
        gpus.append(GpuTopology(
            g.index, g.uuid, g.name, g.memory_bytes, g.pcie_mbyte_per_s, idx,
            _text(getattr(pci, "busId", None)),
            _q(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h), _q(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            tuple(nvlinks), hbm))
    if nvml is not None:
        _q(nvml.nvmlShutdown)
    return Topology(tuple(gpus), links, nvml is not None, tuple(notes))
