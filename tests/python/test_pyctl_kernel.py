"""KernelBackend's pure parts with a fake fd and ioctl (the real device is tested in the qemu test bed)."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest
from huvm import abi, client
from huvm.backend import KernelBackend
from huvm.errors import AbiMismatch, DeviceUnavailable, HuvmError, PermissionDenied, PolicyError
from huvm_testing import CoreNode


def opener(fd: int = 7, exc: OSError | None = None) -> Any:
    seen: list[tuple[str, int]] = []

    def fake_open(path: str, flags: int) -> int:
        seen.append((path, flags))
        if exc is not None:
            raise exc
        return fd

    fake_open.seen = seen  # type: ignore[attr-defined]
    return fake_open


def kernel(fake: CoreNode, **kw: Any) -> KernelBackend:
    closed: list[int] = []
    kb = KernelBackend("/dev/nvidia-uvm", open_fn=opener(), ioctl_fn=fake.fake_ioctl(**kw), close_fn=closed.append)
    kb.closed = closed  # type: ignore[attr-defined]
    return kb


def test_ioctl_round_trip_through_buffer() -> None:
    fake = CoreNode(2)
    kb = kernel(fake)
    node = client.Node(kb)
    info = node.info()
    assert [g.name for g in info.gpus] == ["sim0", "sim1"]
    assert info.module_abi_version == abi.ABI_VERSION
    node.set(["prefetch_chunks=12"])
    assert node.get_policy().prefetch_chunks == 12
    assert fake.calls.count(abi.lib.HUVM_IOCTL_SET_POLICY) == 1
    kb.close()
    kb.close()
    assert kb.closed == [7]  # type: ignore[attr-defined]
    with pytest.raises(HuvmError, match="closed"):
        node.info()


def test_open_flags_and_path() -> None:
    op = opener()
    KernelBackend("/dev/nvidia-uvm", open_fn=op, ioctl_fn=CoreNode(1).fake_ioctl())
    assert op.seen == [("/dev/nvidia-uvm", os.O_RDWR | os.O_CLOEXEC)]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (FileNotFoundError(errno.ENOENT, "no"), "no-device"),
        (PermissionError(errno.EACCES, "denied"), "permission"),
        (OSError(errno.ENXIO, "No such device or address"), "open-failed"),
    ],
)
def test_open_failures_say_why(exc: OSError, reason: str) -> None:
    with pytest.raises(DeviceUnavailable) as info:
        KernelBackend("/dev/nvidia-uvm", open_fn=opener(exc=exc), ioctl_fn=CoreNode(1).fake_ioctl())
    assert info.value.reason == reason
    assert "/dev/nvidia-uvm" in str(info.value)


def test_probe_stock_module() -> None:
    kb = kernel(CoreNode(1), known=False)
    with pytest.raises(DeviceUnavailable, match="stock module") as info:
        kb.probe()
    assert info.value.reason == "stock-module"


def test_probe_abi_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    kb = kernel(CoreNode(1))
    monkeypatch.setattr(abi, "ABI_VERSION", (abi.ABI_VERSION & ~0xFFFF0000) | (9 << 16))
    with pytest.raises(DeviceUnavailable, match="ABI") as info:
        kb.probe()
    assert info.value.reason == "abi-version"


def test_header_refusal_is_an_abi_mismatch() -> None:
    # a tool built with another struct size: the module writes back its ABI version and fails with EINVAL
    kb = kernel(CoreNode(1))
    p = abi.new_params(abi.lib.HUVM_IOCTL_GET_INFO)
    p.hdr.size -= 8
    with pytest.raises(AbiMismatch) as info:
        kb.ioctl(abi.lib.HUVM_IOCTL_GET_INFO, p)
    assert info.value.module_abi_version == abi.ABI_VERSION and "header refused" in str(info.value)


def test_probe_ok_returns_info() -> None:
    p = kernel(CoreNode(3)).probe()
    assert p.gpu_count == 3 and p.rmStatus == 0


def test_errno_from_ioctl() -> None:
    fake = CoreNode(1)
    kb = kernel(fake)
    fake.fail_errno = errno.EPERM
    with pytest.raises(PermissionDenied):
        client.Node(kb).info()
    fake.fail_errno = errno.EIO
    with pytest.raises(HuvmError, match="EIO"):
        client.Node(kb).info()


def test_unprivileged_set_is_refused() -> None:
    fake = CoreNode(1, privileged=False)
    node = client.Node(kernel(fake))
    assert node.info().gpus  # reading is allowed
    with pytest.raises(PermissionDenied):
        node.set(["prefetch_chunks=8"])


def test_open_auto_without_device(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUVM_BACKEND", raising=False)
    monkeypatch.delenv("HUVM_SIM_FALLBACK", raising=False)
    with pytest.raises(DeviceUnavailable) as info:
        client.open("auto", str(tmp_path / "nvidia-uvm"))
    assert info.value.reason == "no-device" and "--backend sim" in (info.value.hint or "")
    with pytest.raises(DeviceUnavailable):
        client.open("kernel", str(tmp_path / "nvidia-uvm"), sim_fallback=True)  # kernel: never falls back


def test_open_auto_on_a_non_huvm_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # /dev/null answers ioctls with ENOTTY: like a stock module, it is not huvm
    with pytest.raises(DeviceUnavailable) as info:
        client.open("auto", "/dev/null")
    assert info.value.reason == "stock-module"


def test_open_bad_backend_name() -> None:
    with pytest.raises(HuvmError, match="unknown backend"):
        client.open("gpu")


def test_policy_error_is_not_a_device_error() -> None:
    assert not issubclass(PolicyError, DeviceUnavailable)
