"""Test doubles: a bare policy core with a synthetic node, reachable as a backend or as a fake ioctl.

:class:`CoreNode` holds a ``huvm_core_t`` (the real C core) with N synthetic GPUs and runs commands through
the core's own ``huvm_dispatch``, like the kernel glue does. :meth:`CoreNode.fake_ioctl` returns an
``fcntl.ioctl`` stand-in for :class:`huvm.backend.KernelBackend`, with the kernel's behaviours that matter
to user space: unknown numbers fail with EINVAL (the stock module), an unprivileged caller is refused
changes, and a command can be made to fail with an errno.
"""

from __future__ import annotations

import errno
from typing import Any

from . import abi


class CoreNode:
    """A synthetic node: gpu_count GPUs of memory_bytes, all pairs NVLink-connected."""

    name = "core"

    def __init__(self, gpu_count: int = 4, memory_bytes: int = 16 << 30, *, privileged: bool = True,
                 backend: int | None = None) -> None:
        ffi, lib = abi.ffi, abi.lib
        self.core: Any = ffi.new("huvm_core_t *")
        lib.huvm_core_init(self.core, lib.HUVM_BACKEND_KTEST if backend is None else backend, lib.HUVM_PRESET_HUVM)
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
        self.calls: list[int] = []
        self.fail_errno: int | None = None

    @property
    def description(self) -> str:
        return "bare policy core (test)"

    def dispatch(self, cmd: int, buf: Any) -> int:
        """Run cmd on a writable buffer holding the params (what the kernel copies in and out)."""
        self.calls.append(cmd)
        ffi = abi.ffi
        data = ffi.from_buffer(buf)
        status: int = abi.lib.huvm_dispatch(self.core, ffi.NULL, ffi.NULL, self.caller, cmd, data, len(buf))
        return status

    # Backend protocol
    def ioctl(self, cmd: int, params: Any) -> None:
        self.dispatch(cmd, abi.as_buffer(params))

    def close(self) -> None:
        pass

    def fake_ioctl(self, *, known: bool = True) -> Any:
        """An fcntl.ioctl stand-in: known=False behaves like the stock module (EINVAL for huvm numbers)."""

        def ioctl(fd: int, cmd: int, buf: Any, mutate: bool = True) -> int:
            if self.fail_errno is not None:
                raise OSError(self.fail_errno, "injected")
            size = abi.lib.huvm_cmd_params_size(cmd) if known else 0
            if size == 0:
                raise OSError(errno.EINVAL, "Invalid argument")
            # as uvm_huvm_ioctl(): the header is checked first; if refused, only the header (with the
            # module's ABI version) goes back and the ioctl fails with EINVAL
            ffi = abi.ffi
            hdr = ffi.cast("huvm_hdr_t *", ffi.from_buffer(buf))
            err = ffi.new("uint32_t *")
            if abi.lib.huvm_check_hdr(cmd, hdr, size, err) != abi.lib.HUVM_NV_OK:
                raise OSError(errno.EINVAL, "Invalid argument")
            self.dispatch(cmd, buf)
            return 0

        return ioctl
