"""huvm.softgpu's pure parts against a fake /dev/huvm-softgpu (the real device runs in the qemu test bed):
the ABI carried by huvm's extension, params headers, GET_INFO/GET_COUNTERS decoding, SM access batches,
and the mapping of rmStatus and errno to typed exceptions."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from huvm import abi, errors, softgpu, uvm

ffi, lib = abi.ffi, abi.lib
NV_ERR_INVALID_ARGUMENT = 0x1F
NV_ERR_NOT_SUPPORTED = 0x56
NV_ERR_INVALID_ADDRESS = 0x1E

PARAMS = {
    lib.SOFTGPU_IOCTL_GET_INFO: "SOFTGPU_GET_INFO_PARAMS",
    lib.SOFTGPU_IOCTL_CREATE_VASPACE: "SOFTGPU_CREATE_VASPACE_PARAMS",
    lib.SOFTGPU_IOCTL_CREATE_CHANNEL: "SOFTGPU_CREATE_CHANNEL_PARAMS",
    lib.SOFTGPU_IOCTL_DESTROY_OBJECT: "SOFTGPU_DESTROY_OBJECT_PARAMS",
    lib.SOFTGPU_IOCTL_SM_ACCESS: "SOFTGPU_SM_ACCESS_PARAMS",
    lib.SOFTGPU_IOCTL_FOREIGN_ALLOC: "SOFTGPU_FOREIGN_ALLOC_PARAMS",
    lib.SOFTGPU_IOCTL_FOREIGN_FREE: "SOFTGPU_FOREIGN_FREE_PARAMS",
    lib.SOFTGPU_IOCTL_SET_KNOB: "SOFTGPU_SET_KNOB_PARAMS",
    lib.SOFTGPU_IOCTL_GET_COUNTERS: "SOFTGPU_GET_COUNTERS_PARAMS",
}


class FakeDevice:
    """Two GPUs joined by a 2-link NVLink; handles count up from 0x100; the SM writes the pattern."""

    def __init__(self, gpus: int = 2) -> None:
        self.gpus = gpus
        self.calls: list[tuple[int, int]] = []
        self.next_handle = 0x100
        self.objects: dict[int, str] = {}
        self.batches: list[int] = []
        self.errno: int | None = None
        self.status: int = 0

    def ioctl(self, fd: int, cmd: int, buf: Any, mutate: bool) -> int:
        assert mutate and fd == 7
        if self.errno is not None:
            raise OSError(self.errno, "fake")
        ctype = PARAMS[cmd]
        p = ffi.from_buffer(f"{ctype} *", buf)
        assert p.abi_version == lib.SOFTGPU_ABI_VERSION and p.size == ffi.sizeof(ctype) == len(buf)
        self.calls.append((cmd, p.size))
        if self.status:
            p.rmStatus = self.status
            return 0
        getattr(self, ctype.removeprefix("SOFTGPU_").removesuffix("_PARAMS").lower())(p)
        return 0

    def _handle(self, kind: str) -> int:
        self.next_handle += 1
        self.objects[self.next_handle] = kind
        return self.next_handle

    def get_info(self, p: Any) -> None:
        p.gpu_count = self.gpus
        p.client = 0xC1
        for i in range(self.gpus):
            g = p.gpus[i]
            g.uuid = list(bytes([0xA0 + i]) * 16)
            g.name = f"GV100-softgpu-{i}".encode()
            g.fb_bytes, g.pma_bytes = 256 << 20, 224 << 20
            g.pci_domain, g.pci_bdf = 0, (1 << 8) | ((3 + i) << 3)
            for j in range(self.gpus):
                g.link_type[j] = lib.SOFTGPU_LINK_NONE if i == j else lib.SOFTGPU_LINK_NVLINK2
                g.link_count[j] = 0 if i == j else 2
            g.registered = 1
            g.gpu_arch = lib.SOFTGPU_ARCH_GA100 if i == 0 else 0x999

    def create_vaspace(self, p: Any) -> None:
        if p.gpu_index >= self.gpus:
            p.rmStatus = NV_ERR_INVALID_ARGUMENT
            return
        p.handle = self._handle("vaspace")

    def create_channel(self, p: Any) -> None:
        assert self.objects.get(p.va_space) == "vaspace"
        p.handle = self._handle("channel")
        p.instance_pa = 0x1234000

    def destroy_object(self, p: Any) -> None:
        self.objects.pop(p.handle)

    def sm_access(self, p: Any) -> None:
        assert self.objects.get(p.channel) == "channel" and 0 < p.count <= lib.SOFTGPU_MAX_ACCESSES
        self.batches.append(p.count)
        arr = ffi.cast("softgpu_access_t *", p.accesses)
        for i in range(p.count):
            a = arr[i]
            a.faults = 1
            if a.va == 0xBAD000:
                a.status = NV_ERR_INVALID_ADDRESS
                continue
            if a.type == lib.SOFTGPU_ACCESS_READ and a.flags & lib.SOFTGPU_ACCESS_FLAG_VERIFY and a.seed == 99:
                a.mismatches, a.first_mismatch_va = 3, a.va + 8
            if a.type == lib.SOFTGPU_ACCESS_READ and a.data:
                ffi.memmove(ffi.cast("char *", a.data), b"\x5a" * a.size, a.size)
            if a.type == lib.SOFTGPU_ACCESS_ATOMIC_INC:
                a.value = 41 + i
            p.completed += 1

    def foreign_alloc(self, p: Any) -> None:
        p.handle = self._handle("foreign")
        p.allocated = p.bytes

    def foreign_free(self, p: Any) -> None:
        self.objects.pop(p.handle)

    def set_knob(self, p: Any) -> None:
        if p.knob != lib.SOFTGPU_KNOB_COPY_MBPS:
            p.rmStatus = NV_ERR_NOT_SUPPORTED

    def get_counters(self, p: Any) -> None:
        p.gpu_count = self.gpus
        for i in range(self.gpus):
            for k in range(lib.SOFTGPU_CTR_COUNT):
                p.gpus[i].counters[k] = 100 * i + k + len(self.calls)
            p.gpus[i].pma_free_bytes = 1 << 20


def device(fake: FakeDevice) -> softgpu.SoftGpu:
    closed: list[int] = []
    dev = softgpu.SoftGpu("/dev/huvm-softgpu", open_fn=lambda path, flags: 7, ioctl_fn=fake.ioctl,
                          close_fn=closed.append)
    dev.closed = closed  # type: ignore[attr-defined]
    return dev


def test_abi_is_in_huvms_extension() -> None:
    assert lib.SOFTGPU_IOCTL_GET_INFO == 1901 and lib.SOFTGPU_IOCTL_GET_COUNTERS == 1909
    for ctype in PARAMS.values():
        assert ffi.sizeof(ctype) % 8 == 0, ctype
        assert ffi.offsetof(ctype, "abi_version") == 0 and ffi.offsetof(ctype, "size") == 4
    assert ffi.sizeof("softgpu_access_t") % 8 == 0
    assert softgpu.counter_names()[lib.SOFTGPU_CTR_FAULTS] == "faults"
    assert len(softgpu.counter_names()) == lib.SOFTGPU_CTR_COUNT
    assert softgpu.counter_names()[lib.SOFTGPU_CTR_PEER_PHYS_COPIES] == "peer_phys_copies"
    assert (lib.SOFTGPU_ARCH_GV100, lib.SOFTGPU_ARCH_GA100) == (0x140, 0x170)


def test_info_objects_and_close() -> None:
    fake = FakeDevice()
    dev = device(fake)
    info = dev.info()
    assert info.client == dev.client == 0xC1
    g0, g1 = info.gpus
    assert g0.uuid == bytes([0xA0]) * 16 and g0.uuid_str == "GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0"
    assert g1.name == "GV100-softgpu-1" and g1.pma_bytes == 224 << 20 and g1.pci_address == "0000:01:04.0"
    assert g0.link_to(g1) == softgpu.Link(1, "nvlink2", 2) and g0.link_to(0).type == "none"
    assert (g0.gpu_arch, g0.arch) == (0x170, "ampere") and g1.arch == "0x999"
    vas = dev.create_vaspace(g1)
    chan = dev.create_channel(vas)
    assert (vas.gpu, chan.gpu, chan.instance_pa) == (1, 1, 0x1234000)
    dev.destroy(chan)
    dev.destroy(vas.handle)
    assert fake.objects == {}
    fa = dev.foreign_alloc(0, 4 << 20)
    assert fa.allocated == 4 << 20
    dev.foreign_free(fa)
    dev.set_knob("copy_mbps", g0, 100)
    with dev:
        pass
    assert dev.closed == [7]  # type: ignore[attr-defined]
    dev.close()
    assert dev.closed == [7]  # type: ignore[attr-defined]
    with pytest.raises(errors.HuvmError, match="closed"):
        dev.info()


def test_refusals_are_typed() -> None:
    fake = FakeDevice()
    dev = device(fake)
    with pytest.raises(errors.InvalidValue) as info:
        dev.create_vaspace(5)
    assert info.value.command == "SOFTGPU_CREATE_VASPACE" and info.value.status == NV_ERR_INVALID_ARGUMENT
    assert "NV_ERR_INVALID_ARGUMENT" in str(info.value)
    with pytest.raises(errors.NotSupported):
        dev.set_knob("fail_pma_alloc", 0, 1)
    with pytest.raises(errors.UsageError):
        dev.set_knob("no_such_knob", 0, 1)
    fake.errno = errno.ENOTTY
    with pytest.raises(errors.NotSupported) as e2:
        dev.counters()
    assert e2.value.errno == errno.ENOTTY


def test_open_failures() -> None:
    def missing(path: str, flags: int) -> int:
        raise FileNotFoundError(errno.ENOENT, "no")

    with pytest.raises(errors.DeviceUnavailable) as info:
        softgpu.SoftGpu("/dev/none", open_fn=missing)
    assert info.value.reason == "no-device" and "huvm-softgpu.ko" in str(info.value)


def test_counters_and_deltas() -> None:
    fake = FakeDevice()
    dev = device(fake)
    before = dev.counters()
    after = dev.counters()
    assert after.gpus[1]["faults"] == 100 + lib.SOFTGPU_CTR_FAULTS + 2
    delta = after.minus(before)
    assert delta.gpus[0]["faults"] == 1 and delta.total("sm_accesses") == 2
    assert after.gpus[0].pma_free_bytes == 1 << 20


def test_sm_access_batches_and_results() -> None:
    fake = FakeDevice()
    dev = device(fake)
    chan = dev.create_channel(dev.create_vaspace(0))
    n = int(lib.SOFTGPU_MAX_ACCESSES) + 3
    results = dev.sm_access(chan, [softgpu.Access.write(0x100000 + 8 * i, 8, seed=5) for i in range(n)])
    assert fake.batches == [lib.SOFTGPU_MAX_ACCESSES, 3]
    assert len(results) == n and all(r.ok and r.faults == 1 for r in results)

    out = bytearray(16)
    (r,) = dev.sm_access(chan, [softgpu.Access.read(0x2000, 16, into=out)])
    assert bytes(out) == b"\x5a" * 16 and r.ok
    incs = dev.sm_access(chan.handle, [softgpu.Access.atomic_inc(0x3000)] * 2)
    assert [x.value for x in incs] == [41, 42]

    bad = dev.sm_access(chan, [softgpu.Access.read(0x4000, 64, seed=99)])
    assert bad[0].mismatches == 3 and not bad[0].ok
    with pytest.raises(errors.HuvmError, match="3 words differ"):
        dev.sm_access(chan, [softgpu.Access.read(0x4000, 64, seed=99)], check=True)
    with pytest.raises(errors.HuvmError, match="write at 0xbad000") as info:
        dev.sm_access(chan, [softgpu.Access.write(0xBAD000, 8)], check=True)
    assert info.value.status == NV_ERR_INVALID_ADDRESS
    if uvm.available():  # the full NV_STATUS table names it (without the binding: the huvm ABI's subset)
        assert isinstance(info.value, errors.InvalidAddress) and "NV_ERR_INVALID_ADDRESS" in str(info.value)
    with pytest.raises(errors.UsageError, match="holds 4 < 8"):
        dev.sm_access(chan, [softgpu.Access.read(0x5000, 8, into=bytearray(4))])
    with pytest.raises(errors.UsageError, match="access type"):
        dev.sm_access(chan, [softgpu.Access(0x5000, 8, "flush")])
