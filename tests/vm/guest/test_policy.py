"""Policy get/set round-trips through the real ioctl path, raw and through pyctl's typed API."""

from __future__ import annotations

from typing import Any

import guestlib
import huvm
import pytest
from huvm import abi

lib = abi.lib
ffi = abi.ffi


def test_raw_round_trip_of_every_node_wide_field(node: Any) -> None:
    before = guestlib.get_policy(node)
    p = guestlib.base_policy(node)
    p.policy.peer_select = lib.HUVM_PEER_SELECT_ROUND_ROBIN
    p.policy.nvlink_only = 0
    p.policy.peer_usage_max_pct = 77
    p.policy.preevict_chunks = 12
    p.policy.preevict_batch = 3
    p.policy.fetch_mode = lib.HUVM_FETCH_REMOTE_MAP
    p.policy.prefetch_mode = lib.HUVM_PREFETCH_MULTIPATH
    p.policy.prefetch_chunks = 16
    p.policy.prefetch_stride = 2
    p.policy.hysteresis_ms = 250
    p.policy.gpus[1].role = lib.HUVM_ROLE_LENDER
    p.policy.gpus[1].lend_limit_bytes = 4 << 30
    p.policy.gpus[1].lend_reserve_bytes = 1 << 30
    node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    assert p.rmStatus == lib.HUVM_NV_OK
    assert p.policy.generation == before.generation + 1

    after = guestlib.get_policy(node)
    assert after.generation == before.generation + 1
    assert after.preset == lib.HUVM_PRESET_CUSTOM
    for name in ("peer_select", "nvlink_only", "peer_usage_max_pct", "preevict_chunks", "preevict_batch",
                 "fetch_mode", "prefetch_mode", "prefetch_chunks", "prefetch_stride", "hysteresis_ms"):
        assert getattr(after, name) == getattr(p.policy, name), name
    entry = next(after.gpus[i] for i in range(after.gpu_count)
                 if bytes(ffi.buffer(after.gpus[i].uuid, 16)) == guestlib.uuid_of(1))
    assert (entry.role, entry.lend_limit_bytes, entry.lend_reserve_bytes) == (
        lib.HUVM_ROLE_LENDER, 4 << 30, 1 << 30)


def test_unlisted_entries_stay(node: Any) -> None:
    p = guestlib.base_policy(node)
    p.policy.gpus[2].role = lib.HUVM_ROLE_HARVESTER
    node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    q = guestlib.base_policy(node)
    q.policy.gpu_count = 1              # only GPU 0 listed
    q.policy.gpus[0].role = lib.HUVM_ROLE_NONE
    node.call(lib.HUVM_IOCTL_SET_POLICY, q)
    after = guestlib.get_policy(node)
    roles = {bytes(ffi.buffer(after.gpus[i].uuid, 16)): after.gpus[i].role for i in range(after.gpu_count)}
    assert roles[guestlib.uuid_of(0)] == lib.HUVM_ROLE_NONE
    assert roles[guestlib.uuid_of(2)] == lib.HUVM_ROLE_HARVESTER


def test_conditional_set_with_current_generation_applies(node: Any) -> None:
    gen = guestlib.get_policy(node).generation
    p = guestlib.base_policy(node)
    p.policy.generation = gen
    p.policy.hysteresis_ms = 5
    node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    assert guestlib.get_policy(node).hysteresis_ms == 5
    assert guestlib.get_policy(node).generation == gen + 1


@pytest.mark.parametrize("preset", ["stock", "huvm-atc22", "huvm"])
def test_typed_preset_round_trip(node: Any, preset: str) -> None:
    before, after = node.apply_preset(preset)
    assert after.preset_name == preset
    assert after.generation == before.generation + 1
    assert node.get_policy() == after


def test_typed_settings_round_trip(node: Any) -> None:
    before, after = node.set(["prefetch_chunks=8", "hysteresis_ms=40", "gpu.3.role=lender"])
    again = node.get_policy()
    assert again == after
    assert again.prefetch_chunks == 8
    assert again.hysteresis_ms == 40
    g3 = again.gpu_by_uuid(abi.uuid_str(guestlib.uuid_of(3)))
    assert g3 is not None and g3.role == lib.HUVM_ROLE_LENDER


def test_stale_generation_is_a_conflict_and_changes_nothing(node: Any) -> None:
    gen = guestlib.get_policy(node).generation
    node.call(lib.HUVM_IOCTL_SET_POLICY, guestlib.base_policy(node))   # someone else changed it
    before = guestlib.snapshot(node)
    p = guestlib.base_policy(node)
    p.policy.generation = gen
    p.policy.hysteresis_ms = 999
    with pytest.raises(huvm.Conflict):
        node.call(lib.HUVM_IOCTL_SET_POLICY, p)
    assert p.rmStatus == lib.HUVM_NV_ERR_STATE_IN_USE
    assert p.error_field == lib.HUVM_FIELD_GENERATION
    assert guestlib.snapshot(node) == before


def test_reset_stats_zeroes_counters_and_keeps_gauges(busy_node: Any) -> None:
    node = busy_node
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    lent = [int(s.gpus[g].lent_bytes) for g in range(guestlib.GPUS)]
    assert guestlib.counter_sum(s, "evict_to_peer") > 0 and sum(lent) > 0
    node.reset_stats()
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    for name in ("evict_to_peer", "evict_to_host", "fetch_from_peer", "prefetch_local", "faults"):
        assert guestlib.counter_sum(s, name) == 0, name
    assert [int(s.gpus[g].lent_bytes) for g in range(guestlib.GPUS)] == lent
