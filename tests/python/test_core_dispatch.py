"""Bad input to the control dispatch, through the cffi build: every malformed request is refused with a
precise status (and field) and leaves the state unchanged (GET_POLICY and GET_STATS compared before and
after, and the whole core byte for byte)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from huvm._huvm_cffi import ffi, lib

CHUNK = lib.HUVM_CHUNK_SIZE
GIB = 1 << 30
N = 4


def gpu_field(index: int, field: int) -> int:
    return int(lib.HUVM_FIELD_GPU_BASE + lib.HUVM_FIELD_GPU_STRIDE * index + field)


def uuid(i: int) -> bytes:
    return bytes((0x10 * i + k + 1) & 0xFF for k in range(16))


def params(type_name: str) -> Any:
    p = ffi.new(f"{type_name} *")
    p.hdr.abi_version = lib.HUVM_ABI_VERSION
    p.hdr.size = ffi.sizeof(type_name)
    return p


def caller(privileged: bool = True, allow_test: bool = True) -> Any:
    return ffi.new("huvm_caller_t *", {"privileged": int(privileged), "allow_test": int(allow_test),
                                       "uid": 0 if privileged else 1000, "pid": 42, "now_ns": 7})


def dispatch(core: Any, cmd: int, p: Any, who: Any | None = None, size: int | None = None) -> int:
    return int(lib.huvm_dispatch(core, ffi.NULL, ffi.NULL, who or caller(), cmd, p,
                                 ffi.sizeof(p[0]) if size is None else size))


@pytest.fixture
def core() -> Iterator[Any]:
    """A synthetic 4-GPU node (16 GiB each, NVLink 3 everywhere) with some traffic on it."""
    c = ffi.new("huvm_core_t *")
    lib.huvm_core_init(c, lib.HUVM_BACKEND_CORE, lib.HUVM_PRESET_HUVM)
    node = params("HUVM_TEST_SET_NODE_PARAMS")
    node.gpu_count = N
    for i in range(N):
        node.gpus[i].uuid = uuid(i)
        node.gpus[i].memory_bytes = 16 * GIB
        node.gpus[i].free_bytes = 8 * GIB
        node.gpus[i].pcie_mbyte_per_s = 16000
        node.gpus[i].flags = lib.HUVM_GPU_FLAG_PRESENT
        for j in range(N):
            if i != j:
                node.links[i][j].link_type = lib.HUVM_LINK_NVLINK_3
                node.links[i][j].link_count = 2
                node.links[i][j].mbyte_per_s = 50000
    assert dispatch(c, lib.HUVM_IOCTL_TEST_SET_NODE, node) == lib.HUVM_NV_OK
    ev = params("HUVM_TEST_EVENT_PARAMS")
    ev.event, ev.gpu, ev.count = lib.HUVM_TEST_EVENT_EVICT, 0, 5
    assert dispatch(c, lib.HUVM_IOCTL_TEST_EVENT, ev) == lib.HUVM_NV_OK
    assert c.counters[0].evict_to_peer == 5
    yield c


def observe(core: Any) -> tuple[bytes, bytes, bytes]:
    """What a tool sees (GET_POLICY, GET_STATS) plus the whole core."""
    gp = params("HUVM_GET_POLICY_PARAMS")
    gs = params("HUVM_GET_STATS_PARAMS")
    assert dispatch(core, lib.HUVM_IOCTL_GET_POLICY, gp, caller(False, False)) == lib.HUVM_NV_OK
    assert dispatch(core, lib.HUVM_IOCTL_GET_STATS, gs, caller(False, False)) == lib.HUVM_NV_OK
    return bytes(ffi.buffer(gp)), bytes(ffi.buffer(gs)), bytes(ffi.buffer(core))


def refused(core: Any, cmd: int, p: Any, status: int, field: int | None, who: Any | None = None,
            size: int | None = None) -> None:
    before = observe(core)
    got = dispatch(core, cmd, p, who, size)
    assert got == status, f"status 0x{got:x}, expected 0x{status:x}"
    if size is None or size == ffi.sizeof(p[0]):
        assert p.rmStatus == status
        if field is not None:
            assert p.error_field == field
    assert p.hdr.module_abi_version == lib.HUVM_ABI_VERSION
    assert observe(core) == before, "state changed on refusal"


def set_policy(core: Any, edit: Callable[[Any], None]) -> Any:
    p = params("HUVM_SET_POLICY_PARAMS")
    p.policy = core.policy
    p.policy.generation = 0
    edit(p.policy)
    return p


# ---- header ----

def test_wrong_abi_major(core: Any) -> None:
    p = set_policy(core, lambda pol: setattr(pol, "hysteresis_ms", 1))
    p.hdr.abi_version = (lib.HUVM_ABI_VERSION_MAJOR + 1) << 16
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, lib.HUVM_NV_ERR_NOT_COMPATIBLE, lib.HUVM_FIELD_HDR_ABI_VERSION)


def test_wrong_size_in_header(core: Any) -> None:
    p = set_policy(core, lambda pol: setattr(pol, "hysteresis_ms", 1))
    p.hdr.size -= 8
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, lib.HUVM_NV_ERR_INVALID_PARAM_STRUCT, lib.HUVM_FIELD_HDR_SIZE)


def test_short_buffer(core: Any) -> None:
    p = set_policy(core, lambda pol: setattr(pol, "hysteresis_ms", 1))
    before_tail = (p.error_field, p.rmStatus)
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, lib.HUVM_NV_ERR_INVALID_PARAM_STRUCT, None, size=200)
    assert (p.error_field, p.rmStatus) == before_tail  # nothing written past the short buffer
    tiny = ffi.new("uint8_t[8]")
    assert lib.huvm_dispatch(core, ffi.NULL, ffi.NULL, caller(), lib.HUVM_IOCTL_GET_INFO, tiny, 8) == \
        lib.HUVM_NV_ERR_INVALID_PARAM_STRUCT


def test_header_flags(core: Any) -> None:
    p = params("HUVM_RESET_STATS_PARAMS")
    p.hdr.flags = 1
    p.reset_flags = lib.HUVM_RESET_COUNTERS
    refused(core, lib.HUVM_IOCTL_RESET_STATS, p, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_HDR_FLAGS)


def test_unknown_command(core: Any) -> None:
    p = params("HUVM_GET_INFO_PARAMS")
    before = observe(core)
    assert dispatch(core, 1799, p) == lib.HUVM_NV_ERR_INVALID_COMMAND
    assert observe(core) == before


# ---- permissions ----

def test_unprivileged_set_policy(core: Any) -> None:
    p = set_policy(core, lambda pol: setattr(pol, "peer_select", lib.HUVM_PEER_SELECT_ROUND_ROBIN))
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, lib.HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS, lib.HUVM_FIELD_NONE,
            who=caller(privileged=False))


def test_unprivileged_reset(core: Any) -> None:
    p = params("HUVM_RESET_STATS_PARAMS")
    p.reset_flags = lib.HUVM_RESET_COUNTERS
    refused(core, lib.HUVM_IOCTL_RESET_STATS, p, lib.HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS, lib.HUVM_FIELD_NONE,
            who=caller(privileged=False))


def test_test_commands_need_allow_test(core: Any) -> None:
    ev = params("HUVM_TEST_EVENT_PARAMS")
    ev.event, ev.gpu, ev.count = lib.HUVM_TEST_EVENT_EVICT, 1, 1
    refused(core, lib.HUVM_IOCTL_TEST_EVENT, ev, lib.HUVM_NV_ERR_NOT_SUPPORTED, lib.HUVM_FIELD_NONE,
            who=caller(privileged=True, allow_test=False))


def test_readers_need_no_privilege(core: Any) -> None:
    for cmd, t in ((lib.HUVM_IOCTL_GET_INFO, "HUVM_GET_INFO_PARAMS"),
                   (lib.HUVM_IOCTL_GET_POLICY, "HUVM_GET_POLICY_PARAMS"),
                   (lib.HUVM_IOCTL_GET_STATS, "HUVM_GET_STATS_PARAMS"),
                   (lib.HUVM_IOCTL_LIST_VA_SPACES, "HUVM_LIST_VA_SPACES_PARAMS")):
        p = params(t)
        assert dispatch(core, cmd, p, caller(False, False)) == lib.HUVM_NV_OK, t
        assert p.rmStatus == lib.HUVM_NV_OK


# ---- SET_POLICY values ----

NODE_WIDE = [
    ("preset", lib.HUVM_PRESET_COUNT, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PRESET),
    ("peer_select", lib.HUVM_PEER_SELECT_COUNT, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PEER_SELECT),
    ("nvlink_only", 2, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_NVLINK_ONLY),
    ("peer_usage_max_pct", 101, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PEER_USAGE_MAX_PCT),
    ("peer_usage_max_pct", 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PEER_USAGE_MAX_PCT),
    ("preevict_batch", 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PREEVICT_BATCH),
    ("fetch_mode", lib.HUVM_FETCH_COUNT, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_FETCH_MODE),
    ("prefetch_mode", lib.HUVM_PREFETCH_COUNT, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PREFETCH_MODE),
    ("prefetch_chunks", lib.HUVM_PREFETCH_MAX_CHUNKS + 1, lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_PREFETCH_CHUNKS),
    ("prefetch_stride", 0, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_PREFETCH_STRIDE),
    ("hysteresis_ms", lib.HUVM_HYSTERESIS_MAX_MS + 1, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_HYSTERESIS_MS),
    ("gpu_count", lib.HUVM_MAX_GPUS + 1, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_GPU_COUNT),
]


@pytest.mark.parametrize(("name", "value", "status", "field"), NODE_WIDE, ids=[f"{n}={v}" for n, v, _, _ in NODE_WIDE])
def test_out_of_range_names_the_field(core: Any, name: str, value: int, status: int, field: int) -> None:
    p = set_policy(core, lambda pol: setattr(pol, name, value))
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, status, field)


def test_unknown_uuid(core: Any) -> None:
    def edit(pol: Any) -> None:
        pol.gpus[2].uuid = bytes(range(100, 116))
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, edit), lib.HUVM_NV_ERR_GPU_UUID_NOT_FOUND,
            gpu_field(2, lib.HUVM_FIELD_GPU_UUID))


def test_duplicate_uuid(core: Any) -> None:
    def edit(pol: Any) -> None:
        pol.gpus[3].uuid = bytes(pol.gpus[1].uuid)
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, edit), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
            gpu_field(3, lib.HUVM_FIELD_GPU_UUID))


def test_bad_role_and_flags(core: Any) -> None:
    refused(core, lib.HUVM_IOCTL_SET_POLICY,
            set_policy(core, lambda pol: setattr(pol.gpus[1], "role", lib.HUVM_ROLE_COUNT)),
            lib.HUVM_NV_ERR_OUT_OF_RANGE, gpu_field(1, lib.HUVM_FIELD_GPU_ROLE))
    unknown = lib.HUVM_GPU_POLICY_FLAGS_KNOWN + 1    # the first bit past the known flags
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, lambda pol: setattr(pol.gpus[0], "flags", unknown)),
            lib.HUVM_NV_ERR_INVALID_ARGUMENT, gpu_field(0, lib.HUVM_FIELD_GPU_FLAGS))


def test_contradictory_reserve_above_capacity(core: Any) -> None:
    refused(core, lib.HUVM_IOCTL_SET_POLICY,
            set_policy(core, lambda pol: setattr(pol.gpus[2], "lend_reserve_bytes", 16 * GIB + CHUNK)),
            lib.HUVM_NV_ERR_INVALID_ARGUMENT, gpu_field(2, lib.HUVM_FIELD_GPU_LEND_RESERVE))


def test_contradictory_preevict_above_capacity(core: Any) -> None:
    refused(core, lib.HUVM_IOCTL_SET_POLICY,
            set_policy(core, lambda pol: setattr(pol, "preevict_chunks", 16 * GIB // CHUNK + 1)),
            lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_PREEVICT_CHUNKS)


def test_contradictory_prefetch(core: Any) -> None:
    def window(pol: Any) -> None:
        pol.prefetch_chunks, pol.prefetch_stride = 64, 16
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, window), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
            lib.HUVM_FIELD_PREFETCH_STRIDE)

    def nothing(pol: Any) -> None:
        pol.prefetch_mode, pol.prefetch_chunks = lib.HUVM_PREFETCH_MULTIPATH, 0
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, nothing), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
            lib.HUVM_FIELD_PREFETCH_CHUNKS)


def test_stale_generation(core: Any) -> None:
    p = set_policy(core, lambda pol: setattr(pol, "hysteresis_ms", 3))
    p.policy.generation = core.policy.generation - 1
    refused(core, lib.HUVM_IOCTL_SET_POLICY, p, lib.HUVM_NV_ERR_STATE_IN_USE, lib.HUVM_FIELD_GENERATION)


def test_one_bad_entry_rejects_everything(core: Any) -> None:
    def edit(pol: Any) -> None:
        pol.hysteresis_ms = 5            # valid
        pol.gpus[0].role = lib.HUVM_ROLE_LENDER  # valid
        pol.gpus[3].lend_reserve_bytes = 64 * GIB  # invalid
    refused(core, lib.HUVM_IOCTL_SET_POLICY, set_policy(core, edit), lib.HUVM_NV_ERR_INVALID_ARGUMENT,
            gpu_field(3, lib.HUVM_FIELD_GPU_LEND_RESERVE))


def test_valid_set_applies_and_bumps_generation(core: Any) -> None:
    gen = core.policy.generation
    p = set_policy(core, lambda pol: setattr(pol, "hysteresis_ms", 7))    # the huvm preset's is 5
    assert dispatch(core, lib.HUVM_IOCTL_SET_POLICY, p) == lib.HUVM_NV_OK
    assert p.policy.generation == gen + 1 == core.policy.generation
    assert core.policy.hysteresis_ms == 7
    assert core.policy.preset == lib.HUVM_PRESET_CUSTOM


# ---- other commands ----

def test_reset_bad_flags_and_pad(core: Any) -> None:
    p = params("HUVM_RESET_STATS_PARAMS")
    p.reset_flags = 0x8
    refused(core, lib.HUVM_IOCTL_RESET_STATS, p, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_RESET_FLAGS)
    p.reset_flags, p.pad = lib.HUVM_RESET_COUNTERS, 1
    refused(core, lib.HUVM_IOCTL_RESET_STATS, p, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_RESERVED)


def test_list_va_spaces_start_index(core: Any) -> None:
    p = params("HUVM_LIST_VA_SPACES_PARAMS")
    p.start_index = 5
    refused(core, lib.HUVM_IOCTL_LIST_VA_SPACES, p, lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_START_INDEX,
            who=caller(False, False))


@pytest.mark.parametrize(("edit", "status", "field"), [
    (lambda e: setattr(e, "event", lib.HUVM_TEST_EVENT_COUNT), lib.HUVM_NV_ERR_OUT_OF_RANGE,
     lib.HUVM_FIELD_TEST_EVENT),
    (lambda e: setattr(e, "gpu", N), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_GPU),
    (lambda e: setattr(e, "count", 0), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_COUNT),
    (lambda e: setattr(e, "count", 4097), lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_FIELD_TEST_COUNT),
    (lambda e: setattr(e, "flags", 2), lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_TEST_FLAGS),
], ids=["event", "gpu", "count0", "count-big", "flags"])
def test_test_event_bad_input(core: Any, edit: Callable[[Any], None], status: int, field: int) -> None:
    ev = params("HUVM_TEST_EVENT_PARAMS")
    ev.event, ev.gpu, ev.count = lib.HUVM_TEST_EVENT_EVICT, 1, 1
    edit(ev)
    refused(core, lib.HUVM_IOCTL_TEST_EVENT, ev, status, field)


def test_test_set_node_bad_input(core: Any) -> None:
    node = params("HUVM_TEST_SET_NODE_PARAMS")
    node.gpu_count = 2
    for i in range(2):
        node.gpus[i].uuid = uuid(i)
        node.gpus[i].memory_bytes = 16 * GIB
        node.gpus[i].flags = lib.HUVM_GPU_FLAG_PRESENT
    node.gpus[1].free_bytes = 17 * GIB  # more free than memory
    refused(core, lib.HUVM_IOCTL_TEST_SET_NODE, node, lib.HUVM_NV_ERR_OUT_OF_RANGE,
            gpu_field(1, lib.HUVM_FIELD_GPU_FREE))
    node.gpus[1].free_bytes = 0
    node.links[0][1].link_type = lib.HUVM_LINK_NVLINK_4  # one direction only
    node.links[0][1].mbyte_per_s = 1000
    refused(core, lib.HUVM_IOCTL_TEST_SET_NODE, node, lib.HUVM_NV_ERR_INVALID_ARGUMENT, lib.HUVM_FIELD_NODE_LINK)


def test_get_info_reports_the_node(core: Any) -> None:
    p = params("HUVM_GET_INFO_PARAMS")
    assert dispatch(core, lib.HUVM_IOCTL_GET_INFO, p, caller(False, False)) == lib.HUVM_NV_OK
    assert p.gpu_count == N and p.max_gpus == lib.HUVM_MAX_GPUS
    assert ffi.string(p.upstream_version) == b"535.261.03"
    assert bytes(p.gpus[2].uuid) == uuid(2)
    assert p.links[1][3].link_type == lib.HUVM_LINK_NVLINK_3
    assert p.backend == lib.HUVM_BACKEND_CORE


# ---- test commands on a live node (issue 12, defect 7) and audited privilege checks (defect 8) ----

def live_caller(privileged: bool = True, live: bool = True) -> Any:
    return ffi.new("huvm_caller_t *", {"privileged": int(privileged), "allow_test": 1, "live_gpus": int(live),
                                       "uid": 0 if privileged else 1000, "pid": 42, "now_ns": 7})


def test_test_commands_refused_on_a_live_node(core: Any) -> None:
    ev = params("HUVM_TEST_EVENT_PARAMS")
    ev.event, ev.gpu, ev.count = lib.HUVM_TEST_EVENT_EVICT, 1, 1
    refused(core, lib.HUVM_IOCTL_TEST_EVENT, ev, lib.HUVM_NV_ERR_STATE_IN_USE, lib.HUVM_FIELD_NONE,
            who=live_caller())
    node = params("HUVM_TEST_SET_NODE_PARAMS")
    node.gpu_count = 1
    node.gpus[0].memory_bytes = GIB
    node.gpus[0].flags = lib.HUVM_GPU_FLAG_PRESENT
    refused(core, lib.HUVM_IOCTL_TEST_SET_NODE, node, lib.HUVM_NV_ERR_STATE_IN_USE, lib.HUVM_FIELD_NONE,
            who=live_caller())


def test_test_commands_need_privilege(core: Any) -> None:
    ev = params("HUVM_TEST_EVENT_PARAMS")
    ev.event, ev.gpu, ev.count = lib.HUVM_TEST_EVENT_EVICT, 1, 1
    refused(core, lib.HUVM_IOCTL_TEST_EVENT, ev, lib.HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS, lib.HUVM_FIELD_NONE,
            who=live_caller(privileged=False, live=False))


def test_privileged_commands_are_exactly_the_writers() -> None:
    writers = {lib.HUVM_IOCTL_SET_POLICY, lib.HUVM_IOCTL_RESET_STATS, lib.HUVM_IOCTL_TEST_SET_NODE,
               lib.HUVM_IOCTL_TEST_EVENT, lib.HUVM_IOCTL_SET_GPU_RATES}
    readers = {lib.HUVM_IOCTL_GET_INFO, lib.HUVM_IOCTL_GET_POLICY, lib.HUVM_IOCTL_GET_STATS,
               lib.HUVM_IOCTL_LIST_VA_SPACES, lib.HUVM_IOCTL_GET_GPU_RATES}
    for cmd in writers:
        assert lib.huvm_cmd_privileged(cmd) == 1, hex(cmd)
    for cmd in readers:
        assert lib.huvm_cmd_privileged(cmd) == 0, hex(cmd)
    # taken shared by the kernel: only the readers whose dispatch writes nothing but params
    shared = readers - {lib.HUVM_IOCTL_LIST_VA_SPACES}
    for cmd in writers | readers:
        assert lib.huvm_cmd_reader(cmd) == (cmd in shared), hex(cmd)
