"""A local copy of the policy core, holding the node's facts: the one validator of a policy before sending.

The same C core the module runs (compiled into ``huvm._huvm_cffi``) checks a policy against the node here
first; Python does not re-check consistency itself, it asks the core and words the answer. A refused value
is reported with its key (and file and line) and the limit it broke, found by asking the core again which
values of that field it would accept with the rest of the policy unchanged (``preevict_chunks=9000: must
be <= 7936``), never as an NV_STATUS name alone. Presets are computed by the core's own
``huvm_policy_preset`` for the node's GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import abi
from .errors import PolicyError, PolicyFileError, field_name, from_status
from .info import NodeInfo
from .policy import KEYS, Origin, Policy, Setting, format_value, rate_range

# Keys whose setting may be the one to blame when the core refuses the first one (file and line).
_RELATED = {"prefetch_chunks": ("prefetch_mode",), "prefetch_stride": ("prefetch_chunks",),
            "lend_limit_bytes": ("role",), "lend_reserve_bytes": (), "lend_traffic_mbyte_per_s": ()}


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

    def check(self, policy: Policy) -> tuple[int, int]:
        """The core's verdict on a policy: (NV_STATUS, error_field); (HUVM_NV_OK, 0) when accepted."""
        lib = abi.lib
        p = abi.ffi.new("huvm_policy_t *")
        policy.to_struct(p)
        err = abi.ffi.new("uint32_t *")
        status = int(lib.huvm_policy_validate(self._core, p, err))
        if status != lib.HUVM_NV_OK:
            return status, int(err[0])
        return int(lib.HUVM_NV_OK), 0

    def validate(self, policy: Policy, settings: list[Setting] | None = None) -> None:
        """Ask the core; a refusal becomes a PolicyError naming the key, its value and the limit it broke
        (and the file and line of the setting responsible when settings are given)."""
        status, err = self.check(policy)
        if status == abi.lib.HUVM_NV_OK:
            return
        key = self.key_of(err, policy)
        name = key.rsplit(".", 1)[-1]
        origin: Origin | None = None
        for candidate in (key, *(key.rsplit(".", 1)[0] + "." + r if "." in key else r
                                 for r in _RELATED.get(name, ()))):
            origin = next((s.origin for s in settings or [] if s.key == candidate), None)
            if origin is not None:
                break
        text, body = self.explain(policy, key, err, status)
        if origin and origin.file:
            raise PolicyFileError(f"{text}: {body}", file=origin.file, line=origin.line, key=key)
        raise PolicyError(f"{key}={text}: {body}", key=key)

    # -- wording the core's answer --
    def explain(self, policy: Policy, key: str, error_field: int, status: int) -> tuple[str, str]:
        """(the refused value as written, why): the limit comes from the core, by asking it which values of
        that field it accepts with the rest of the policy as it is."""
        name = key.rsplit(".", 1)[-1]
        spec = KEYS.get(name)
        access = self._access(policy, error_field)
        if spec is None or access is None:
            field = field_name(error_field) or "the policy"
            if name == "uuid":
                return "?", "not a GPU of this node, or listed twice"
            return "?", f"{field} refused by the policy core ({_status_words(status)})"
        get, put = access
        value = get()
        text = format_value(spec, value)
        if spec.kind == "enum":
            return text, f"must be one of {', '.join(spec.choices())}"
        if spec.kind == "bool":
            return text, "must be true or false"
        if spec.kind == "rate":  # 0 or lo..hi: no threshold to bisect
            return text, f"must be {rate_range(spec)}"
        hi = (1 << 64) - 1 if spec.kind == "bytes" else 0xFFFFFFFF
        ok = self._accepted_near(put, value, hi)
        why = self._context(policy, key, name)
        if ok is None:
            return text, f"no value is accepted with the rest of the policy{why}"
        if ok > value:
            low = self._bisect(put, value, ok, want_max=False)
            limit = "more than 0" if low == 1 and value == 0 else f">= {_fmt(spec.kind, low)}"
            return text, f"must be {limit}{why}"
        return text, f"must be <= {_fmt(spec.kind, self._bisect(put, ok, value, want_max=True))}{why}"

    def _access(self, policy: Policy, error_field: int) -> tuple[Callable[[], int], Callable[[int], bool]] | None:
        """Read the refused field, and try another value of it (True when the core accepts)."""
        name = field_name(error_field) or ""
        if name.startswith("gpus["):
            entry = int(name[5 : name.index("]")])
            sub = name.split(".", 1)[1]
            spec = KEYS.get(sub)
            if entry >= len(policy.gpus) or spec is None or spec.scope != "gpu" or spec.kind not in ("bytes", "rate"):
                return None

            def put_gpu(v: int) -> bool:
                gpus = list(policy.gpus)
                change: dict[str, Any] = {sub: v}
                gpus[entry] = replace(gpus[entry], **change)
                return bool(self.check(replace(policy, gpus=tuple(gpus)))[0] == abi.lib.HUVM_NV_OK)

            return (lambda: int(getattr(policy.gpus[entry], sub))), put_gpu
        node_spec = KEYS.get(name)
        if node_spec is None or node_spec.scope != "node" or node_spec.kind != "int":
            return None

        def put_node(v: int) -> bool:
            change: dict[str, Any] = {name: v}
            return bool(self.check(replace(policy, **change))[0] == abi.lib.HUVM_NV_OK)

        return (lambda: int(getattr(policy, name))), put_node

    @staticmethod
    def _accepted_near(put: Callable[[int], bool], value: int, hi: int) -> int | None:
        """Some value the core accepts, nearest first from a few probes: below, above, the ends."""
        probes = [value - 1, value + 1, value // 2, 0, 1, min(hi, value * 2), hi]
        for v in probes:
            if 0 <= v <= hi and v != value and put(v):
                return v
        return None

    @staticmethod
    def _bisect(put: Callable[[int], bool], lo: int, hi: int, *, want_max: bool) -> int:
        """want_max: the largest accepted in [lo, hi) with put(lo) true; else the smallest accepted in
        (lo, hi] with put(hi) true (the core's rules on one field are thresholds)."""
        if want_max:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if put(mid) else (lo, mid)
            return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if put(mid) else (mid, hi)
        return hi

    def _context(self, policy: Policy, key: str, name: str) -> str:
        """Why the limit is where it is, when another setting or the node sets it."""
        lib = abi.lib
        if name == "preevict_chunks":
            return " (the pre-eviction reserve, in 2 MiB chunks, must fit in every GPU's memory)"
        if name == "prefetch_chunks" and policy.prefetch_mode != lib.HUVM_PREFETCH_OFF:
            return f" while prefetch_mode is {format_value(KEYS['prefetch_mode'], policy.prefetch_mode)}"
        if name == "prefetch_stride":
            return f" with prefetch_chunks={policy.prefetch_chunks} (the prefetch window is limited)"
        sel = key.split(".")[1] if key.count(".") == 2 else None
        if name == "lend_limit_bytes" and sel is not None:
            uuid = next((g.uuid for g in self.info.gpus if str(g.index) == sel), sel).lower()
            entry = next((g for g in policy.gpus if g.uuid.lower() == uuid), None)
            if entry is not None:
                return f" while gpu.{sel}.role is {entry.role_name} (a lender with lend_limit_bytes 0 lends nothing)"
        if name == "lend_reserve_bytes":
            return " (the GPU's memory)"
        return ""

    def key_of(self, error_field: int, policy: Policy) -> str:
        """Policy key for an error_field (gpus[i] of the request -> gpu.<index>.key)."""
        name = field_name(error_field) or "policy"
        if name.startswith("gpus["):
            entry = int(name[5 : name.index("]")])
            field = name.split(".", 1)[1]
            sub = field  # a GPU field's key is its member
            sel: str = str(entry)
            if entry < len(policy.gpus):
                uuid = policy.gpus[entry].uuid.lower()
                sel = next((str(g.index) for g in self.info.gpus if g.uuid.lower() == uuid), policy.gpus[entry].uuid)
            return f"gpu.{sel}.{sub}"
        return name


def _fmt(kind: str, value: int) -> str:
    return format_value(KEYS["lend_reserve_bytes"], value) if kind == "bytes" else str(value)


def _status_words(status: int) -> str:
    lib = abi.lib
    if status == lib.HUVM_NV_ERR_OUT_OF_RANGE:
        return "out of range"
    if status == lib.HUVM_NV_ERR_GPU_UUID_NOT_FOUND:
        return "unknown GPU"
    return "inconsistent with the rest of the policy"
