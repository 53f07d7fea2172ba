"""huvm.uvm, the binding of NVIDIA's UVM ioctls: built here from the pinned upstream headers (as
`make uvm-binding` does), checked against the C compiler and the numbers of uvm_ioctl.h; managed memory's
mmap dance on /dev/zero; error mapping; and the guest suite's built-in table against the binding.

No nvidia-uvm runs here: the qemu test bed runs the real one (tests/vm/softgpu).
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import require_or_skip
from huvm import _uvm_build, errors, softgpu, uvm

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("BUILD", str(ROOT / "build"))) / "upstream" / "orig"
MIB = 1 << 20

# uvm_ioctl.h / uvm_linux_ioctl.h: UVM_IOCTL_BASE(i) = i on Linux
API_NUMBERS = {
    "UVM_INITIALIZE": 0x30000001, "UVM_MM_INITIALIZE": 75, "UVM_REGISTER_GPU": 37, "UVM_UNREGISTER_GPU": 38,
    "UVM_REGISTER_GPU_VASPACE": 25, "UVM_UNREGISTER_GPU_VASPACE": 26, "UVM_REGISTER_CHANNEL": 27,
    "UVM_UNREGISTER_CHANNEL": 28, "UVM_ENABLE_PEER_ACCESS": 29, "UVM_DISABLE_PEER_ACCESS": 30, "UVM_FREE": 34,
    "UVM_MIGRATE": 51, "UVM_SET_PREFERRED_LOCATION": 42, "UVM_UNSET_PREFERRED_LOCATION": 43,
    "UVM_ENABLE_READ_DUPLICATION": 44, "UVM_DISABLE_READ_DUPLICATION": 45, "UVM_SET_ACCESSED_BY": 46,
    "UVM_UNSET_ACCESSED_BY": 47, "UVM_CREATE_RANGE_GROUP": 23, "UVM_DESTROY_RANGE_GROUP": 24,
    "UVM_PAGEABLE_MEM_ACCESS": 39,
}
# uvm_test_ioctl.h: UVM_TEST_IOCTL_BASE(i) = 200 + i
TEST_NUMBERS = {"GET_GPU_REF_COUNT": 0, "RNG_SANITY": 1, "RM_MEM_SANITY": 5, "PAGE_TREE": 10, "PUSH_SANITY": 13,
                "CE_SANITY": 16, "MEM_SANITY": 30, "PEER_IDENTITY_MAPPINGS": 34, "VA_RESIDENCY_INFO": 35,
                "PMM_SANITY": 40, "EVICT_CHUNK": 43, "HOST_SANITY": 88, "CPU_CHUNK_API": 100, "SKIP_MIGRATE_VMA": 103}


@pytest.fixture(scope="module")
def binding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The binding built into a scratch directory and selected with HUVM_UVM_BINDING."""
    require_or_skip((UPSTREAM / "nvidia-uvm" / "uvm_ioctl.h").exists(),
                    f"no pinned upstream at {UPSTREAM} (make source)")
    out = tmp_path_factory.mktemp("pyuvm")
    so = _uvm_build.build(UPSTREAM, out)
    old = os.environ.get(uvm.BINDING_ENV)
    os.environ[uvm.BINDING_ENV] = str(out)
    try:
        yield so
    finally:
        if old is None:
            del os.environ[uvm.BINDING_ENV]
        else:
            os.environ[uvm.BINDING_ENV] = old


def test_binding_builds_and_loads(binding: Path) -> None:
    assert binding.is_file() and binding.name.startswith(uvm.MODULE)
    assert uvm.binding_path() == binding
    assert uvm.available()
    # HUVM_UVM_BINDING may name the extension file itself
    os.environ[uvm.BINDING_ENV] = str(binding)
    try:
        assert uvm.binding_path() == binding and uvm.available()
    finally:
        os.environ[uvm.BINDING_ENV] = str(binding.parent)


def test_make_target_builds_into_build_pyuvm() -> None:
    require_or_skip(shutil.which("make") is not None, "no make")
    # -W: as if the builder had changed, so the recipe shows whatever state build/pyuvm is in
    builder_py = ROOT / "pyctl" / "huvm" / "_uvm_build.py"
    out = subprocess.run(["make", "-n", "--no-print-directory", "-W", str(builder_py), "uvm-binding"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    builder = [ln for ln in out.stdout.splitlines() if "_uvm_build.py" in ln]
    assert builder, out.stdout
    assert f"--orig {UPSTREAM}" in builder[0] and "--out" in builder[0] and "/pyuvm" in builder[0]


def test_ioctl_numbers(binding: Path) -> None:
    cmds = uvm.commands()
    for name, number in API_NUMBERS.items():
        assert cmds[name] == number, name
    for name, n in TEST_NUMBERS.items():
        assert cmds[f"UVM_TEST_{name}"] == 200 + n, name
    tests = uvm.test_names()
    assert len(tests) == 96  # every UVM_TEST_* of uvm_test_ioctl.h (uvm_test.c routes 96)
    assert tests[0] == "GET_GPU_REF_COUNT" and tests[-1] == "SKIP_MIGRATE_VMA"
    assert uvm.command_name(51) == "UVM_MIGRATE"
    assert uvm.test_command("CE_SANITY") == uvm.test_command("UVM_TEST_CE_SANITY") == "UVM_TEST_CE_SANITY"
    with pytest.raises(errors.UsageError):
        uvm.test_command("NO_SUCH_TEST")


def test_struct_layouts_equal_the_compilers(binding: Path, tmp_path: Path) -> None:
    """sizeof and offsetof(rmStatus) of every params struct, from gcc directly, equal cffi's."""
    require_or_skip(shutil.which("gcc") is not None, "no gcc")
    ffi = uvm.ffi()
    types = sorted(f"{c}_PARAMS" for c in uvm.commands())
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "uvm_linux_ioctl.h"', '#include "uvm_test_ioctl.h"',
           "int main(void) {"]
    src += [f'    printf("{t} %zu %zu\\n", sizeof({t}), offsetof({t}, rmStatus));' for t in types]
    src += ["    return 0;", "}"]
    (tmp_path / "sizes.c").write_text("\n".join(src) + "\n")
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", f"-I{UPSTREAM / 'nvidia-uvm'}",
                    f"-I{UPSTREAM / 'common' / 'inc'}", "-o", str(tmp_path / "sizes"), str(tmp_path / "sizes.c")],
                   check=True)
    out = subprocess.run([str(tmp_path / "sizes")], capture_output=True, text=True, check=True).stdout
    seen = 0
    for line in out.splitlines():
        name, size, status_off = line.split()
        assert (ffi.sizeof(name), ffi.offsetof(name, "rmStatus")) == (int(size), int(status_off)), name
        seen += 1
    assert seen == len(types) > 150
    # the one whose NV_ALIGN_BYTES(8) follows a ';' (it aligns rmStatus, not pma_batch_size)
    assert ffi.offsetof("UVM_TEST_PMA_GET_BATCH_SIZE_PARAMS", "rmStatus") % 8 == 0


def test_cpu_uuid(binding: Path) -> None:
    assert uvm.cpu_uuid() == uvm.CPU_UUID
    assert uvm.CPU_UUID.hex() == "a65e0f4ed7d47ba25047412c142a7773"
    assert uvm.uuid_bytes("cpu") == uvm.uuid_bytes("CPU") == uvm.CPU_UUID
    assert uvm.uuid_str(uvm.CPU_UUID) == "cpu"
    raw = bytes(range(16))
    assert uvm.uuid_str(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert uvm.uuid_bytes(uvm.uuid_str(raw)) == raw
    with pytest.raises(errors.UsageError):
        uvm.uuid_bytes(b"short")


def test_status_names(binding: Path) -> None:
    assert uvm.status_code("NV_OK") == 0
    code = uvm.status_code("NV_ERR_INVALID_ADDRESS")
    assert uvm.status_name(code) == uvm.nv_status_name(code) == "NV_ERR_INVALID_ADDRESS"
    assert uvm.status_text(code) == "Address not valid"
    assert uvm.status_name(0x7EADBEEF) == "0x7eadbeef"
    assert len(uvm.status_names()) > 100
    with pytest.raises(KeyError):
        uvm.status_code("NV_ERR_NOT_A_STATUS")


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("NV_ERR_INVALID_ADDRESS", errors.InvalidAddress),
        ("NV_ERR_INVALID_ARGUMENT", errors.InvalidValue),
        ("NV_ERR_INVALID_DEVICE", errors.UnknownGpu),
        ("NV_ERR_NOT_SUPPORTED", errors.NotSupported),
        ("NV_ERR_NO_MEMORY", errors.NoMemory),
        ("NV_ERR_ILLEGAL_ACTION", errors.InvalidState),
        ("NV_ERR_TIMEOUT", errors.Timeout),
        ("NV_ERR_INSUFFICIENT_PERMISSIONS", errors.PermissionDenied),
        ("NV_ERR_GENERIC", errors.HuvmError),
    ],
)
def test_error_mapping(binding: Path, name: str, cls: type[errors.HuvmError]) -> None:
    code = uvm.status_code(name)
    exc = errors.from_nv_status(code, "UVM_MIGRATE", uvm.nv_status_name(code))
    assert type(exc) is cls
    assert str(exc) == f"UVM_MIGRATE: {name}"
    assert exc.status == code and exc.command == "UVM_MIGRATE"


def test_params_fields(binding: Path) -> None:
    @dataclass
    class Gpu:
        uuid: bytes

    raw = bytes(range(16, 32))
    p = uvm.new_params("UVM_MIGRATE", base=2 * MIB, length=MIB, destinationUuid=Gpu(raw), flags=0)
    assert (p.base, p.length) == (2 * MIB, MIB)
    assert bytes(uvm.ffi().buffer(p.destinationUuid.uuid, 16)) == raw
    p = uvm.new_params("UVM_MIGRATE", destinationUuid="cpu")
    assert bytes(uvm.ffi().buffer(p.destinationUuid.uuid, 16)) == uvm.CPU_UUID
    p = uvm.new_params("UVM_TEST_RANGE_GROUP_TREE", rangeGroupIds=[5, 6, 7, 8])
    assert list(p.rangeGroupIds) == [5, 6, 7, 8]
    p = uvm.new_params("UVM_TEST_PMM_CHECK_LEAK", gpu_uuid=raw, chunk_size=2 * MIB, alloc_limit=-1)
    assert p.alloc_limit == -1
    p = uvm.new_params("UVM_TEST_VA_RANGE_INFO", lookup_address=4096)
    assert p.managed.vma_start == 0  # the anonymous union's member
    with pytest.raises(errors.UsageError, match="no field 'nope'"):
        uvm.new_params("UVM_MIGRATE", nope=1)
    with pytest.raises(errors.UsageError, match="holds 4 entries"):
        uvm.new_params("UVM_TEST_RANGE_GROUP_TREE", rangeGroupIds=[1] * 5)


def test_missing_binding_is_a_typed_error(binding: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(uvm.BINDING_ENV, str(tmp_path))
    assert not uvm.available() and uvm.binding_path() is None
    assert uvm.status_names() == {}
    with pytest.raises(errors.BindingMissing, match=r"UVM binding not built \(make uvm-binding\)") as info:
        uvm.Uvm.open("/dev/null")
    assert isinstance(info.value, errors.DeviceUnavailable) and info.value.reason == "uvm-binding"
    # status names fall back to the huvm ABI's subset
    assert uvm.nv_status_name(0x56) == "NV_ERR_NOT_SUPPORTED"


@pytest.fixture
def zero_uvm(binding: Path) -> Iterator[uvm.Uvm]:
    """A Uvm over a sparse memfd as large as the user address space: the shared mapping at offset ==
    address of managed memory, without nvidia-uvm."""
    fd = os.memfd_create("huvm-fake-uvm")
    os.ftruncate(fd, 1 << 47)
    u = uvm.Uvm(fd, "memfd:huvm-fake-uvm")
    yield u
    u.close()


def _mapped(addr: int) -> bool:
    for line in Path("/proc/self/maps").read_text().splitlines():
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            return True
    return False


def _vmas(lo: int, hi: int) -> int:
    n = 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        a, b = (int(x, 16) for x in line.split()[0].split("-"))
        n += a < hi and b > lo
    return n


def test_managed_region_is_aligned_mapped_and_unmapped(zero_uvm: uvm.Uvm) -> None:
    r = zero_uvm.alloc_managed(3 * MIB + 5)
    assert r.base % (2 * MIB) == 0 and r.size == 3 * MIB + uvm.PAGE_SIZE
    assert _mapped(r.base) and _mapped(r.end - 1) and not _mapped(r.end)
    view = r.view()
    view[:4] = b"abcd"
    r.write(MIB, b"xyz")
    assert r.read(0, 4) == b"abcd" and r.read(MIB, 3) == b"xyz"
    assert len(r.view(MIB, 10)) == 10
    with pytest.raises(errors.UsageError):
        r.view(r.size - 1, 2)
    del view
    assert r in zero_uvm.regions
    r.close()
    r.close()
    assert not _mapped(r.base) and r not in zero_uvm.regions
    with pytest.raises(errors.HuvmError, match="unmapped"):
        r.view()


def test_managed_region_pieces_and_offset(zero_uvm: uvm.Uvm) -> None:
    r = zero_uvm.alloc_managed(2 * MIB, pieces=[512 << 10] * 4)
    assert r.base % (2 * MIB) == 0 and _vmas(r.base, r.end) >= 1
    r2 = zero_uvm.alloc_managed(MIB, offset=MIB + (512 << 10))
    assert r2.base % (2 * MIB) == MIB + (512 << 10)
    with pytest.raises(errors.UsageError, match="do not tile"):
        zero_uvm.alloc_managed(MIB, pieces=[4096])
    with pytest.raises(errors.UsageError):
        zero_uvm.alloc_managed(MIB, align=3 * 4096)
    zero_uvm.close()
    assert not _mapped(r.base) and not _mapped(r2.base)


def test_ioctl_errno_is_typed(zero_uvm: uvm.Uvm) -> None:
    with pytest.raises(errors.HuvmError) as info:
        zero_uvm.ioctl("UVM_INITIALIZE", uvm.new_params("UVM_INITIALIZE"))
    assert info.value.errno == errno.ENOTTY and info.value.command == "UVM_INITIALIZE"
    assert "memfd:huvm-fake-uvm" in str(info.value)


# ---- the guest suite's table, checked here against the binding ------------------------------------------------

def _guest_suite() -> Any:
    path = str(ROOT / "tests" / "vm" / "softgpu")
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("test_builtin")  # the guest suite's module, by path


def _fake_gpu(i: int, n: int) -> softgpu.GpuInfo:
    links = tuple(softgpu.Link(j, "none" if j == i else "nvlink2", 0 if j == i else 2) for j in range(n))
    return softgpu.GpuInfo(i, bytes([i + 1]) * 16, f"GV100-{i}", 256 * MIB, 224 * MIB, 0, 8 + i, links, 0)


def test_guest_builtin_table_matches_the_binding(binding: Path) -> None:
    """Every built-in test the guest suite runs exists, in stage order, and every params dict it builds
    fills real fields (new_params refuses unknown ones)."""
    tb = _guest_suite()
    sglib = importlib.import_module("sglib")

    names = uvm.test_names()
    stages = [b.stage for b in tb.BUILTINS]
    assert stages == sorted(stages)
    # the binding here is 535.261.03's: a test of later branches only (branches=(580,)) is not in it
    later = {b.name for b in tb.BUILTINS if 535 not in b.branches}
    for b in tb.BUILTINS:
        assert (b.name in names) == (b.name not in later), b.name
        assert b.fd in ("uvm_cpu", "uvm_gpus", "session", "fresh"), b.name
    assert set(sglib.BUILTIN_RESULTS) - later == set(names)  # the table lists every UVM_TEST_*
    required = {"HOST_SANITY", "CE_SANITY", "TRACKER_SANITY", "PUSH_SANITY", "CHANNEL_SANITY",
                "GPU_SEMAPHORE_SANITY", "RM_MEM_SANITY", "MEM_SANITY", "INVALIDATE_TLB", "PMM_SANITY",
                "PMM_CHECK_LEAK", "VA_BLOCK", "PEER_IDENTITY_MAPPINGS", "EVICT_CHUNK", "GET_GPU_REF_COUNT",
                "GET_GPU_TIME", "PMM_QUERY", "PAGE_TREE", "RNG_SANITY"}
    run = {b.name for b in tb.BUILTINS if not b.not_run}
    assert required <= run, required - run

    class FakeSg:
        client = 0xC1

    gpus = tuple(_fake_gpu(i, 2) for i in range(2))
    session = sglib.Session(FakeSg(), None, gpus)
    ctx = tb.Ctx(None, FakeSg(), session)
    for b in tb.BUILTINS:
        if b.params is None:
            continue
        runs = list(b.params(ctx))
        assert runs, b.name
        for fields in runs:
            uvm.new_params(uvm.test_command(b.name), **fields)


def test_uvm_ioctl_headers_route_every_test_the_suite_runs(binding: Path) -> None:
    """uvm_test.c routes each test the suite runs (a number the module does not route answers EINVAL)."""
    text = (UPSTREAM / "nvidia-uvm" / "uvm_test.c").read_text()
    routed = set(re.findall(r"UVM_ROUTE_CMD_\w+\(UVM_TEST_(\w+),", text))
    for b in _guest_suite().BUILTINS:
        if not b.not_run and 535 in b.branches:   # UPSTREAM is 535.261.03's tree
            assert b.name in routed, b.name


def test_tools_event_queue_entries_and_refusals(binding: Path) -> None:
    """The tools event queue's layouts come from uvm_types.h (compiled): an entry is as large as the kernel's
    UvmEventEntry, the eviction info is read at the compiler's offsets, and a queue of a size UVM refuses (not a
    power of 2) or of an unknown version is refused before any file is opened."""
    f, lib = uvm.ffi(), uvm.lib()
    assert f.sizeof("UvmEventEntry") >= f.sizeof("UvmEventEvictionInfo")
    assert f.sizeof("UvmEventEntry") % 8 == 0      # "ensure that this structure is 64 bit aligned" (uvm_types.h)
    assert f.sizeof("UvmToolsEventControlData") == 16 + 8 * int(lib.UvmEventNumTypesAll)
    entry = f.new("UvmEventEntry *")
    info = f.cast("UvmEventEvictionInfo *", entry)
    info.eventType, info.srcIndex, info.dstIndex = lib.UvmEventTypeEviction, 2, 0
    info.addressOut, info.size, info.timeStamp = 0x7F00_0020_0000, 2 << 20, 99
    raw = bytes(f.buffer(entry))
    assert raw[0] == lib.UvmEventTypeEviction and raw[1:3] == b"\x02\x00"
    ev = uvm.ToolsEventQueue.eviction(object.__new__(uvm.ToolsEventQueue), uvm.ToolsEvent(raw[0], raw, 1))
    assert (ev.src, ev.dst, ev.address, ev.size, ev.timestamp) == (2, 0, 0x7F00_0020_0000, 2 << 20, 99)
    with pytest.raises(errors.UsageError, match="not an eviction"):
        uvm.ToolsEventQueue.eviction(object.__new__(uvm.ToolsEventQueue), uvm.ToolsEvent(3, raw, 1))

    class NoUvm:
        fd = -1

    for entries in (0, 1, 6, 3 << 20):
        with pytest.raises(errors.UsageError, match="power of 2"):
            uvm.ToolsEventQueue(NoUvm(), entries)  # type: ignore[arg-type]
    with pytest.raises(errors.UsageError, match="version 3"):
        uvm.ToolsEventQueue(NoUvm(), 16, version=3)  # type: ignore[arg-type]
    # 535's binding has no V2 queue (570 added it)
    with pytest.raises(errors.NotSupported, match="570"):
        uvm.ToolsEventQueue(NoUvm(), 16, version=2)  # type: ignore[arg-type]
    with pytest.raises(errors.DeviceUnavailable):
        uvm.ToolsEventQueue(NoUvm(), 16, path="/nonexistent/nvidia-uvm-tools")  # type: ignore[arg-type]
