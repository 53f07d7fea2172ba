"""Concurrent callers: writers (TEST_EVENT, SET_POLICY) and readers (GET_STATS, GET_POLICY) on separate
open files at once. The core lock serialises them (the guest kernel runs preempt=full, so ioctls interleave
even on one vCPU); afterwards every eviction is counted exactly once and no call failed."""

from __future__ import annotations

import threading
from typing import Any

import guestlib
from huvm import abi

lib = abi.lib
ROUNDS = 60
EVICTORS = 3


def test_concurrent_writers_and_readers(node: Any) -> None:
    errors: list[BaseException] = []
    done = [0] * EVICTORS

    def guarded(fn: Any) -> Any:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as exc:    # noqa: BLE001 - reported below
                errors.append(exc)
        return run

    @guarded
    def evictor(k: int) -> None:
        with guestlib.open_node() as n:
            for _ in range(ROUNDS):
                done[k] += int(guestlib.event(n, lib.HUVM_TEST_EVENT_EVICT, k, 2).done)

    @guarded
    def reader() -> None:
        with guestlib.open_node() as n:
            last = 0
            for _ in range(ROUNDS):
                s = n.call(lib.HUVM_IOCTL_GET_STATS)
                total = guestlib.counter_sum(s, "evict_to_peer") + guestlib.counter_sum(s, "evict_to_host")
                assert total >= last        # counters never go backwards
                last = total
                assert guestlib.get_policy(n).generation > 0

    @guarded
    def policy_writer() -> None:
        with guestlib.open_node() as n:
            for i in range(ROUNDS // 2):
                p = guestlib.base_policy(n)
                p.policy.hysteresis_ms = i
                n.call(lib.HUVM_IOCTL_SET_POLICY, p)

    threads = [threading.Thread(target=evictor, args=(k,)) for k in range(EVICTORS)]
    threads += [threading.Thread(target=reader), threading.Thread(target=policy_writer)]
    gen0 = int(guestlib.get_policy(node).generation)
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    for k in range(EVICTORS):
        assert done[k] == 2 * ROUNDS
        got = int(s.gpus[k].evict_to_peer) + int(s.gpus[k].evict_to_host)
        assert got == done[k], f"GPU {k}: counted {got}, evicted {done[k]}"
    assert int(guestlib.get_policy(node).generation) == gen0 + ROUNDS // 2
