"""A local copy of the policy core, holding the node's facts, to validate and build policies before sending.

The same C core the module runs (compiled into ``huvm._huvm_cffi``) checks a policy against the node
here first, so a refused setting is reported with its key (and file and line) and nothing is sent; presets
are computed by the core's own ``huvm_policy_preset`` for the node's GPUs.
"""

from __future__ import annotations

from typing import Any

from . import abi
from .errors import PolicyError, PolicyFileError, field_name, from_status
from .info import NodeInfo
from .policy import KEYS, Origin, Policy, Setting


class Mirror:
    """A huvm_core_t with the node's GPUs, links and current policy."""

    def __init__(self, info: NodeInfo, current: Policy | None = None) -> None:
        ffi, lib = abi.ffi, abi.lib
        self.info = info
        self._core: Any = ffi.new("huvm_core_t *")
        lib.huvm_core_init(self._core, info.backend, lib.HUVM_PRESET_HUVM)
        for g in info.gpus:
            gi = ffi.new("huvm_gpu_info_t *")
            ffi.memmove(gi.uuid, abi.uuid_bytes(g.uuid), 16)
            gi.name = g.name.encode()[:31]
            gi.memory_bytes, gi.free_bytes = g.memory_bytes, min(g.free_bytes, g.memory_bytes)
            gi.pcie_mbyte_per_s, gi.flags = g.pcie_mbyte_per_s, g.flags
            status = lib.huvm_core_set_gpu(self._core, g.index, gi)
            if status != lib.HUVM_NV_OK:
                raise from_status(status, "mirror: set_gpu")
        for link in info.links:
            lk = ffi.new("huvm_link_t *")
            lk.link_type, lk.link_count, lk.mbyte_per_s = link.link_type, link.link_count, link.mbyte_per_s
            lib.huvm_core_set_link(self._core, link.a, link.b, lk)
        if current is not None:
            current.to_struct(self._core.policy)

    def preset(self, preset: int) -> Policy:
        """The core's preset policy for this node's GPUs."""
        out = abi.ffi.new("huvm_policy_t *")
        status = abi.lib.huvm_policy_preset(preset, self._core, out)
        if status != abi.lib.HUVM_NV_OK:
            raise PolicyError(f"unknown preset {preset}", key="preset")
        return Policy.from_struct(out)

    def validate(self, policy: Policy, settings: list[Setting] | None = None) -> None:
        """Run the core's huvm_policy_validate; refusals become PolicyError naming the key (and the file
        and line of the setting responsible when settings are given)."""
        p = abi.ffi.new("huvm_policy_t *")
        policy.to_struct(p)
        err = abi.ffi.new("uint32_t *")
        status = abi.lib.huvm_policy_validate(self._core, p, err)
        if status == abi.lib.HUVM_NV_OK:
            return
        key = self.key_of(int(err[0]), policy)
        origin: Origin | None = None
        for s in settings or []:
            if s.key == key:
                origin = s.origin
        exc = from_status(status, "policy check", int(err[0]))
        msg = f"refused by the policy core: {exc}"
        spec = KEYS.get(key.rsplit(".", 1)[-1])
        if spec is not None and spec.kind == "int":
            msg += f" (value {self._value(policy, key)})"
        if origin and origin.file:
            raise PolicyFileError(msg, file=origin.file, line=origin.line, key=key)
        raise PolicyError(f"{key}: {msg}", key=key)

    def key_of(self, error_field: int, policy: Policy) -> str:
        """Policy key for an error_field (gpus[i] of the request -> gpu.<index>.key)."""
        name = field_name(error_field) or "policy"
        if name.startswith("gpus["):
            entry = int(name[5 : name.index("]")])
            sub = name.split(".", 1)[1].removesuffix("_bytes")
            sel: str = str(entry)
            if entry < len(policy.gpus):
                uuid = policy.gpus[entry].uuid.lower()
                sel = next((str(g.index) for g in self.info.gpus if g.uuid.lower() == uuid), policy.gpus[entry].uuid)
            return f"gpu.{sel}.{sub}"
        return name

    @staticmethod
    def _value(policy: Policy, key: str) -> object:
        return getattr(policy, key, "?")
