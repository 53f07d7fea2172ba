"""Lend admission with moves in flight (issue 12, defect 11): evictors decide under a shared read lock and
account after the copy, so the core reserves the bytes on the holder atomically at decision time
(huvm_lend_reserve): a reservation counts as lent and not free for every later admission until it is
released, and concurrent movers never overrun the holder's lend limit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from huvm._huvm_cffi import ffi, lib

CHUNK = lib.HUVM_CHUNK_SIZE
GIB = 1 << 30
N = 4
OWNER, HOLDER = 0, 1


def _params(type_name: str) -> Any:
    p = ffi.new(f"{type_name} *")
    p.hdr.abi_version = lib.HUVM_ABI_VERSION
    p.hdr.size = ffi.sizeof(type_name)
    return p


def _dispatch(core: Any, cmd: int, p: Any) -> int:
    who = ffi.new("huvm_caller_t *", {"privileged": 1, "allow_test": 1, "uid": 0, "pid": 1, "now_ns": 1})
    return int(lib.huvm_dispatch(core, ffi.NULL, ffi.NULL, who, cmd, p, ffi.sizeof(p[0])))


def _node(limit_chunks: int) -> tuple[Any, Any]:
    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_CORE, lib.HUVM_PRESET_HUVM)
    node = _params("HUVM_TEST_SET_NODE_PARAMS")
    node.gpu_count = N
    for i in range(N):
        node.gpus[i].uuid = bytes((0x10 * i + k + 1) & 0xFF for k in range(16))
        node.gpus[i].memory_bytes = 16 * GIB
        node.gpus[i].free_bytes = 8 * GIB
        node.gpus[i].flags = lib.HUVM_GPU_FLAG_PRESENT
        for j in range(N):
            if i != j:
                node.links[i][j].link_type = lib.HUVM_LINK_NVLINK_3
                node.links[i][j].link_count = 2
                node.links[i][j].mbyte_per_s = 50000
    assert _dispatch(core, lib.HUVM_IOCTL_TEST_SET_NODE, node) == lib.HUVM_NV_OK
    sp = _params("HUVM_SET_POLICY_PARAMS")
    sp.policy = core.policy
    sp.policy.generation = 0
    sp.policy.hysteresis_ms = 0
    for k in range(sp.policy.gpu_count):
        if bytes(sp.policy.gpus[k].uuid) == bytes(node.gpus[HOLDER].uuid):
            sp.policy.gpus[k].role = lib.HUVM_ROLE_LENDER
            sp.policy.gpus[k].lend_limit_bytes = limit_chunks * CHUNK
            sp.policy.gpus[k].lend_reserve_bytes = 0
    assert _dispatch(core, lib.HUVM_IOCTL_SET_POLICY, sp) == lib.HUVM_NV_OK, hex(sp.rmStatus)
    state = ffi.new("huvm_gpu_state_t[]", N)
    for i in range(N):
        state[i].free_bytes = 8 * GIB
    return core, state


@pytest.fixture
def node() -> Iterator[tuple[Any, Any]]:
    yield _node(3)


def test_reservations_count_as_lent(node: tuple[Any, Any]) -> None:
    core, state = node
    for _ in range(3):
        assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER
    assert core.counters[HOLDER].lent_bytes == 0          # nothing accounted yet: all in flight
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER_FULL
    # every other admission sees the bytes in flight too (the eviction decision, the prefetch plan)
    assert lib.huvm_admit_lend(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER_FULL
    lib.huvm_lend_unreserve(core, HOLDER, CHUNK)          # a move failed: its bytes are free again
    assert lib.huvm_admit_lend(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER
    # moves accounted, then released: lent holds them, nothing in flight, the limit still holds
    for _ in range(3):
        lib.huvm_account_evict(core, OWNER, HOLDER, lib.HUVM_REASON_PEER, 0, CHUNK, 0)
        lib.huvm_lend_unreserve(core, HOLDER, CHUNK)
    assert core.counters[HOLDER].lent_bytes == 3 * CHUNK
    assert core.lend_inflight[HOLDER] == 0
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER_FULL


def test_reservations_take_free_memory_and_reserve() -> None:
    core, state = _node(1 << 20)
    core.policy.peer_usage_max_pct = 100
    state[HOLDER].free_bytes = 2 * CHUNK
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER
    # PMA still says 2 chunks free (the copies have not allocated yet): the reservations already took them
    assert lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) == lib.HUVM_REASON_PEER_FULL


def test_concurrent_movers_never_overrun_the_limit() -> None:
    limit = 64
    core, state = _node(limit)
    admitted = [0] * 4
    peak = [0]
    lock = threading.Lock()

    def mover(k: int) -> None:
        for _ in range(3000):
            if lib.huvm_lend_reserve(core, state, OWNER, HOLDER, CHUNK, 1) != lib.HUVM_REASON_PEER:
                continue
            lib.huvm_account_evict(core, OWNER, HOLDER, lib.HUVM_REASON_PEER, 0, CHUNK, 0)
            lent = int(core.counters[HOLDER].lent_bytes)
            with lock:
                peak[0] = max(peak[0], lent)
            lib.huvm_lend_unreserve(core, HOLDER, CHUNK)
            admitted[k] += 1

    threads = [threading.Thread(target=mover, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == limit, f"admitted {admitted} for a limit of {limit} chunks"
    assert peak[0] <= limit * CHUNK
    assert core.counters[HOLDER].lent_bytes == limit * CHUNK
    assert core.lend_inflight[HOLDER] == 0
