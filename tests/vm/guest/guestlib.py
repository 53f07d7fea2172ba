"""Helpers of the guest tests: the synthetic node, raw ioctls and state snapshots.

Everything goes through the patched nvidia-uvm's device /dev/nvidia-uvm (loaded on the software GPU by
tests/vm/guest/run-guest.sh with uvm_enable_builtin_tests=1) with the struct layouts and numbers of huvm's compiled
ABI (huvm.abi, cffi); nothing here restates a layout. While no VA space has registered a GPU, huvm has no GPU of
its own, so its test commands (TEST_SET_NODE, TEST_EVENT) may describe a synthetic node and feed it events.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from typing import Any

import huvm
from huvm import abi

DEVICE = os.environ.get("HUVM_DEVICE", "/dev/nvidia-uvm")
MODULE = "nvidia_uvm"
GPUS = 4
MEMORY = 16 << 30          # 16 GiB per GPU (V100-SXM2-16GB class)
FREE = 8 << 30             # half of it free when the node is set
CHUNK = abi.CHUNK_SIZE

ffi: Any = abi.ffi
lib: Any = abi.lib


def uuid_of(i: int) -> bytes:
    """A fixed, recognisable UUID for synthetic GPU i (no emulated GPU has it)."""
    return bytes([0x6B, 0x74, 0x65, 0x73, 0x74, 0x00, 0x40, i, 0x80, 0x00]) + bytes([0xA0 + i] * 6)


def open_node() -> Any:
    """huvm.Node on the test device, through pyctl's kernel backend (GET_INFO probe included)."""
    return huvm.open(backend="kernel", device=DEVICE)


def node_params(gpu_count: int = GPUS, memory: int = MEMORY, free: int = FREE) -> Any:
    """TEST_SET_NODE params: gpu_count GPUs, every pair joined by 2 NVLink-2 links (50 GB/s)."""
    p = abi.new_params(lib.HUVM_IOCTL_TEST_SET_NODE)
    p.gpu_count = gpu_count
    for i in range(gpu_count):
        g = p.gpus[i]
        ffi.memmove(g.uuid, uuid_of(i), 16)
        g.name = f"synth{i}".encode()
        g.memory_bytes = memory
        g.free_bytes = free
        g.pcie_mbyte_per_s = 12000
        g.flags = lib.HUVM_GPU_FLAG_PRESENT | lib.HUVM_GPU_FLAG_REPLAYABLE_FAULTS | lib.HUVM_GPU_FLAG_PMA_EVICTION
    for a in range(gpu_count):
        for b in range(gpu_count):
            if a != b:
                lk = p.links[a][b]
                lk.link_type, lk.link_count, lk.mbyte_per_s = lib.HUVM_LINK_NVLINK_2, 2, 50000
    return p


def set_node(node: Any, gpu_count: int = GPUS, memory: int = MEMORY, free: int = FREE) -> Any:
    return node.call(lib.HUVM_IOCTL_TEST_SET_NODE, node_params(gpu_count, memory, free))


def build_busy_node() -> None:
    """Root's set-up for the unprivileged suite (test commands need CAP_SYS_ADMIN): a GPUS-GPU node
    with 6 evictions and 2 faults on GPU 0, left in place for the unprivileged process to read."""
    node = open_node()
    try:
        set_node(node)
        event(node, lib.HUVM_TEST_EVENT_EVICT, 0, 6)
        event(node, lib.HUVM_TEST_EVENT_FAULT, 0, 2)
    finally:
        node.close()


def get_policy(node: Any) -> Any:
    """GET_POLICY as an owning ``huvm_policy_t *``. (A struct field of a cdata, like ``params.policy``, does
    not keep its owner alive: ``node.call(...).policy`` would point into freed memory.)"""
    params = node.call(lib.HUVM_IOCTL_GET_POLICY)
    policy = ffi.new("huvm_policy_t *")
    ffi.memmove(policy, ffi.addressof(params.policy), ffi.sizeof("huvm_policy_t"))
    return policy


def base_policy(node: Any, role: int | None = None) -> Any:
    """SET_POLICY params: the huvm preset's node-wide values, every GPU of the node listed with role
    (default BOTH: harvests and lends), unlimited lending, no reserve. Unconditional (generation 0)."""
    p = abi.new_params(lib.HUVM_IOCTL_SET_POLICY)
    assert lib.huvm_policy_preset(lib.HUVM_PRESET_HUVM, ffi.NULL, ffi.addressof(p.policy)) == lib.HUVM_NV_OK
    p.policy.generation = 0
    info = node.call(lib.HUVM_IOCTL_GET_INFO)
    p.policy.gpu_count = info.gpu_count
    for i in range(info.gpu_count):
        e = p.policy.gpus[i]
        ffi.memmove(e.uuid, info.gpus[i].uuid, 16)
        e.role = lib.HUVM_ROLE_BOTH if role is None else role
        e.flags = 0
        e.lend_limit_bytes = abi.UNLIMITED
        e.lend_reserve_bytes = 0
    return p


def event(node: Any, kind: int, gpu: int, count: int, *, flags: int = 0, va: int = 0) -> Any:
    p = abi.new_params(lib.HUVM_IOCTL_TEST_EVENT)
    p.event, p.gpu, p.count, p.flags, p.va = kind, gpu, count, flags, va
    return node.call(lib.HUVM_IOCTL_TEST_EVENT, p)


def raw_ioctl(cmd: int, buf: Any, fd: int | None = None) -> int:
    """ioctl(2) on the device with buf (cdata params, bytearray or an int pointer); returns 0 or the errno."""
    own = fd is None
    if own:
        fd = os.open(DEVICE, os.O_RDWR | os.O_CLOEXEC)
    try:
        if isinstance(buf, int):
            fcntl.ioctl(fd, cmd, buf)       # a raw pointer value (0: NULL)
        else:
            fcntl.ioctl(fd, cmd, abi.as_buffer(buf) if isinstance(buf, ffi.CData) else buf, True)
        return 0
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        if own:
            os.close(fd)


def params_bytes(p: Any) -> bytes:
    return bytes(abi.as_buffer(p))


@dataclass(frozen=True)
class Snapshot:
    """Everything a command could change: node (GET_INFO), policy (GET_POLICY), counters (GET_STATS)."""

    info: bytes
    policy: bytes
    stats: bytes

    def diff(self, other: Snapshot) -> list[str]:
        return [k for k in ("info", "policy", "stats") if getattr(self, k) != getattr(other, k)]


def snapshot(node: Any) -> Snapshot:
    info = node.call(lib.HUVM_IOCTL_GET_INFO)
    policy = node.call(lib.HUVM_IOCTL_GET_POLICY)
    stats = node.call(lib.HUVM_IOCTL_GET_STATS)
    stats.timestamp_ns = 0     # the only field that moves by itself
    return Snapshot(params_bytes(info), params_bytes(policy), params_bytes(stats))


def counter_sum(stats: Any, name: str, gpus: int = GPUS) -> int:
    return sum(int(getattr(stats.gpus[g], name)) for g in range(gpus))
