"""GET_INFO and TEST_SET_NODE through pyctl's kernel backend on the patched nvidia-uvm's device."""

from __future__ import annotations

import os
import stat
from typing import Any

import guestlib
from huvm import abi

lib = abi.lib


def test_device_node_is_world_accessible() -> None:
    st = os.stat(guestlib.DEVICE)
    assert stat.S_ISCHR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o666


def test_module_identity_and_tracepoints() -> None:
    with open("/proc/modules") as f:
        assert any(line.startswith(guestlib.MODULE + " ") for line in f)
    # The test commands are allowed by nvidia-uvm's own switch for its built-in tests.
    with open(f"/sys/module/{guestlib.MODULE}/parameters/uvm_enable_builtin_tests") as f:
        assert f.read().strip() == "1"
    events = [e for e in os.listdir("/sys/kernel/tracing/events/huvm") if e not in ("enable", "filter")]
    assert len(events) == 6     # names: test_tracepoints.py


def test_get_info_reports_the_synthetic_node(node: Any) -> None:
    p = node.call(lib.HUVM_IOCTL_GET_INFO)
    assert p.hdr.module_abi_version == lib.HUVM_ABI_VERSION
    assert p.huvm_version == lib.HUVM_VERSION
    assert p.backend == lib.HUVM_BACKEND_KERNEL
    assert p.max_gpus == lib.HUVM_MAX_GPUS
    assert abi.cstr(p.upstream_version) == "535.261.03"
    assert p.gpu_count == guestlib.GPUS
    for i in range(guestlib.GPUS):
        g = p.gpus[i]
        assert bytes(abi.ffi.buffer(g.uuid, 16)) == guestlib.uuid_of(i)
        assert abi.cstr(g.name) == f"synth{i}"
        assert g.memory_bytes == guestlib.MEMORY
        assert g.free_bytes == guestlib.FREE
        for j in range(guestlib.GPUS):
            lk = p.links[i][j]
            if i == j:
                assert lk.link_type == lib.HUVM_LINK_NONE
            else:
                assert (lk.link_type, lk.link_count, lk.mbyte_per_s) == (lib.HUVM_LINK_NVLINK_2, 2, 50000)
    assert p.rmStatus == lib.HUVM_NV_OK


def test_typed_info_matches_raw(node: Any) -> None:
    info = node.info()
    assert len(info.gpus) == guestlib.GPUS
    assert node.backend.description.endswith(f"({guestlib.DEVICE})")


def test_set_node_replaces_gpus_and_zeroes_counters(busy_node: Any) -> None:
    node = busy_node
    assert guestlib.counter_sum(node.call(lib.HUVM_IOCTL_GET_STATS), "evict_to_peer") > 0
    guestlib.set_node(node, gpu_count=2, memory=32 << 30, free=1 << 30)
    p = node.call(lib.HUVM_IOCTL_GET_INFO)
    assert p.gpu_count == 2
    assert p.gpus[1].memory_bytes == 32 << 30
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    assert s.gpu_count == 2
    assert guestlib.counter_sum(s, "evict_to_peer", 2) == 0
    # Policy entries are kept by UUID across node changes.
    pol = guestlib.get_policy(node)
    assert pol.gpu_count >= guestlib.GPUS


def test_list_va_spaces_is_empty_on_the_synthetic_node(node: Any) -> None:
    # No process of the guest suite initializes a VA space (pyctl never sends UVM_INITIALIZE).
    assert node.va_spaces() == []
