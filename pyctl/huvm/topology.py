"""Topology: the node's GPUs by UUID with what NVML adds (index, PCIe, NVLink), degrading without NVML.

The huvm module's GET_INFO is the base (UUIDs, memory, the peer link matrix). NVML (``pynvml`` from
``nvidia-ml-py``) adds the NVML index, PCIe bus id, generation and width, and per-link NVLink state for GPUs
it can match by UUID. Without NVML (no driver, no GPU, the simulated node) every NVML field is None and
``notes`` says why; nothing fails.
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
        gpus.append(GpuTopology(
            g.index, g.uuid, g.name, g.memory_bytes, g.pcie_mbyte_per_s, idx,
            _text(getattr(pci, "busId", None)),
            _q(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h), _q(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            tuple(nvlinks)))
    if nvml is not None:
        _q(nvml.nvmlShutdown)
    return Topology(tuple(gpus), links, nvml is not None, tuple(notes))
