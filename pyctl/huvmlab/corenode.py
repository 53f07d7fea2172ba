"""A bare policy core with a synthetic node, as a backend: the real C core with no simulator around it.

:class:`CoreNode` holds a ``huvm_core_t`` (the real C core) with N synthetic GPUs and runs commands through
the core's own ``huvm_dispatch``, like the kernel glue does. The tests build their kernel stand-ins on it.
"""

from __future__ import annotations

from typing import Any

from huvm import abi


class CoreNode:
    """A synthetic node: gpu_count GPUs of memory_bytes, all pairs NVLink-connected."""

    name = "core"

    def __init__(self, gpu_count: int = 4, memory_bytes: int = 16 << 30, *, privileged: bool = True,
                 backend: int | None = None) -> None:
        ffi, lib = abi.ffi, abi.lib
        self.core: Any = ffi.new("huvm_core_t *")
        lib.huvm_core_init(self.core, lib.HUVM_BACKEND_CORE if backend is None else backend, lib.HUVM_PRESET_HUVM)
        for i in range(gpu_count):
            g = ffi.new("huvm_gpu_info_t *")
            raw = bytes([0x10 + i] * 4) + bytes([0xAB, 0xCD, 0x40 | i, 0, 0x80, i]) + bytes([0x11 * (i + 1) % 256] * 6)
            ffi.memmove(g.uuid, raw, 16)
            g.name = f"sim{i}".encode()
            g.memory_bytes = memory_bytes
            g.free_bytes = memory_bytes // 2
            g.pcie_mbyte_per_s = 12000
            g.flags = lib.HUVM_GPU_FLAG_PRESENT | lib.HUVM_GPU_FLAG_REPLAYABLE_FAULTS | lib.HUVM_GPU_FLAG_PMA_EVICTION
            assert lib.huvm_core_set_gpu(self.core, i, g) == lib.HUVM_NV_OK
        for a in range(gpu_count):
            for b in range(a + 1, gpu_count):
                lk = ffi.new("huvm_link_t *")
                lk.link_type, lk.link_count = lib.HUVM_LINK_NVLINK_2, 1 + (a + b) % 2
                lk.mbyte_per_s = 25000 * lk.link_count
                lib.huvm_core_set_link(self.core, a, b, lk)
        self.caller: Any = ffi.new("huvm_caller_t *")
        self.caller.privileged = 1 if privileged else 0
        self.caller.allow_test = 1

    @property
    def description(self) -> str:
        return "bare policy core"

    def dispatch(self, cmd: int, buf: Any) -> int:
        """Run cmd on a writable buffer holding the params (what the kernel copies in and out)."""
        ffi = abi.ffi
        data = ffi.from_buffer(buf)
        status: int = abi.lib.huvm_dispatch(self.core, ffi.NULL, ffi.NULL, self.caller, cmd, data, len(buf))
        return status

    # Backend protocol
    def ioctl(self, cmd: int, params: Any) -> None:
        self.dispatch(cmd, abi.as_buffer(params))

    def close(self) -> None:
        pass
