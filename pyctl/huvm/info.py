"""What GET_INFO reports: the node's GPUs (by UUID), their links and the module's versions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import abi


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_bytes: int
    free_bytes: int
    pcie_mbyte_per_s: int
    flags: int

    @property
    def present(self) -> bool:
        return bool(self.flags & abi.lib.HUVM_GPU_FLAG_PRESENT)

    @property
    def flag_names(self) -> tuple[str, ...]:
        return tuple(n for v, n in sorted(abi.enum_names("HUVM_GPU_FLAG_").items()) if self.flags & v)


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    link_type: int
    link_count: int
    mbyte_per_s: int

    @property
    def type_name(self) -> str:
        return abi.enum_names("HUVM_LINK_").get(self.link_type, str(self.link_type))

    @property
    def is_nvlink(self) -> bool:
        lib = abi.lib
        return self.link_type in (lib.HUVM_LINK_NVLINK_1, lib.HUVM_LINK_NVLINK_2, lib.HUVM_LINK_NVLINK_3,
                                  lib.HUVM_LINK_NVLINK_4, lib.HUVM_LINK_NVLINK_5, lib.HUVM_LINK_C2C)

    @property
    def short(self) -> str:
        """nvidia-smi topo style: NV2, PIX (PCIe peer), C2C, X (none)."""
        if self.is_nvlink and self.link_type != abi.lib.HUVM_LINK_C2C:
            return f"NV{self.link_count}"
        return {abi.lib.HUVM_LINK_C2C: "C2C", abi.lib.HUVM_LINK_PCIE: "PCIe"}.get(self.link_type, "-")


@dataclass(frozen=True)
class NodeInfo:
    abi_version: int
    module_abi_version: int
    huvm_version: int
    backend: int
    upstream_version: str
    gpus: tuple[GpuInfo, ...]
    links: tuple[Link, ...]  # every pair a != b with a link other than NONE

    @property
    def backend_name(self) -> str:
        return abi.enum_names("HUVM_BACKEND_").get(self.backend, str(self.backend))

    def link(self, a: int, b: int) -> Link | None:
        for link in self.links:
            if link.a == a and link.b == b:
                return link
        return None

    def gpu(self, selector: str | int) -> GpuInfo:
        """A GPU by index (int or "2") or UUID ("GPU-..."; a unique prefix works); KeyError otherwise."""
        text = str(selector).strip()
        if text.isdigit():
            idx = int(text)
            for g in self.gpus:
                if g.index == idx:
                    return g
            raise KeyError(f"no GPU index {idx} (node has {len(self.gpus)})")
        key = text.lower()
        if not key.startswith("gpu-"):
            key = "gpu-" + key
        found = [g for g in self.gpus if g.uuid.lower().startswith(key)]
        if len(found) == 1:
            return found[0]
        raise KeyError(f"{'ambiguous' if found else 'no'} GPU {text!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["abi_version"] = abi.version_str(self.abi_version)
        d["module_abi_version"] = abi.version_str(self.module_abi_version)
        d["huvm_version"] = abi.huvm_version_str(self.huvm_version)
        d["backend"] = self.backend_name
        d["links"] = [dict(asdict(link), link_type=link.type_name) for link in self.links]
        return d

    @classmethod
    def from_params(cls, p: Any) -> NodeInfo:
        n = int(p.gpu_count)
        gpus = tuple(
            GpuInfo(i, abi.uuid_str(g.uuid), abi.cstr(g.name), int(g.memory_bytes), int(g.free_bytes),
                    int(g.pcie_mbyte_per_s), int(g.flags))
            for i, g in ((i, p.gpus[i]) for i in range(n))
        )
        links = tuple(
            Link(a, b, int(p.links[a][b].link_type), int(p.links[a][b].link_count), int(p.links[a][b].mbyte_per_s))
            for a in range(n) for b in range(n)
            if a != b and int(p.links[a][b].link_type) != abi.lib.HUVM_LINK_NONE
        )
        return cls(int(p.hdr.abi_version), int(p.hdr.module_abi_version), int(p.huvm_version), int(p.backend),
                   abi.cstr(p.upstream_version), gpus, links)
