"""Fixtures of the guest tests (tests/vm/guest): they run only inside the qemu test bed (make vm-test)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

IN_GUEST = os.environ.get("HUVM_VM_GUEST") == "1"

if not IN_GUEST:
    # On the host these files are not collected: they need the test module, which only the qemu guest
    # loads (tests/vm/run-vm.sh). `make vm-test` runs them.
    collect_ignore_glob = ["test_*.py", "unprivileged/test_*.py"]


@pytest.fixture
def node() -> Iterator[Any]:
    """The test device as a huvm.Node, reset to a known state: the synthetic 4-GPU NVLink node, every
    GPU harvester and lender, the huvm preset's node-wide values, zero counters. Needs root (the policy)."""
    import guestlib
    from huvm import abi

    n = guestlib.open_node()
    try:
        guestlib.set_node(n)
        n.call(abi.lib.HUVM_IOCTL_SET_POLICY, guestlib.base_policy(n))
        n.reset_stats()
        yield n
    finally:
        n.close()


@pytest.fixture
def busy_node(node: Any) -> Any:
    """node after some traffic: evictions to peers and host, fetches, prefetches (counters and gauges > 0)."""
    import guestlib
    from huvm import abi

    lib = abi.lib
    guestlib.event(node, lib.HUVM_TEST_EVENT_EVICT, 0, 8, va=0x7F0000000000)
    guestlib.event(node, lib.HUVM_TEST_EVENT_EVICT, 1, 2, flags=1)
    guestlib.event(node, lib.HUVM_TEST_EVENT_FAULT, 0, 3)
    guestlib.event(node, lib.HUVM_TEST_EVENT_PREFETCH, 2, 4)
    return node
