"""Run as uid/gid 65534 with no capabilities (tests/vm/guest/run-guest.sh, setpriv): anyone may read
the module's info, policy and counters, but changing the policy or resetting the counters is refused with
NV_ERR_INSUFFICIENT_PERMISSIONS (pyctl: PermissionDenied) and changes nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import guestlib
import huvm
import pytest
from huvm import abi

lib = abi.lib


def cap_eff() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    raise AssertionError("no CapEff in /proc/self/status")


@pytest.fixture
def user_node() -> Iterator[Any]:
    n = guestlib.open_node()
    try:
        yield n
    finally:
        n.close()


@pytest.fixture
def busy_user_node(user_node: Any) -> Any:
    """Test commands need CAP_SYS_ADMIN: root built this node (guestlib.build_busy_node, run-guest.sh)."""
    return user_node


def test_runs_unprivileged() -> None:
    assert os.geteuid() == 65534 and os.getegid() == 65534
    assert os.getgroups() == []
    assert cap_eff() == 0


def test_test_commands_need_privilege(busy_user_node: Any) -> None:
    node = busy_user_node
    before = guestlib.snapshot(node)
    with pytest.raises(huvm.PermissionDenied):
        guestlib.set_node(node, gpu_count=2)
    with pytest.raises(huvm.PermissionDenied):
        guestlib.event(node, lib.HUVM_TEST_EVENT_EVICT, 0, 1)
    assert guestlib.snapshot(node) == before


def test_reads_are_allowed(busy_user_node: Any) -> None:
    node = busy_user_node
    info = node.info()
    assert len(info.gpus) == guestlib.GPUS
    assert node.get_policy().generation > 0
    assert node.stats().total("evict_to_peer") + node.stats().total("evict_to_host") == 6
    assert node.va_spaces() == []


def test_set_policy_is_refused(busy_user_node: Any) -> None:
    node = busy_user_node
    before = guestlib.snapshot(node)
    p = abi.new_params(lib.HUVM_IOCTL_SET_POLICY)
    current = guestlib.get_policy(node)       # keep the owner alive while its struct is copied
    p.policy = current[0]
    p.policy.generation = 0
    p.policy.hysteresis_ms = 7
    assert guestlib.raw_ioctl(lib.HUVM_IOCTL_SET_POLICY, p) == 0
    assert p.rmStatus == lib.HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS
    assert guestlib.snapshot(node) == before


def test_typed_set_is_permission_denied(busy_user_node: Any) -> None:
    node = busy_user_node
    before = guestlib.snapshot(node)
    with pytest.raises(huvm.PermissionDenied):
        node.set(["hysteresis_ms=9"])
    with pytest.raises(huvm.PermissionDenied):
        node.apply_preset("stock")
    assert guestlib.snapshot(node) == before


def test_reset_stats_is_refused(busy_user_node: Any) -> None:
    node = busy_user_node
    before = guestlib.snapshot(node)
    assert node.stats().total("faults") > 0
    with pytest.raises(huvm.PermissionDenied):
        node.reset_stats()
    assert guestlib.snapshot(node) == before
