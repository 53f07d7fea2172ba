"""Typed access to /dev/huvm-softgpu: the qemu test bed's emulated Volta GPUs (huvm-softgpu.ko).

The software GPU stands in for nvidia.ko under NVIDIA's real nvidia-uvm. Where a real system would use
RM's API from user space (a client, GPU VA-space objects, channels), this device offers an "RM-lite":

    from huvm import softgpu, uvm
    with softgpu.SoftGpu.open() as sg:
        gpu = sg.gpus[0]                                  # GpuInfo: uuid, name, fb/pma bytes, links
        vas = sg.create_vaspace(gpu)                      # hVaSpace for UVM_REGISTER_GPU_VASPACE
        chan = sg.create_channel(vas)                     # hChannel for UVM_REGISTER_CHANNEL
        sg.sm_access(chan, [softgpu.Access.write(va, 4096, seed=7)])   # "from the GPU"; faults go to UVM
        print(sg.counters().gpus[0]["faults"])

The ABI is driver/include/uapi/huvm_softgpu_ioctl.h, compiled into huvm's extension (its
SOFTGPU_ABI_BEGIN..END part, see huvm/_build.py). Each call returns 0 and reports an NV_STATUS in
``rmStatus``; anything but NV_OK raises the typed exception of :func:`huvm.errors.from_nv_status`.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import abi, errors, uvm

DEFAULT_DEVICE = "/dev/huvm-softgpu"

LINK_NAMES = {0: "none", 1: "pcie", 2: "nvlink2"}
ARCH_NAMES = {0x140: "volta", 0x170: "ampere"}
_ARCH_CONSTANTS = {0x140: "SOFTGPU_ARCH_GV100", 0x170: "SOFTGPU_ARCH_GA100"}
ACCESS_TYPES = {"read": 0, "write": 1, "atomic_inc": 2, "prefetch": 3}
KNOBS = {"copy_mbps": 1, "link_latency_us": 2, "fail_pma_alloc": 3, "tlb_drop_invalidates": 4}

IoctlFn = Callable[[int, int, Any, bool], Any]


def _check_tables() -> None:
    """The name tables above against the compiled header (drift fails at first use, loudly)."""
    lib = abi.lib
    expected = {
        **{f"SOFTGPU_LINK_{k.upper()}": v for v, k in LINK_NAMES.items()},
        **{f"SOFTGPU_ACCESS_{k.upper()}": v for k, v in ACCESS_TYPES.items()},
        **{f"SOFTGPU_KNOB_{k.upper()}": v for k, v in KNOBS.items()},
        **{name: v for v, name in _ARCH_CONSTANTS.items()},
    }
    for name, value in expected.items():
        if getattr(lib, name) != value:
            raise RuntimeError(f"huvm.softgpu: {name} is {getattr(lib, name)} in the header, not {value}")


def counter_names() -> list[str]:
    """Counter index -> short name, from the header's SOFTGPU_CTR_* (``faults``, ``ce_bytes``, ...)."""
    names = {v: k.removeprefix("SOFTGPU_CTR_").lower() for k, v in abi.constants("SOFTGPU_CTR_").items()
             if k != "SOFTGPU_CTR_COUNT"}
    count = int(abi.lib.SOFTGPU_CTR_COUNT)
    return [names.get(i, f"counter{i}") for i in range(count)]


# ---- value types ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    peer: int
    type: str          # "none", "pcie", "nvlink2"
    count: int         # NVLink links (width)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: bytes        # the 16 bytes UVM sees (NvProcessorUuid)
    name: str
    fb_bytes: int
    pma_bytes: int     # the part UVM's PMA manages: [0, pma_bytes)
    pci_domain: int
    pci_bdf: int       # bus << 8 | devfn
    links: tuple[Link, ...]
    registered: int    # nvUvmInterfaceRegisterGpu references
    gpu_arch: int = 0  # UvmGpuInfo.gpuArch UVM is given: 0x140 GV100 (Volta), 0x170 GA100 (Ampere)

    @property
    def arch(self) -> str:
        """``ampere``, ``volta`` (the module's arch= parameter), or ``0x...`` for an unknown value."""
        return ARCH_NAMES.get(self.gpu_arch, f"{self.gpu_arch:#x}")

    @property
    def uuid_str(self) -> str:
        return abi.uuid_str(self.uuid)

    @property
    def pci_address(self) -> str:
        bus, devfn = self.pci_bdf >> 8, self.pci_bdf & 0xFF
        return f"{self.pci_domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"

    def link_to(self, peer: int | GpuInfo) -> Link:
        j = peer if isinstance(peer, int) else peer.index
        return self.links[j]


@dataclass(frozen=True)
class Info:
    client: int        # this open file's RM client handle (hClient for UVM)
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True)
class VaSpace:
    handle: int
    gpu: int


@dataclass(frozen=True)
class Channel:
    handle: int
    va_space: VaSpace
    instance_pa: int

    @property
    def gpu(self) -> int:
        return self.va_space.gpu


@dataclass(frozen=True)
class ForeignAlloc:
    handle: int
    gpu: int
    bytes: int
    allocated: int


@dataclass(frozen=True)
class GpuCounters:
    gpu: int
    values: dict[str, int]
    pma_free_bytes: int
    pma_pinned_bytes: int
    pma_unpinned_bytes: int

    def __getitem__(self, name: str) -> int:
        return self.values[name]


@dataclass(frozen=True)
class Counters:
    gpus: tuple[GpuCounters, ...]

    def total(self, name: str) -> int:
        return sum(g[name] for g in self.gpus)

    def minus(self, before: Counters) -> Counters:
        """Counter deltas since before (gauges, the pma_* bytes, are taken as they are now)."""
        out = []
        for now, then in zip(self.gpus, before.gpus, strict=True):
            out.append(GpuCounters(now.gpu, {k: v - then.values[k] for k, v in now.values.items()},
                                   now.pma_free_bytes, now.pma_pinned_bytes, now.pma_unpinned_bytes))
        return Counters(tuple(out))


@dataclass
class Access:
    """One SM access. ``data``: READ destination (a writable buffer of size bytes) or WRITE source;
    without it WRITE stores the seed pattern (8-byte word at VA a = seed ^ a) and READ with ``verify``
    compares against it."""

    va: int
    size: int
    type: str = "read"
    seed: int = 0
    verify: bool = False
    no_wait: bool = False
    data: Any = None

    @classmethod
    def read(cls, va: int, size: int, *, seed: int | None = None, into: Any = None, no_wait: bool = False
             ) -> Access:
        return cls(va, size, "read", seed or 0, seed is not None, no_wait, into)

    @classmethod
    def write(cls, va: int, size: int, *, seed: int = 0, data: Any = None, no_wait: bool = False) -> Access:
        return cls(va, size, "write", seed, False, no_wait, data)

    @classmethod
    def atomic_inc(cls, va: int) -> Access:
        return cls(va, 4, "atomic_inc")

    @classmethod
    def prefetch(cls, va: int, size: int) -> Access:
        return cls(va, size, "prefetch")


@dataclass(frozen=True)
class AccessResult:
    access: Access
    status: int
    faults: int
    mismatches: int
    first_mismatch_va: int
    value: int
    status_name: str = field(default="NV_OK")

    @property
    def ok(self) -> bool:
        return self.status == 0 and self.mismatches == 0


# ---- the device -------------------------------------------------------------------------------------------

class SoftGpu:
    """An open /dev/huvm-softgpu: one RM client; its VA spaces and channels live until :meth:`close`."""

    def __init__(self, path: str = DEFAULT_DEVICE, *, open_fn: Callable[[str, int], int] = os.open,
                 ioctl_fn: IoctlFn = fcntl.ioctl, close_fn: Callable[[int], None] = os.close) -> None:
        _check_tables()
        self.path = path
        self._ioctl = ioctl_fn
        self._close = close_fn
        try:
            self._fd: int | None = open_fn(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise errors.DeviceUnavailable(f"{path} does not exist: huvm-softgpu.ko is not loaded",
                                           reason="no-device", hint="insmod huvm-softgpu.ko (qemu test bed)",
                                           errno=_errno.ENOENT) from None
        except OSError as exc:
            raise errors.DeviceUnavailable(f"{path}: {exc.strerror}", reason="open-failed",
                                           errno=exc.errno) from None
        self._info: Info | None = None

    @classmethod
    def open(cls, path: str = DEFAULT_DEVICE) -> SoftGpu:
        return cls(path)

    def fileno(self) -> int:
        if self._fd is None:
            raise errors.HuvmError(f"{self.path}: closed")
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._close(fd)

    def __enter__(self) -> SoftGpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw
    def new(self, ctype: str) -> Any:
        params = abi.ffi.new(f"{ctype} *")
        params.abi_version = abi.lib.SOFTGPU_ABI_VERSION
        params.size = abi.ffi.sizeof(ctype)
        return params

    def call(self, cmd: int, params: Any, command: str) -> Any:
        """One ioctl; OS errors and a non-OK rmStatus raise typed exceptions; returns params."""
        buf = abi.ffi.buffer(params, abi.ffi.sizeof(params[0]))
        try:
            self._ioctl(self.fileno(), cmd, buf, True)
        except OSError as exc:
            raise errors.from_errno(exc.errno or 0, command, self.path) from None
        status = int(params.rmStatus)
        if status != 0:
            raise errors.from_nv_status(status, command, uvm.nv_status_name(status))
        return params

    # -- queries
    def info(self, *, refresh: bool = True) -> Info:
        if self._info is not None and not refresh:
            return self._info
        p = self.call(abi.lib.SOFTGPU_IOCTL_GET_INFO, self.new("SOFTGPU_GET_INFO_PARAMS"), "SOFTGPU_GET_INFO")
        n = int(p.gpu_count)
        if n > abi.lib.SOFTGPU_MAX_GPUS:
            raise errors.HuvmError(f"SOFTGPU_GET_INFO: gpu_count {n} > SOFTGPU_MAX_GPUS")
        gpus = []
        for i in range(n):
            g = p.gpus[i]
            links = tuple(Link(j, LINK_NAMES.get(int(g.link_type[j]), f"type{int(g.link_type[j])}"),
                               int(g.link_count[j])) for j in range(n))
            gpus.append(GpuInfo(i, bytes(abi.ffi.buffer(g.uuid, 16)), abi.cstr(g.name), int(g.fb_bytes),
                                int(g.pma_bytes), int(g.pci_domain), int(g.pci_bdf), links, int(g.registered),
                                int(g.gpu_arch)))
        self._info = Info(int(p.client), tuple(gpus))
        return self._info

    @property
    def client(self) -> int:
        return self.info(refresh=False).client

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self.info(refresh=False).gpus

    def counters(self) -> Counters:
        p = self.call(abi.lib.SOFTGPU_IOCTL_GET_COUNTERS, self.new("SOFTGPU_GET_COUNTERS_PARAMS"),
                      "SOFTGPU_GET_COUNTERS")
        names = counter_names()
        out = []
        for i in range(int(p.gpu_count)):
            g = p.gpus[i]
            out.append(GpuCounters(i, {name: int(g.counters[k]) for k, name in enumerate(names)},
                                   int(g.pma_free_bytes), int(g.pma_pinned_bytes), int(g.pma_unpinned_bytes)))
        return Counters(tuple(out))

    # -- objects
    def create_vaspace(self, gpu: int | GpuInfo) -> VaSpace:
        index = gpu if isinstance(gpu, int) else gpu.index
        p = self.new("SOFTGPU_CREATE_VASPACE_PARAMS")
        p.gpu_index = index
        self.call(abi.lib.SOFTGPU_IOCTL_CREATE_VASPACE, p, "SOFTGPU_CREATE_VASPACE")
        return VaSpace(int(p.handle), index)

    def create_channel(self, vas: VaSpace) -> Channel:
        p = self.new("SOFTGPU_CREATE_CHANNEL_PARAMS")
        p.va_space = vas.handle
        self.call(abi.lib.SOFTGPU_IOCTL_CREATE_CHANNEL, p, "SOFTGPU_CREATE_CHANNEL")
        return Channel(int(p.handle), vas, int(p.instance_pa))

    def destroy(self, obj: VaSpace | Channel | int) -> None:
        p = self.new("SOFTGPU_DESTROY_OBJECT_PARAMS")
        p.handle = obj if isinstance(obj, int) else obj.handle
        self.call(abi.lib.SOFTGPU_IOCTL_DESTROY_OBJECT, p, "SOFTGPU_DESTROY_OBJECT")

    def foreign_alloc(self, gpu: int | GpuInfo, nbytes: int) -> ForeignAlloc:
        """Pin nbytes (a multiple of 2 MiB) of a GPU's framebuffer like another process's cudaMalloc;
        UVM may evict to make room (``allocated`` says how much was obtained)."""
        index = gpu if isinstance(gpu, int) else gpu.index
        p = self.new("SOFTGPU_FOREIGN_ALLOC_PARAMS")
        p.gpu_index = index
        p.bytes = nbytes
        self.call(abi.lib.SOFTGPU_IOCTL_FOREIGN_ALLOC, p, "SOFTGPU_FOREIGN_ALLOC")
        return ForeignAlloc(int(p.handle), index, nbytes, int(p.allocated))

    def foreign_free(self, alloc: ForeignAlloc | int) -> None:
        p = self.new("SOFTGPU_FOREIGN_FREE_PARAMS")
        p.handle = alloc if isinstance(alloc, int) else alloc.handle
        self.call(abi.lib.SOFTGPU_IOCTL_FOREIGN_FREE, p, "SOFTGPU_FOREIGN_FREE")

    def set_knob(self, knob: str | int, gpu: int | GpuInfo, value: int) -> None:
        """A test knob (``copy_mbps``, ``link_latency_us``, ``fail_pma_alloc`` or a SOFTGPU_KNOB_* value)."""
        p = self.new("SOFTGPU_SET_KNOB_PARAMS")
        if isinstance(knob, str):
            if knob not in KNOBS:
                raise errors.UsageError(f"unknown softgpu knob {knob!r} (one of {', '.join(KNOBS)})")
            knob = KNOBS[knob]
        p.knob = knob
        p.gpu_index = gpu if isinstance(gpu, int) else gpu.index
        p.value = value
        self.call(abi.lib.SOFTGPU_IOCTL_SET_KNOB, p, "SOFTGPU_SET_KNOB")

    # -- the SM
    def sm_access(self, channel: Channel | int, accesses: Sequence[Access], *, timeout_ms: int = 0,
                  check: bool = False) -> list[AccessResult]:
        """Run accesses "from the GPU" in channel's VA space, in batches of SOFTGPU_MAX_ACCESSES. Faults
        go to UVM's replayable-fault path; each access waits (timeout_ms, 0 = the device's default) for
        the replay. With check, a failed access (status or VERIFY mismatches) raises."""
        ffi = abi.ffi
        handle = channel if isinstance(channel, int) else channel.handle
        results: list[AccessResult] = []
        limit = int(abi.lib.SOFTGPU_MAX_ACCESSES)
        for start in range(0, len(accesses), limit):
            batch = accesses[start : start + limit]
            arr = ffi.new("softgpu_access_t[]", len(batch))
            keep = []  # the data buffers must outlive the call
            for i, a in enumerate(batch):
                e = arr[i]
                if a.type not in ACCESS_TYPES:
                    raise errors.UsageError(f"unknown access type {a.type!r} (one of {', '.join(ACCESS_TYPES)})")
                e.va, e.size, e.seed, e.type = a.va, a.size, a.seed, ACCESS_TYPES[a.type]
                e.flags = ((abi.lib.SOFTGPU_ACCESS_FLAG_VERIFY if a.verify else 0)
                           | (abi.lib.SOFTGPU_ACCESS_FLAG_NO_WAIT if a.no_wait else 0))
                if a.data is not None:
                    buf = ffi.from_buffer(a.data, require_writable=(a.type == "read"))
                    if len(buf) < a.size:
                        raise errors.UsageError(f"access at 0x{a.va:x}: data holds {len(buf)} < {a.size} bytes")
                    keep.append(buf)
                    e.data = int(ffi.cast("uintptr_t", buf))
            p = self.new("SOFTGPU_SM_ACCESS_PARAMS")
            p.channel = handle
            p.count = len(batch)
            p.accesses = int(ffi.cast("uintptr_t", arr))
            p.timeout_ms = timeout_ms
            self.call(abi.lib.SOFTGPU_IOCTL_SM_ACCESS, p, "SOFTGPU_SM_ACCESS")
            for i, a in enumerate(batch):
                e = arr[i]
                status = int(e.status)
                results.append(AccessResult(a, status, int(e.faults), int(e.mismatches), int(e.first_mismatch_va),
                                            int(e.value), uvm.nv_status_name(status) if status else "NV_OK"))
            del keep
        if check:
            for r in results:
                if r.status:
                    raise errors.from_nv_status(r.status, f"SOFTGPU_SM_ACCESS {r.access.type} at 0x{r.access.va:x}",
                                                r.status_name)
                if r.mismatches:
                    raise errors.HuvmError(f"SOFTGPU_SM_ACCESS read at 0x{r.access.va:x}: {r.mismatches} words "
                                           f"differ from the pattern, first at 0x{r.first_mismatch_va:x}")
        return results
