"""Every class of malformed request is refused by the real ioctl path with the documented errno or
NV_STATUS (and error_field), and leaves the module's state (node, policy, counters) unchanged.

Transport failures are errnos (driver/uvm/uvm_huvm.c, uvm_huvm_ioctl): EFAULT bad pointer, EINVAL a header
size that is not this module's struct size (only the header is copied back, with module_abi_version set), ENOMEM.
Everything else is in-band: the ioctl returns 0 and rmStatus/error_field say why. huvm's commands are the numbers
HUVM_IOCTL_FIRST..HUVM_IOCTL_LAST; nvidia-uvm's uvm_ioctl hands every other number to UVM's own switch, which
answers one it does not know with EINVAL (uvm_test_ioctl's default), so huvm's ENOTTY (no huvm command of that
number) is not reachable on the loaded module.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

import guestlib
import huvm
import pytest
from huvm import abi, uvm

lib = abi.lib
ffi = abi.ffi
GB = 1 << 30


def gpu_field(index: int, field: int) -> int:
    return lib.HUVM_FIELD_GPU_BASE + lib.HUVM_FIELD_GPU_STRIDE * index + field


def refused(node: Any, cmd: int, params: Any) -> tuple[int, int, int]:
    """Send params raw; return (errno, rmStatus, error_field) and check the state did not change."""
    before = guestlib.snapshot(node)
    err = guestlib.raw_ioctl(cmd, params)
    after = guestlib.snapshot(node)
    assert after.diff(before) == [], f"state changed: {after.diff(before)}"
    return err, int(params.rmStatus), int(params.error_field)


# ---- transport-level refusals (errno) -----------------------------------------------------------------

# Numbers nvidia-uvm 535.261.03 and 580.142 assign to nothing: next to huvm's range (1800, 1811), between UVM's
# commands (0; 199, below the test commands' base 200: 535's last command is 75, 580's 80) and its test commands
# (1900), beside UVM_INITIALIZE (0x30000003) and an _IOC-encoded number. The test checks them against the UVM
# binding (huvm.uvm, built from the loaded nvidia-uvm's headers).
@pytest.mark.parametrize("cmd", [0, 199, 1800, 1811, 1900, 0xC0104801, 0x30000003])
def test_unknown_command_is_einval_from_uvm(busy_node: Any, cmd: int) -> None:
    assert not lib.HUVM_IOCTL_FIRST <= cmd <= lib.HUVM_IOCTL_LAST
    assert cmd not in uvm.commands().values()
    before = guestlib.snapshot(busy_node)
    buf = bytearray(abi.as_buffer(abi.new_params(lib.HUVM_IOCTL_GET_STATS)))
    sent = bytes(buf)
    assert guestlib.raw_ioctl(cmd, buf) == errno.EINVAL
    assert bytes(buf) == sent, "nothing may be written back for an unknown command"
    assert guestlib.snapshot(busy_node) == before


# UVM's own commands are answered by UVM: on a file with no VA space, in-band with NV_ERR_ILLEGAL_ACTION
# (uvm_api.h's init check) and ioctl 0; huvm's state is not touched.
@pytest.mark.parametrize("name", ["UVM_PAGEABLE_MEM_ACCESS", "UVM_TEST_GET_GPU_REF_COUNT"])
def test_uvm_commands_do_not_reach_huvm(busy_node: Any, name: str) -> None:
    before = guestlib.snapshot(busy_node)
    params = uvm.new_params(name)
    assert guestlib.raw_ioctl(uvm.commands()[name], uvm.ffi().buffer(params)) == 0
    assert params.rmStatus == uvm.status_code("NV_ERR_ILLEGAL_ACTION")
    assert guestlib.snapshot(busy_node) == before


@pytest.mark.parametrize("cmd", [lib.HUVM_IOCTL_GET_INFO, lib.HUVM_IOCTL_SET_POLICY, lib.HUVM_IOCTL_TEST_EVENT])
def test_null_pointer_is_efault(busy_node: Any, cmd: int) -> None:
    before = guestlib.snapshot(busy_node)
    assert guestlib.raw_ioctl(cmd, 0) == errno.EFAULT
    assert guestlib.snapshot(busy_node) == before


@pytest.mark.parametrize("delta", [-8, 8, "zero", "header-only"])
@pytest.mark.parametrize("cmd", [lib.HUVM_IOCTL_GET_POLICY, lib.HUVM_IOCTL_SET_POLICY, lib.HUVM_IOCTL_RESET_STATS,
                                 lib.HUVM_IOCTL_TEST_SET_NODE])
def test_wrong_size_is_einval_with_module_abi_version(busy_node: Any, cmd: int, delta: int | str) -> None:
    size = lib.huvm_cmd_params_size(cmd)
    if cmd == lib.HUVM_IOCTL_SET_POLICY:
        params = guestlib.base_policy(busy_node)
        params.policy.hysteresis_ms = 1         # a valid change: it must not be applied
    else:
        params = abi.new_params(cmd)
    params.hdr.size = size + delta if isinstance(delta, int) else {"zero": 0, "header-only": 16}[delta]
    params.hdr.module_abi_version = 0
    err, status, field = refused(busy_node, cmd, params)
    assert err == errno.EINVAL
    assert params.hdr.module_abi_version == lib.HUVM_ABI_VERSION
    assert (status, field) == (0, 0), "the tail must not be written when the layout is unknown"


def test_short_buffer_through_pyctl_is_abi_mismatch(busy_node: Any) -> None:
    """EINVAL with module_abi_version written back: pyctl tells an ABI/size mismatch from a stock module."""
    p = abi.new_params(lib.HUVM_IOCTL_GET_STATS)
    p.hdr.size -= 8
    with pytest.raises(huvm.AbiMismatch) as exc:
        busy_node.call(lib.HUVM_IOCTL_GET_STATS, p)
    assert exc.value.errno == errno.EINVAL
    assert exc.value.module_abi_version == lib.HUVM_ABI_VERSION


# ---- header refusals in-band -------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, (lib.HUVM_ABI_VERSION_MAJOR + 1) << 16, 0xFFFFFFFF])
@pytest.mark.parametrize("cmd", [lib.HUVM_IOCTL_GET_INFO, lib.HUVM_IOCTL_SET_POLICY, lib.HUVM_IOCTL_TEST_EVENT])
def test_wrong_abi_major_is_not_compatible(busy_node: Any, cmd: int, version: int) -> None:
    params = guestlib.base_policy(busy_node) if cmd == lib.HUVM_IOCTL_SET_POLICY else abi.new_params(cmd)
    params.hdr.abi_version = version
    err, status, field = refused(busy_node, cmd, params)
    assert err == 0
    assert (status, field) == (lib.HUVM_NV_ERR_NOT_COMPATIBLE, lib.HUVM_FIELD_HDR_ABI_VERSION)
    assert params.hdr.module_abi_version == lib.HUVM_ABI_VERSION


def test_newer_minor_version_is_accepted(busy_node: Any) -> None:
    p = abi.new_params(lib.HUVM_IOCTL_GET_INFO)
    p.hdr.abi_version = lib.HUVM_ABI_VERSION + 7
    busy_node.call(lib.HUVM_IOCTL_GET_INFO, p)
    assert p.rmStatus == lib.HUVM_NV_OK


def test_wrong_abi_through_pyctl_is_abi_mismatch(busy_node: Any) -> None:
    p = guestlib.base_policy(busy_node)
    p.hdr.abi_version = (lib.HUVM_ABI_VERSION_MAJOR + 1) << 16
    with pytest.raises(huvm.AbiMismatch) as exc:
        busy_node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    assert exc.value.module_abi_version == lib.HUVM_ABI_VERSION


@pytest.mark.parametrize("flags", [1, 0x80000000])
def test_header_flags_are_refused(busy_node: Any, flags: int) -> None:
    p = guestlib.base_policy(busy_node)
    p.hdr.flags = flags
    assert refused(busy_node, lib.HUVM_IOCTL_SET_POLICY, p) == (
        0, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_HDR_FLAGS)


# ---- SET_POLICY values: out of range, contradictory, unknown GPU -------------------------------------

Mutation = Callable[[Any], None]


def node_field(name: str, value: int) -> Mutation:
    return lambda pol: setattr(pol, name, value)


def gpu_entry(index: int, name: str, value: Any) -> Mutation:
    def mutate(pol: Any) -> None:
        if name == "uuid":
            ffi.memmove(pol.gpus[index].uuid, value, 16)
        else:
            setattr(pol.gpus[index], name, value)
    return mutate


def both(*ms: Mutation) -> Mutation:
    def mutate(pol: Any) -> None:
        for m in ms:
            m(pol)
    return mutate


POLICY_CASES: list[tuple[str, Mutation, int, int]] = [
    # out of range
    ("preset", node_field("preset", lib.HUVM_PRESET_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PRESET),
    ("peer_select", node_field("peer_select", lib.HUVM_PEER_SELECT_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PEER_SELECT),
    ("nvlink_only", node_field("nvlink_only", 2), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_NVLINK_ONLY),
    ("usage_0", node_field("peer_usage_max_pct", 0), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PEER_USAGE_MAX_PCT),
    ("usage_101", node_field("peer_usage_max_pct", 101), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PEER_USAGE_MAX_PCT),
    ("preevict_batch_0", node_field("preevict_batch", 0), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PREEVICT_BATCH),
    ("fetch_mode", node_field("fetch_mode", lib.HUVM_FETCH_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_FETCH_MODE),
    ("prefetch_mode", node_field("prefetch_mode", lib.HUVM_PREFETCH_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PREFETCH_MODE),
    ("prefetch_chunks", node_field("prefetch_chunks", lib.HUVM_PREFETCH_MAX_CHUNKS + 1),
     lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PREFETCH_CHUNKS),
    ("stride_0", node_field("prefetch_stride", 0), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PREFETCH_STRIDE),
    ("stride_max", node_field("prefetch_stride", lib.HUVM_PREFETCH_MAX_STRIDE + 1), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PREFETCH_STRIDE),
    ("hysteresis", node_field("hysteresis_ms", lib.HUVM_HYSTERESIS_MAX_MS + 1), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_HYSTERESIS_MS),
    ("gpu_count", node_field("gpu_count", lib.HUVM_MAX_GPUS + 1), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_GPU_COUNT),
    ("role", gpu_entry(2, "role", lib.HUVM_ROLE_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     gpu_field(2, lib.HUVM_FIELD_GPU_ROLE)),
    ("gpu_flags", gpu_entry(1, "flags", lib.HUVM_GPU_POLICY_FLAGS_KNOWN + 1), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
     gpu_field(1, lib.HUVM_FIELD_GPU_FLAGS)),
    # contradictory settings
    ("prefetch_on_of_nothing", both(node_field("prefetch_mode", lib.HUVM_PREFETCH_LOCAL),
                                    node_field("prefetch_chunks", 0)),
     lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_PREFETCH_CHUNKS),
    ("prefetch_window_too_wide", both(node_field("prefetch_chunks", 64), node_field("prefetch_stride", 16)),
     lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_PREFETCH_STRIDE),
    ("preevict_reserve_above_capacity", node_field("preevict_chunks", guestlib.MEMORY // guestlib.CHUNK + 1),
     lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_PREEVICT_CHUNKS),
    ("lend_reserve_above_capacity", gpu_entry(3, "lend_reserve_bytes", guestlib.MEMORY + 1),
     lib.HUVM_NV_ERR_INVALID_ARGUMENT, gpu_field(3, lib.HUVM_FIELD_GPU_LEND_RESERVE)),
    ("duplicate_uuid", gpu_entry(1, "uuid", guestlib.uuid_of(0)), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
     gpu_field(1, lib.HUVM_FIELD_GPU_UUID)),
    ("zero_uuid", gpu_entry(0, "uuid", bytes(16)), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
     gpu_field(0, lib.HUVM_FIELD_GPU_UUID)),
    # unknown GPU
    ("unknown_uuid", gpu_entry(2, "uuid", bytes(range(1, 17))), lib.HUVM_NV_ERR_GPU_UUID_NOT_FOUND,
     gpu_field(2, lib.HUVM_FIELD_GPU_UUID)),
]


@pytest.mark.parametrize(("mutate", "status", "field"), [c[1:] for c in POLICY_CASES],
                         ids=[c[0] for c in POLICY_CASES])
def test_bad_policy_is_refused_and_changes_nothing(busy_node: Any, mutate: Mutation, status: int,
                                                   field: int) -> None:
    p = guestlib.base_policy(busy_node)
    p.policy.hysteresis_ms = 123            # a valid change that must not be applied either
    p.policy.gpus[0].role = lib.HUVM_ROLE_HARVESTER
    mutate(p.policy)
    assert refused(busy_node, lib.HUVM_IOCTL_SET_POLICY, p) == (0, status, field)


@pytest.mark.parametrize(("case", "exc_type", "field_name"), [
    ("usage_101", huvm.InvalidValue, "peer_usage_max_pct"),
    ("lend_reserve_above_capacity", huvm.InvalidValue, "gpus[3].lend_reserve_bytes"),
    ("unknown_uuid", huvm.UnknownGpu, "gpus[2].uuid"),
])
def test_bad_policy_through_pyctl_raises_typed_error(busy_node: Any, case: str, exc_type: type,
                                                     field_name: str) -> None:
    mutate = next(c[1] for c in POLICY_CASES if c[0] == case)
    p = guestlib.base_policy(busy_node)
    mutate(p.policy)
    before = guestlib.snapshot(busy_node)
    with pytest.raises(exc_type) as exc:
        busy_node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    assert exc.value.field == field_name
    assert guestlib.snapshot(busy_node) == before


# ---- other commands ------------------------------------------------------------------------------------

def test_reset_stats_bad_flags_and_pad(busy_node: Any) -> None:
    p = abi.new_params(lib.HUVM_IOCTL_RESET_STATS)
    p.reset_flags = 0x2
    assert refused(busy_node, lib.HUVM_IOCTL_RESET_STATS, p) == (
        0, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_RESET_FLAGS)
    p = abi.new_params(lib.HUVM_IOCTL_RESET_STATS)
    p.reset_flags, p.pad = lib.HUVM_RESET_COUNTERS, 1
    assert refused(busy_node, lib.HUVM_IOCTL_RESET_STATS, p) == (
        0, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_RESERVED)


@pytest.mark.parametrize(("event", "gpu", "count", "flags", "status", "field"), [
    (lib.HUVM_TEST_EVENT_COUNT, 0, 1, 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_EVENT),
    (lib.HUVM_TEST_EVENT_EVICT, guestlib.GPUS, 1, 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_GPU),
    (lib.HUVM_TEST_EVENT_EVICT, 0, 0, 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_COUNT),
    (lib.HUVM_TEST_EVENT_EVICT, 0, 4097, 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_COUNT),
    (lib.HUVM_TEST_EVENT_EVICT, 0, 1, 2, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_TEST_FLAGS),
    (lib.HUVM_TEST_EVENT_FAULT, 0, 1, 1, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_TEST_FLAGS),
])
def test_bad_test_event_is_refused(busy_node: Any, event: int, gpu: int, count: int, flags: int, status: int,
                                   field: int) -> None:
    p = abi.new_params(lib.HUVM_IOCTL_TEST_EVENT)
    p.event, p.gpu, p.count, p.flags = event, gpu, count, flags
    assert refused(busy_node, lib.HUVM_IOCTL_TEST_EVENT, p) == (0, status, field)


def _asymmetric(p: Any) -> None:
    p.links[0][1].mbyte_per_s = 1


def _link_beyond_count(p: Any) -> None:
    p.links[0][guestlib.GPUS].link_type = lib.HUVM_LINK_NVLINK_2


def _duplicate(p: Any) -> None:
    ffi.memmove(p.gpus[3].uuid, guestlib.uuid_of(2), 16)


@pytest.mark.parametrize(("mutate", "status", "field"), [
    (lambda p: setattr(p, "gpu_count", 0), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_GPU_COUNT),
    (lambda p: setattr(p, "gpu_count", lib.HUVM_MAX_GPUS + 1), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_GPU_COUNT),
    (lambda p: setattr(p, "pad", 1), lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_RESERVED),
    (_asymmetric, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_NODE_LINK),
    (_link_beyond_count, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_NODE_LINK),
    (_duplicate, lib.HUVM_NV_ERR_INVALID_ARGUMENT, gpu_field(3, lib.HUVM_FIELD_GPU_UUID)),
], ids=["no_gpus", "too_many_gpus", "pad", "asymmetric_link", "link_beyond_count", "duplicate_uuid"])
def test_bad_node_is_refused(busy_node: Any, mutate: Mutation, status: int, field: int) -> None:
    p = guestlib.node_params(memory=64 << 30)    # would change GET_INFO if applied
    mutate(p)
    assert refused(busy_node, lib.HUVM_IOCTL_TEST_SET_NODE, p) == (0, status, field)


def test_list_va_spaces_past_the_end(busy_node: Any) -> None:
    p = abi.new_params(lib.HUVM_IOCTL_LIST_VA_SPACES)
    p.start_index = 5
    assert refused(busy_node, lib.HUVM_IOCTL_LIST_VA_SPACES, p) == (
        0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_START_INDEX)
