"""Typed binding of NVIDIA nvidia-uvm's own ioctls (535.261.03): user space without CUDA.

    from huvm import uvm
    with uvm.Uvm.open() as u:                              # UVM_INITIALIZE + UVM_MM_INITIALIZE
        u.register_gpu(gpu_uuid, client)                   # hClient: the RM client (softgpu GET_INFO)
        u.register_gpu_va_space(gpu_uuid, client, h_va_space)
        with u.alloc_managed(4 << 20) as region:           # mmap of the UVM fd at vm_start == offset
            region.view()[:4] = b"abcd"
            u.migrate(region.base, region.size, gpu_uuid)  # synchronous UVM_MIGRATE
            print(u.va_residency_info(region.base).resident_on)
            u.run_test("CE_SANITY")                        # NVIDIA's built-in tests (uvm_enable_builtin_tests=1)

The params structs, command numbers, NV_STATUS table and the CPU's processor UUID come from the compiled
binding ``_huvm_uvm_cffi`` (built from the pinned upstream headers by ``make uvm-binding``, see
``huvm/_uvm_build.py``). It lives in ``build/pyuvm/`` (``HUVM_UVM_BINDING``: another directory or the
``.so`` itself); without it, this module still imports but every call raises
:class:`huvm.errors.BindingMissing` "UVM binding not built (make uvm-binding)".

UVM's ioctls are raw numbers (``uvm_ioctl.h``: ``UVM_IOCTL_BASE(i)`` = i; tests: 200 + i). Each returns 0
and reports through ``rmStatus`` (``uvm_api.h``'s routing); a status other than NV_OK raises the typed
exception of :func:`huvm.errors.from_nv_status`, naming the ioctl and the NV_STATUS.
"""

from __future__ import annotations

import errno as _errno
import importlib.machinery
import importlib.util
import os
import time
import uuid as _uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from . import errors

DEFAULT_DEVICE = "/dev/nvidia-uvm"
BINDING_ENV = "HUVM_UVM_BINDING"
MODULE = "_huvm_uvm_cffi"
MISSING = "UVM binding not built (make uvm-binding)"

#: The CPU's processor UUID as uuidgen printed it (nvidia-uvm/nvCpuUuid.c); the 16 bytes UVM compares
#: are that UUID's bytes in reverse order. Migrations to the CPU name it as their destination.
CPU_UUID_TEXT = "73772a14-2c41-4750-a27b-d4d74e0f5ea6"
CPU_UUID: bytes = bytes(reversed(_uuid.UUID(CPU_UUID_TEXT).bytes))

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
#: UVM's VA block (and root chunk) size: managed allocations are aligned to it for clean VA blocks.
VA_BLOCK_SIZE = 2 << 20

# UVM_TEST_EVICT_CHUNK modes (UvmTestEvictMode)
EVICT_MODES = {"default": "UvmTestEvictModeDefault", "virtual": "UvmTestEvictModeVirtual",
               "physical": "UvmTestEvictModePhysical"}


# ---- the compiled binding -------------------------------------------------------------------------------

def default_binding_dir() -> Path:
    """``build/pyuvm`` of this checkout (pyctl/huvm/uvm.py -> repository root)."""
    return Path(__file__).resolve().parents[2] / "build" / "pyuvm"


def binding_path() -> Path | None:
    """The binding's extension file: ``$HUVM_UVM_BINDING`` (a file, or a directory holding it), else
    ``build/pyuvm``; None if there is none."""
    where = Path(os.environ.get(BINDING_ENV) or default_binding_dir())
    if where.is_file():
        return where
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = where / f"{MODULE}{suffix}"
        if candidate.is_file():
            return candidate
    return None


_loaded: dict[Path, ModuleType] = {}
# $HUVM_UVM_BINDING (or "") -> the module loaded for it: spares the file lookups on every call (the guest
# reads the checkout over 9p). Only found bindings are remembered.
_by_env: dict[str, ModuleType] = {}


def _module() -> ModuleType:
    key = os.environ.get(BINDING_ENV, "")
    mod = _by_env.get(key)
    if mod is not None:
        return mod
    mod = _load()
    _by_env[key] = mod
    return mod


def _load() -> ModuleType:
    path = binding_path()
    if path is None:
        where = os.environ.get(BINDING_ENV) or str(default_binding_dir())
        raise errors.BindingMissing(f"{MISSING}: no {MODULE} extension in {where}", reason="uvm-binding",
                                    hint="make uvm-binding (after make source), or set HUVM_UVM_BINDING")
    mod = _loaded.get(path)
    if mod is None:
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
        spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
        if spec is None:  # pragma: no cover - only for a non-extension path
            raise errors.BindingMissing(f"{MISSING}: {path} is not an extension", reason="uvm-binding")
        try:
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except ImportError as exc:
            raise errors.BindingMissing(f"{MISSING}: {path}: {exc}", reason="uvm-binding") from exc
        _loaded[path] = mod
    return mod


def ffi() -> Any:
    return _module().ffi


def lib() -> Any:
    return _module().lib


def available() -> bool:
    try:
        _module()
    except errors.BindingMissing:
        return False
    return True


_names_cache: dict[Path, dict[int, str]] = {}


def status_names() -> dict[int, str]:
    """NV_STATUS value -> name for every status of nvstatuscodes.h; {} when the binding is not built."""
    path = binding_path()
    if path is None:
        return {}
    names = _names_cache.get(path)
    if names is None:
        f, lb = ffi(), lib()
        names = {}
        for i in range(lb.huvm_nv_status_count):
            entry = lb.huvm_nv_status_table[i]
            names.setdefault(int(entry.code), f.string(entry.name).decode())
        _names_cache[path] = names
    return names


def status_code(name: str) -> int:
    """NV_STATUS name -> value (``status_code("NV_ERR_INVALID_ADDRESS")``)."""
    for code, n in status_names().items():
        if n == name:
            return code
    if not available():
        _module()  # raises BindingMissing
    raise KeyError(name)


def status_name(status: int) -> str:
    return status_names().get(status) or f"0x{status:08x}"


def nv_status_name(status: int) -> str:
    """NV_STATUS value -> name ("NV_ERR_INVALID_ADDRESS"): the full table of NVIDIA's nvstatuscodes.h when
    the binding is built, else the subset of the huvm ABI, else hex."""
    return status_names().get(status) or errors.status_name(status)


def status_text(status: int) -> str:
    """The description nvstatuscodes.h gives (e.g. "Invalid address")."""
    f, lb = ffi(), lib()
    for i in range(lb.huvm_nv_status_count):
        entry = lb.huvm_nv_status_table[i]
        if int(entry.code) == status:
            return str(f.string(entry.text).decode())
    return "unknown NV_STATUS"


NV_OK = 0


_commands_cache: dict[int, dict[str, int]] = {}


def commands() -> dict[str, int]:
    """Every UVM command with a params struct: name (``UVM_MIGRATE``, ``UVM_TEST_CE_SANITY``) -> number."""
    mod = _module()
    cmds = _commands_cache.get(id(mod))
    if cmds is None:
        f, lb = mod.ffi, mod.lib
        typedefs = set(f.list_types()[0])
        cmds = {name: int(getattr(lb, name)) for name in dir(lb)
                if name.startswith("UVM_") and f"{name}_PARAMS" in typedefs}
        _commands_cache[id(mod)] = cmds
    return cmds


def test_names() -> list[str]:
    """The built-in tests (``UVM_TEST_*`` commands) by short name (``CE_SANITY``), in number order."""
    cmds = commands()
    tests = [n for n in cmds if n.startswith("UVM_TEST_")]
    return [n.removeprefix("UVM_TEST_") for n in sorted(tests, key=lambda n: cmds[n])]


def command_name(number: int) -> str:
    for name, value in commands().items():
        if value == number:
            return name
    return str(number)


def constant(name: str) -> int:
    """An integer constant of the binding (a flag, an enumerator, a command number)."""
    value = getattr(lib(), name)
    if not isinstance(value, int):
        raise TypeError(f"{name} is not an integer constant")
    return value


def cpu_uuid() -> bytes:
    """NV_PROCESSOR_UUID_CPU_DEFAULT as compiled from nvidia-uvm/nvCpuUuid.c."""
    return bytes(ffi().buffer(lib().NV_PROCESSOR_UUID_CPU_DEFAULT.uuid, 16))


# ---- processors ------------------------------------------------------------------------------------------

class HasUuid(Protocol):
    @property
    def uuid(self) -> bytes: ...


Processor = bytes | bytearray | str | HasUuid


def uuid_bytes(proc: Processor) -> bytes:
    """A processor as UVM's 16 NvProcessorUuid bytes: raw bytes, "cpu", "GPU-xxxxxxxx-..." (the bytes in
    order, as nvidia-smi prints them), or an object with a ``uuid`` attribute (softgpu's GpuInfo)."""
    if isinstance(proc, (bytes, bytearray)):
        raw = bytes(proc)
    elif isinstance(proc, str):
        text = proc.strip()
        if text.lower() == "cpu":
            return CPU_UUID
        if text.upper().startswith("GPU-"):
            text = text[4:]
        raw = _uuid.UUID(text).bytes
    else:
        raw = bytes(proc.uuid)
    if len(raw) != 16:
        raise errors.UsageError(f"a processor UUID has 16 bytes, not {len(raw)}")
    return raw


def uuid_str(raw: bytes) -> str:
    """16 UUID bytes as text: "cpu" for the CPU, else "GPU-xxxxxxxx-..."."""
    if raw == CPU_UUID:
        return "cpu"
    return "GPU-" + str(_uuid.UUID(bytes=bytes(raw)))


# ---- params -----------------------------------------------------------------------------------------------

def _field_types(ctype: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in ctype.fields or ():
        if name:
            out[name] = field.type
        elif field.type.fields:  # an anonymous union/struct: its members are reachable by name
            out.update(_field_types(field.type))
    return out


def _is_uuid(ctype: Any) -> bool:
    return bool(ctype.kind == "struct" and ctype.fields and [n for n, _ in ctype.fields] == ["uuid"])


def assign(params: Any, name: str, value: Any) -> None:
    """Set params.<name>: integers and bools as they are, processor UUIDs from anything
    :func:`uuid_bytes` takes, arrays from sequences."""
    f = ffi()
    ctype = f.typeof(params).item
    types = _field_types(ctype)
    if name not in types:
        raise errors.UsageError(f"{ctype.cname} has no field {name!r} (fields: {', '.join(types)})")
    ftype = types[name]
    if _is_uuid(ftype):
        f.memmove(getattr(params, name).uuid, uuid_bytes(value), 16)
    elif ftype.kind == "array":
        seq = list(value)
        if len(seq) > ftype.length:
            raise errors.UsageError(f"{ctype.cname}.{name} holds {ftype.length} entries, not {len(seq)}")
        arr = getattr(params, name)
        for i, v in enumerate(seq):
            if _is_uuid(ftype.item):
                f.memmove(arr[i].uuid, uuid_bytes(v), 16)
            else:
                arr[i] = int(v)
    else:
        setattr(params, name, int(value))


def new_params(command: str, **fields: Any) -> Any:
    """A zeroed params struct for command (``UVM_MIGRATE``), fields filled (see :func:`assign`)."""
    params = ffi().new(f"{command}_PARAMS *")
    for name, value in fields.items():
        assign(params, name, value)
    return params


def test_command(name: str) -> str:
    """``CE_SANITY`` or ``UVM_TEST_CE_SANITY`` -> ``UVM_TEST_CE_SANITY`` (refused if not a test)."""
    full = name if name.startswith("UVM_TEST_") else f"UVM_TEST_{name}"
    if full not in commands():
        raise errors.UsageError(f"not a UVM built-in test: {name}")
    return full


# ---- results ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RegisteredGpu:
    uuid: bytes
    numa_enabled: bool
    numa_node: int


@dataclass(frozen=True)
class Residency:
    """UVM_TEST_VA_RESIDENCY_INFO of one address: which processors hold the page, map it, populate it.

    Processors are 16-byte UUIDs (:data:`CPU_UUID` for the CPU); :func:`uuid_str` prints them."""

    address: int
    resident_on: tuple[bytes, ...]
    resident_physical_size: tuple[int, ...]
    resident_physical_address: tuple[int, ...]
    mapped_on: tuple[bytes, ...]
    mapping_type: tuple[int, ...]
    mapping_physical_address: tuple[int, ...]
    page_size: tuple[int, ...]
    populated_on: tuple[bytes, ...]

    def is_resident_on(self, proc: Processor) -> bool:
        return uuid_bytes(proc) in self.resident_on

    def is_mapped_on(self, proc: Processor) -> bool:
        return uuid_bytes(proc) in self.mapped_on

    @property
    def on_cpu(self) -> bool:
        return CPU_UUID in self.resident_on

    def describe(self) -> str:
        res = ", ".join(uuid_str(u) for u in self.resident_on) or "nowhere"
        maps = ", ".join(uuid_str(u) for u in self.mapped_on) or "nowhere"
        return f"0x{self.address:x}: resident on {res}; mapped on {maps}"


@dataclass(frozen=True)
class EvictResult:
    evicted: bool
    evicted_physical_address: int
    chunk_size_backing_virtual: int


# ---- managed memory ----------------------------------------------------------------------------------------

class ManagedRegion:
    """Managed memory: the UVM fd mapped at ``vm_start == offset`` (uvm.c:uvm_mmap requires it, with
    MAP_SHARED and PROT_READ|PROT_WRITE), placed on a 2 MiB-aligned PROT_NONE reservation.

    :meth:`view` is a writable memoryview over it (CPU accesses fault pages in through UVM);
    :meth:`close` unmaps it (UVM_FREE refuses managed ranges: they go with their vma)."""

    def __init__(self, owner: Uvm, base: int, size: int) -> None:
        self.owner = owner
        self.base = base
        self.size = size
        self.closed = False

    @property
    def end(self) -> int:
        return self.base + self.size

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"ManagedRegion(0x{self.base:x}, {self.size})"

    def _check(self) -> None:
        if self.closed:
            raise errors.HuvmError(f"{self!r} is unmapped")

    def view(self, offset: int = 0, length: int | None = None) -> memoryview:
        """A writable memoryview of [base + offset, base + offset + length)."""
        self._check()
        length = self.size - offset if length is None else length
        if offset < 0 or length < 0 or offset + length > self.size:
            raise errors.UsageError(f"[{offset}, {offset + length}) is outside {self!r}")
        f = ffi()
        return memoryview(f.buffer(f.cast("char *", self.base + offset), length))

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.view(offset, length))

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self.view(offset, len(data))[:] = data

    def address(self, offset: int = 0) -> int:
        return self.base + offset

    def migrate(self, dest: Processor, offset: int = 0, length: int | None = None) -> None:
        self._check()
        self.owner.migrate(self.base + offset, self.size - offset if length is None else length, dest)

    def residency(self, offset: int = 0) -> Residency:
        self._check()
        return self.owner.va_residency_info(self.base + offset)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _munmap(self.base, self.size)
        if self in self.owner.regions:
            self.owner.regions.remove(self)

    def __enter__(self) -> ManagedRegion:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _map_failed(ptr: Any) -> bool:
    return int(ffi().cast("intptr_t", ptr)) == -1


def _munmap(addr: int, length: int) -> None:
    if length and lib().munmap(ffi().cast("void *", addr), length) != 0:
        err = ffi().errno
        raise errors.HuvmError(f"munmap(0x{addr:x}, {length}): {os.strerror(err)}", errno=err)


# ---- the UVM file -----------------------------------------------------------------------------------------

class Uvm:
    """An initialised /dev/nvidia-uvm file (one UVM VA space) with its mm file (UVM_MM_INITIALIZE)."""

    def __init__(self, fd: int, path: str = DEFAULT_DEVICE, mm_fd: int | None = None) -> None:
        self.fd = fd
        self.path = path
        self.mm_fd = mm_fd
        self.regions: list[ManagedRegion] = []

    # -- lifetime
    @classmethod
    def open(cls, path: str = DEFAULT_DEVICE, *, flags: int = 0, mm: bool = True) -> Uvm:
        """open + UVM_INITIALIZE(flags) and, with mm, a second fd + UVM_MM_INITIALIZE (keeps the mm for
        GPU fault servicing; NV_WARN_NOTHING_TO_DO where the platform does not need it)."""
        _module()
        fd = _open(path)
        u = cls(fd, path)
        try:
            u.call("UVM_INITIALIZE", u.new("UVM_INITIALIZE", flags=flags))
            if mm:
                mm_fd = _open(path)
                u.mm_fd = mm_fd
                p = u.new("UVM_MM_INITIALIZE", uvmFd=fd)
                status = u.ioctl("UVM_MM_INITIALIZE", p, fd=mm_fd)
                if status == status_code("NV_WARN_NOTHING_TO_DO"):
                    os.close(mm_fd)
                    u.mm_fd = None
                elif status != NV_OK:
                    raise errors.from_nv_status(status, "UVM_MM_INITIALIZE", status_name(status))
        except BaseException:
            u.close()
            raise
        return u

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        for region in list(self.regions):
            region.close()
        if self.mm_fd is not None:
            os.close(self.mm_fd)
            self.mm_fd = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Uvm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw calls
    def new(self, command: str, **fields: Any) -> Any:
        return new_params(command, **fields)

    def ioctl(self, command: str, params: Any, *, fd: int | None = None, number: int | None = None) -> int:
        """Send command with params; return rmStatus. OS-level failures raise (EINVAL on a UVM_TEST_*
        command: the module was loaded without uvm_enable_builtin_tests=1). ``number`` is for a command whose
        params type is another's (UVM_TOOLS_INIT_EVENT_TRACKER_V2)."""
        if self.fd < 0:
            raise errors.HuvmError(f"{self.path}: closed")
        if number is None:
            number = commands()[command]
        f, lb = ffi(), lib()
        for attempt in range(200):
            if lb.ioctl(self.fd if fd is None else fd, number, params) == 0:
                return int(params.rmStatus)
            err = f.errno
            # uvm.c:uvm_unlocked_ioctl answers EAGAIN while power management holds its lock.
            if err not in (_errno.EAGAIN, _errno.EINTR):
                break
            time.sleep(0.001 * min(attempt + 1, 50))
        text = f"{command}: {self.path}: {_errno.errorcode.get(err, str(err))} ({os.strerror(err)})"
        if err == _errno.EINVAL and command.startswith("UVM_TEST_"):
            raise errors.NotSupported(text + ": built-in tests need nvidia-uvm's uvm_enable_builtin_tests=1",
                                      errno=err, command=command)
        if err in (_errno.EPERM, _errno.EACCES):
            raise errors.PermissionDenied(text, errno=err, command=command)
        raise errors.HuvmError(text, errno=err, command=command)

    def call(self, command: str, params: Any, *, ok: Iterable[int] = (NV_OK,)) -> Any:
        """Send command; raise the typed exception unless rmStatus is in ok; return params."""
        status = self.ioctl(command, params)
        if status not in set(ok):
            raise errors.from_nv_status(status, command, status_name(status))
        return params

    def _simple(self, command: str, **fields: Any) -> Any:
        return self.call(command, self.new(command, **fields))

    # -- GPUs, VA spaces, peers, channels
    def register_gpu(self, gpu: Processor, client: int, smc_part_ref: int = 0, rm_ctrl_fd: int = -1
                     ) -> RegisteredGpu:
        """UVM_REGISTER_GPU. rmCtrlFd is unused by UVM ("TODO Bug 1624521"); hClient and hSmcPartRef
        reach nvUvmInterfaceGetGpuInfo."""
        p = self._simple("UVM_REGISTER_GPU", gpu_uuid=gpu, rmCtrlFd=rm_ctrl_fd, hClient=client,
                         hSmcPartRef=smc_part_ref)
        return RegisteredGpu(uuid_bytes(gpu), bool(p.numaEnabled), int(p.numaNodeId))

    def unregister_gpu(self, gpu: Processor) -> None:
        self._simple("UVM_UNREGISTER_GPU", gpu_uuid=gpu)

    def register_gpu_va_space(self, gpu: Processor, client: int, va_space: int, rm_ctrl_fd: int = -1) -> None:
        """UVM_REGISTER_GPU_VASPACE: hVaSpace is an RM GPU VA-space object of client (the software GPU's
        CREATE_VASPACE)."""
        self._simple("UVM_REGISTER_GPU_VASPACE", gpuUuid=gpu, rmCtrlFd=rm_ctrl_fd, hClient=client,
                     hVaSpace=va_space)

    def unregister_gpu_va_space(self, gpu: Processor) -> None:
        self._simple("UVM_UNREGISTER_GPU_VASPACE", gpuUuid=gpu)

    def enable_peer_access(self, gpu_a: Processor, gpu_b: Processor) -> None:
        """UVM_ENABLE_PEER_ACCESS: PCIe peers only (NVLink peers are enabled on registration)."""
        self._simple("UVM_ENABLE_PEER_ACCESS", gpuUuidA=gpu_a, gpuUuidB=gpu_b)

    def disable_peer_access(self, gpu_a: Processor, gpu_b: Processor) -> None:
        self._simple("UVM_DISABLE_PEER_ACCESS", gpuUuidA=gpu_a, gpuUuidB=gpu_b)

    def register_channel(self, gpu: Processor, client: int, channel: int, base: int = 0, length: int = 0,
                         rm_ctrl_fd: int = -1) -> None:
        """UVM_REGISTER_CHANNEL: faults of that channel (by instance pointer) go to this VA space."""
        self._simple("UVM_REGISTER_CHANNEL", gpuUuid=gpu, rmCtrlFd=rm_ctrl_fd, hClient=client,
                     hChannel=channel, base=base, length=length)

    def unregister_channel(self, gpu: Processor, client: int, channel: int) -> None:
        self._simple("UVM_UNREGISTER_CHANNEL", gpuUuid=gpu, hClient=client, hChannel=channel)

    def pageable_mem_access(self) -> bool:
        return bool(self._simple("UVM_PAGEABLE_MEM_ACCESS").pageableMemAccess)

    # -- managed memory
    def alloc_managed(self, size: int, *, align: int = VA_BLOCK_SIZE, offset: int = 0,
                      pieces: Sequence[int] | None = None) -> ManagedRegion:
        """Managed memory of size bytes (rounded up to pages) at offset past an align-aligned address.

        pieces: sizes of separate mmap calls that tile the region, each its own UVM VA range (tests that
        need several ranges in one 2 MiB block); default one."""
        if size <= 0 or align <= 0 or align & (align - 1) or align % PAGE_SIZE or offset % PAGE_SIZE:
            raise errors.UsageError(f"managed allocation: bad size {size}, alignment {align} or offset {offset}")
        size = -(-size // PAGE_SIZE) * PAGE_SIZE
        parts = list(pieces) if pieces else [size]
        if sum(parts) != size or any(p <= 0 or p % PAGE_SIZE for p in parts):
            raise errors.UsageError(f"managed allocation: pieces {parts} do not tile {size} bytes in pages")
        f, lb = ffi(), lib()
        span = offset + size + align
        resv = lb.mmap(f.NULL, span, lb.PROT_NONE, lb.MAP_PRIVATE | lb.MAP_ANONYMOUS | lb.MAP_NORESERVE, -1, 0)
        if _map_failed(resv):
            err = f.errno
            raise errors.NoMemory(f"mmap reserve of {span} bytes: {os.strerror(err)}", errno=err)
        start = int(f.cast("uintptr_t", resv))
        base = -(-start // align) * align + offset
        _munmap(start, base - start)
        _munmap(base + size, start + span - (base + size))
        at = base
        for part in parts:
            # MAP_FIXED over the reservation; the file offset is the address (uvm.c:uvm_mmap).
            ptr = lb.mmap(f.cast("void *", at), part, lb.PROT_READ | lb.PROT_WRITE, lb.MAP_SHARED | lb.MAP_FIXED,
                          self.fd, at)
            if _map_failed(ptr):
                err = f.errno
                _munmap(base, size)
                raise errors.HuvmError(f"mmap of {self.path} at 0x{at:x} ({part} bytes): {os.strerror(err)}",
                                       errno=err)
            at += part
        region = ManagedRegion(self, base, size)
        self.regions.append(region)
        return region

    def free(self, base: int, length: int) -> None:
        """UVM_FREE: external, semaphore-pool and SKED-reflected ranges (managed ranges go with munmap:
        :meth:`ManagedRegion.close`)."""
        self._simple("UVM_FREE", base=base, length=length)

    def migrate(self, base: int, length: int, dest: Processor, *, flags: int = 0, cpu_numa_node: int = 0) -> None:
        """Synchronous UVM_MIGRATE of [base, base + length) to dest ("cpu" or a GPU registered with a GPU
        VA space; flags: UVM_MIGRATE_FLAG_*, not ASYNC)."""
        if flags & constant("UVM_MIGRATE_FLAG_ASYNC"):
            raise errors.UsageError("migrate() is synchronous: no UVM_MIGRATE_FLAG_ASYNC")
        self._simple("UVM_MIGRATE", base=base, length=length, destinationUuid=dest, flags=flags,
                     cpuNumaNode=cpu_numa_node)

    def set_preferred_location(self, base: int, length: int, proc: Processor) -> None:
        self._simple("UVM_SET_PREFERRED_LOCATION", requestedBase=base, length=length, preferredLocation=proc)

    def unset_preferred_location(self, base: int, length: int) -> None:
        self._simple("UVM_UNSET_PREFERRED_LOCATION", requestedBase=base, length=length)

    def set_accessed_by(self, base: int, length: int, proc: Processor) -> None:
        self._simple("UVM_SET_ACCESSED_BY", requestedBase=base, length=length, accessedByUuid=proc)

    def unset_accessed_by(self, base: int, length: int, proc: Processor) -> None:
        self._simple("UVM_UNSET_ACCESSED_BY", requestedBase=base, length=length, accessedByUuid=proc)

    def enable_read_duplication(self, base: int, length: int) -> None:
        self._simple("UVM_ENABLE_READ_DUPLICATION", requestedBase=base, length=length)

    def disable_read_duplication(self, base: int, length: int) -> None:
        self._simple("UVM_DISABLE_READ_DUPLICATION", requestedBase=base, length=length)

    def create_range_group(self) -> int:
        return int(self._simple("UVM_CREATE_RANGE_GROUP").rangeGroupId)

    def destroy_range_group(self, group: int) -> None:
        self._simple("UVM_DESTROY_RANGE_GROUP", rangeGroupId=group)

    # -- built-in tests
    def run_test(self, name: str, *, ok: Iterable[int] = (NV_OK,), **fields: Any) -> Any:
        """Run UVM_TEST_<name> with fields set; raise the typed exception unless rmStatus is in ok; return
        the params (outputs). Needs nvidia-uvm's uvm_enable_builtin_tests=1."""
        command = test_command(name)
        return self.call(command, self.new(command, **fields), ok=ok)

    def test_status(self, name: str, **fields: Any) -> tuple[int, Any]:
        """Run UVM_TEST_<name>; return (rmStatus, params) without raising for the status."""
        command = test_command(name)
        params = self.new(command, **fields)
        return self.ioctl(command, params), params

    def va_residency_info(self, address: int, *, is_async: bool = False) -> Residency:
        p = self.run_test("VA_RESIDENCY_INFO", lookup_address=address, is_async=is_async)
        f = ffi()

        def uuids(arr: Any, n: int) -> tuple[bytes, ...]:
            return tuple(bytes(f.buffer(arr[i].uuid, 16)) for i in range(n))

        def ints(arr: Any, n: int) -> tuple[int, ...]:
            return tuple(int(arr[i]) for i in range(n))

        nres, nmap = int(p.resident_on_count), int(p.mapped_on_count)
        return Residency(
            address=address,
            resident_on=uuids(p.resident_on, nres),
            resident_physical_size=ints(p.resident_physical_size, nres),
            resident_physical_address=ints(p.resident_physical_address, nres),
            mapped_on=uuids(p.mapped_on, nmap),
            mapping_type=ints(p.mapping_type, nmap),
            mapping_physical_address=ints(p.mapping_physical_address, nmap),
            page_size=ints(p.page_size, nmap),
            populated_on=uuids(p.populated_on, int(p.populated_on_count)),
        )

    def evict_chunk(self, gpu: Processor, address: int = 0, mode: str = "virtual") -> EvictResult:
        """UVM_TEST_EVICT_CHUNK: evict the root chunk backing address (mode "virtual"), at physical address
        (mode "physical") or the default eviction choice (mode "default") from gpu to the CPU."""
        if mode not in EVICT_MODES:
            raise errors.UsageError(f"eviction mode {mode!r}: one of {', '.join(EVICT_MODES)}")
        p = self.run_test("EVICT_CHUNK", gpu_uuid=gpu, eviction_mode=constant(EVICT_MODES[mode]), address=address)
        return EvictResult(bool(p.chunk_was_evicted), int(p.evicted_physical_address),
                           int(p.chunk_size_backing_virtual))


# ---- UVM's tools event queue (/dev/nvidia-uvm-tools) -------------------------------------------------------

TOOLS_DEVICE = "/dev/nvidia-uvm-tools"


@dataclass(frozen=True)
class ToolsEvent:
    """One entry of a tools event queue: its event type and the entry's bytes (a union of every event's info,
    each starting with the type: ``UvmEventEntry``, or ``UvmEventEntry_V2`` on a version 2 queue)."""

    type: int
    raw: bytes
    version: int


@dataclass(frozen=True)
class EvictionEvent:
    """``UvmEventEvictionInfo`` (V1: 8-bit processor indices) or ``_V2`` (16-bit): data of [address,
    address + size) moved from processor src to dst. V1 queues of 570+ index GPUs by parent GPU (1, 2, 3...),
    V2 queues by processor id (1, 9, 17... on 580); the CPU is 0 on both."""

    src: int
    dst: int
    address: int
    address_in: int
    size: int
    timestamp: int


class ToolsEventQueue:
    """An event queue of one UVM VA space, as CUDA's tools (CUPTI) create it (UvmToolsCreateEventQueue): a
    /dev/nvidia-uvm-tools file whose tracker (UVM_TOOLS_INIT_EVENT_TRACKER, or ``_V2`` with ``version=2`` on
    570+) pins a queue of ``entries`` entries (a power of 2) and a control area in this process's memory; UVM
    writes the enabled events of the VA space into it (uvm_tools.c enqueue_event(): one entry is always left
    free, so a queue holds ``entries - 1``; an event that finds it full is counted in ``dropped``).

        with uvm.ToolsEventQueue(u, 256) as q:
            q.enable(uvm.constant("UvmEventTypeEviction"))
            ...
            for ev in q.read(): print(ev.type, q.eviction(ev))
    """

    def __init__(self, u: Uvm, entries: int = 1024, *, version: int = 1, path: str = TOOLS_DEVICE) -> None:
        if entries < 2 or entries & (entries - 1) or entries > 1 << 20:
            raise errors.UsageError(f"a tools event queue holds a power of 2 of entries (2..1M), not {entries}")
        if version not in (1, 2):
            raise errors.UsageError(f"tools event queue version {version}: 1 or 2")
        f, lb = ffi(), lib()
        if version == 2 and not hasattr(lb, "UVM_TOOLS_INIT_EVENT_TRACKER_V2"):
            raise errors.NotSupported("version 2 tools event queues need a 570+ nvidia-uvm binding (UPSTREAM=580.142)")
        self.uvm = u
        self.path = path
        self.version = version
        self.entries = entries
        self.entry_type = "UvmEventEntry_V2" if version == 2 else "UvmEventEntry"
        self.entry_size = int(f.sizeof(self.entry_type))
        self.fd = -1
        self._queue_len = -(-entries * self.entry_size // PAGE_SIZE) * PAGE_SIZE
        self._ctrl_len = -(-int(f.sizeof("UvmToolsEventControlData")) // PAGE_SIZE) * PAGE_SIZE
        self._queue = self._ctrl = 0
        try:
            self._queue = _anon_map(self._queue_len)
            self._ctrl = _anon_map(self._ctrl_len)
            self.control: Any = f.cast("UvmToolsEventControlData *", self._ctrl)
            self.fd = _open(path)
            p = new_params("UVM_TOOLS_INIT_EVENT_TRACKER", queueBuffer=self._queue, queueBufferSize=entries,
                           controlBuffer=self._ctrl, uvmFd=u.fd)
            command = "UVM_TOOLS_INIT_EVENT_TRACKER_V2" if version == 2 else "UVM_TOOLS_INIT_EVENT_TRACKER"
            status = u.ioctl(command, p, fd=self.fd, number=int(getattr(lb, command)))
            if status != NV_OK:
                raise errors.from_nv_status(status, command, status_name(status))
        except BaseException:
            self.close()
            raise

    def _events(self, command: str, types: Iterable[int]) -> None:
        flags = 0
        for t in types:
            if not 0 <= t < 64:
                raise errors.UsageError(f"tools event type {t}: 0..63")
            flags |= 1 << t
        p = new_params(command, eventTypeFlags=flags)
        status = self.uvm.ioctl(command, p, fd=self.fd)
        if status != NV_OK:
            raise errors.from_nv_status(status, command, status_name(status))

    def enable(self, *types: int) -> None:
        """UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS of these event types (``UvmEventType*``)."""
        self._events("UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS", types)

    def disable(self, *types: int) -> None:
        self._events("UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS", types)

    def read(self) -> list[ToolsEvent]:
        """Every entry UVM has written since the last read, oldest first (they are consumed)."""
        if self.fd < 0:
            raise errors.HuvmError(f"{self.path}: closed")
        f, ctrl, mask = ffi(), self.control, self.entries - 1
        get = int(ctrl.get_behind) & mask
        put = int(ctrl.put_behind) & mask
        out: list[ToolsEvent] = []
        while get != put:
            raw = bytes(f.buffer(f.cast("char *", self._queue + get * self.entry_size), self.entry_size))
            out.append(ToolsEvent(raw[0], raw, self.version))
            get = (get + 1) & mask
        ctrl.get_ahead = get
        ctrl.get_behind = get
        return out

    def dropped(self, event_type: int) -> int:
        """Events of this type that found the queue full."""
        return int(self.control.dropped[event_type])

    def eviction(self, ev: ToolsEvent) -> EvictionEvent:
        """An ``UvmEventTypeEviction`` entry's info."""
        if ev.type != constant("UvmEventTypeEviction"):
            raise errors.UsageError(f"tools event of type {ev.type} is not an eviction")
        f = ffi()
        buf = f.new("char[]", ev.raw)
        info = f.cast("UvmEventEvictionInfo_V2 *" if ev.version == 2 else "UvmEventEvictionInfo *", buf)
        return EvictionEvent(int(info.srcIndex), int(info.dstIndex), int(info.addressOut), int(info.addressIn),
                             int(info.size), int(info.timeStamp))

    def close(self) -> None:
        """Close the tools file (UVM destroys the tracker and unpins the buffers), then unmap them."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for attr, length in (("_queue", self._queue_len), ("_ctrl", self._ctrl_len)):
            addr = getattr(self, attr)
            if addr:
                setattr(self, attr, 0)
                _munmap(addr, length)

    def __enter__(self) -> ToolsEventQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _anon_map(length: int) -> int:
    """Private anonymous memory (what UVM's tools pin for a queue): its address."""
    f, lb = ffi(), lib()
    ptr = lb.mmap(f.NULL, length, lb.PROT_READ | lb.PROT_WRITE, lb.MAP_PRIVATE | lb.MAP_ANONYMOUS, -1, 0)
    if _map_failed(ptr):
        err = f.errno
        raise errors.HuvmError(f"mmap of {length} bytes: {os.strerror(err)}", errno=err)
    return int(f.cast("uintptr_t", ptr))


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise errors.DeviceUnavailable(f"{path} does not exist: nvidia-uvm is not loaded or has no node",
                                       reason="no-device", hint="mknod it from /proc/devices' nvidia-uvm major",
                                       errno=_errno.ENOENT) from None
    except OSError as exc:
        raise errors.DeviceUnavailable(f"{path}: {exc.strerror}", reason="open-failed", errno=exc.errno) from None


def describe_processors(procs: Sequence[bytes]) -> str:
    return ", ".join(uuid_str(p) for p in procs) or "none"
