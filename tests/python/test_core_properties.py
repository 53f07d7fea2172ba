"""Property tests of the portable policy core, through the cffi build (huvm._huvm_cffi).

Invariants (issue 3): never lend beyond a limit or below a reserve; a lender's own data never yields to a
guest; bytes are conserved in accounting; the `stock` preset never picks a peer; identical inputs give
identical decisions (and decisions write nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from huvm._huvm_cffi import ffi, lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHUNK = lib.HUVM_CHUNK_SIZE
GIB = 1 << 30
HOST = lib.HUVM_DEST_HOST
UNLIMITED = lib.HUVM_UNLIMITED
# Weighted towards configurations where a peer can be chosen, so both outcomes are exercised.
LINKS = [lib.HUVM_LINK_NVLINK_4, lib.HUVM_LINK_NVLINK_2, lib.HUVM_LINK_NVLINK_4, lib.HUVM_LINK_C2C, lib.HUVM_LINK_PCIE,
         lib.HUVM_LINK_NONE]
ROLES = [lib.HUVM_ROLE_BOTH, lib.HUVM_ROLE_BOTH, lib.HUVM_ROLE_HARVESTER, lib.HUVM_ROLE_LENDER, lib.HUVM_ROLE_NONE]
NVLINKISH = {lib.HUVM_LINK_NVLINK_1, lib.HUVM_LINK_NVLINK_2, lib.HUVM_LINK_NVLINK_3, lib.HUVM_LINK_NVLINK_4,
             lib.HUVM_LINK_C2C}

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Node:
    n: int
    mem: list[int]
    free: list[int]
    pcie: list[int]
    present: list[bool]
    links: dict[tuple[int, int], tuple[int, int]]
    roles: list[int]
    limits: list[int]
    reserves: list[int]
    peer_select: int
    usage_pct: int
    nvlink_only: int
    hysteresis_ms: int
    prefetch_mode: int
    prefetch_chunks: int
    last_evict_ns: list[int]
    lent: list[tuple[int, int, int]]  # (owner, holder, chunks) evicted before the decision


@st.composite
def nodes(draw: Any, min_gpus: int = 2, max_gpus: int = 8) -> Node:
    n = draw(st.integers(min_gpus, max_gpus))
    mem = [draw(st.integers(64, 40 * 512)) * CHUNK for _ in range(n)]  # 128 MiB .. 40 GiB
    free = [draw(st.one_of(st.integers(m // 2, m), st.integers(0, m))) for m in mem]
    links: dict[tuple[int, int], tuple[int, int]] = {}
    for a in range(n):
        for b in range(a + 1, n):
            t = draw(st.sampled_from(LINKS))
            links[(a, b)] = (t, 0 if t == lib.HUVM_LINK_NONE else draw(st.integers(1, 900_000)))
    return Node(
        n=n,
        mem=mem,
        free=free,
        pcie=[draw(st.integers(0, 64_000)) for _ in range(n)],
        present=[draw(st.sampled_from([True, True, True, False])) or i == 0 for i in range(n)],
        links=links,
        roles=[draw(st.sampled_from(ROLES)) for _ in range(n)],
        limits=[draw(st.one_of(st.just(UNLIMITED), st.integers(1, 64).map(lambda c: c * CHUNK)))
                for _ in range(n)],
        reserves=[draw(st.one_of(st.integers(0, m // 8), st.integers(0, m))) for m in mem],
        peer_select=draw(st.integers(0, lib.HUVM_PEER_SELECT_COUNT - 1)),
        usage_pct=draw(st.one_of(st.integers(80, 100), st.integers(1, 100))),
        nvlink_only=draw(st.integers(0, 1)),
        hysteresis_ms=draw(st.sampled_from([0, 0, 10, 50, 1000])),
        prefetch_mode=draw(st.integers(0, lib.HUVM_PREFETCH_COUNT - 1)),
        prefetch_chunks=draw(st.integers(1, 64)),
        last_evict_ns=[draw(st.sampled_from([0, 0, 0, 999_990_000_000, 999_000_000_000])) for _ in range(n)],
        lent=draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(1, 8)),
                           max_size=6)),
    )


def uuid(i: int) -> bytes:
    return bytes((0x40 + i * 7 + k) & 0xFF for k in range(16))


def build(node: Node, preset: int | None = None) -> tuple[Any, Any]:
    """A core for the node: the given preset, or a custom policy from the node's fields."""
    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_SIM, lib.HUVM_PRESET_HUVM)
    for i in range(node.n):
        info = ffi.new("huvm_gpu_info_t *")
        info.uuid = uuid(i)
        info.memory_bytes = node.mem[i]
        info.free_bytes = node.free[i]
        info.pcie_mbyte_per_s = node.pcie[i]
        info.flags = lib.HUVM_GPU_FLAG_PRESENT if node.present[i] else 0
        assert lib.huvm_core_set_gpu(core, i, info) == lib.HUVM_NV_OK
    for (a, b), (t, rate) in node.links.items():
        link = ffi.new("huvm_link_t *", {"link_type": t, "link_count": 0 if t == lib.HUVM_LINK_NONE else 1,
                                         "mbyte_per_s": rate})
        assert lib.huvm_core_set_link(core, a, b, link) == lib.HUVM_NV_OK
    policy = ffi.new("huvm_policy_t *")
    if preset is not None:
        assert lib.huvm_policy_preset(preset, core, policy) == lib.HUVM_NV_OK
    else:
        assert lib.huvm_policy_preset(lib.HUVM_PRESET_HUVM, core, policy) == lib.HUVM_NV_OK
        policy.peer_select = node.peer_select
        policy.peer_usage_max_pct = node.usage_pct
        policy.nvlink_only = node.nvlink_only
        policy.hysteresis_ms = node.hysteresis_ms
        policy.preevict_chunks = 0
        policy.prefetch_mode = node.prefetch_mode
        policy.prefetch_chunks = node.prefetch_chunks
        for i in range(node.n):
            policy.gpus[i].role = node.roles[i]
            policy.gpus[i].lend_limit_bytes = node.limits[i]
            policy.gpus[i].lend_reserve_bytes = node.reserves[i]
    field = ffi.new("uint32_t *")
    assert lib.huvm_policy_apply(core, policy, field) == lib.HUVM_NV_OK, field[0]
    for owner, holder, chunks in node.lent:
        if owner != holder:
            lib.huvm_account_evict(core, owner, holder, lib.HUVM_REASON_PEER, 0, chunks * CHUNK, 0)
    state = ffi.new("huvm_gpu_state_t[16]")
    for i in range(node.n):
        state[i].free_bytes = node.free[i]
        state[i].last_evict_ns = node.last_evict_ns[i]
    return core, state


def snapshot(core: Any) -> bytes:
    return bytes(ffi.buffer(core))


def link_ok(node: Node, a: int, b: int) -> bool:
    t = node.links[(min(a, b), max(a, b))][0]
    return t != lib.HUVM_LINK_NONE and (not node.nvlink_only or t in NVLINKISH)


def check_admissible(node: Node, core: Any, owner: int, holder: int, nbytes: int) -> None:
    """The holder a decision picked really may take nbytes of owner's data."""
    assert holder != owner and 0 <= holder < node.n
    assert node.present[holder]
    assert node.roles[holder] in (lib.HUVM_ROLE_LENDER, lib.HUVM_ROLE_BOTH)
    assert node.roles[owner] in (lib.HUVM_ROLE_HARVESTER, lib.HUVM_ROLE_BOTH)
    assert link_ok(node, owner, holder)
    free = min(node.free[holder], node.mem[holder])
    lent = core.counters[holder].lent_bytes
    assert lent + nbytes <= node.limits[holder], "beyond the lending limit"
    assert free - nbytes >= node.reserves[holder], "below the lending reserve"
    used_after = node.mem[holder] - free + nbytes
    assert used_after * 100 <= node.usage_pct * node.mem[holder], "above the usage cap"


requests = st.tuples(st.integers(0, 7), st.one_of(st.just(0xFFFF), st.integers(0, 0xFFFF)),
                     st.sampled_from([0, 0, 0, 4, 1, 2]),
                     st.sampled_from([0, 0, 0, 999_995_000_000, 999_000_000_000]))


def make_req(gpu: int, cand: int, flags: int, fetched: int) -> Any:
    return ffi.new("huvm_evict_request_t *", {"gpu": gpu, "candidates": cand, "flags": flags,
                                              "now_ns": 1_000_000_000_000, "chunk_fetched_ns": fetched})


@SETTINGS
@given(nodes(), requests)
def test_eviction_never_beyond_limit_or_below_reserve(node: Node, r: tuple[int, int, int, int]) -> None:
    core, state = build(node)
    gpu = r[0] % node.n
    d = lib.huvm_decide_evict(core, state, make_req(gpu, r[1], r[2], r[3]))
    assert d.reason < lib.HUVM_REASON_COUNT
    if d.dst == HOST:
        assert d.reason != lib.HUVM_REASON_PEER
        return
    assert d.reason == lib.HUVM_REASON_PEER
    assert r[1] & (1 << d.dst), "not a candidate"
    assert not r[2] & (lib.HUVM_EVICT_FLAG_PMA_CONTEXT | lib.HUVM_EVICT_FLAG_GUEST_CHUNK)
    check_admissible(node, core, gpu, d.dst, CHUNK)


@SETTINGS
@given(nodes(), st.integers(0, 7), st.integers(0, 0xFFFF))
def test_prefetch_peer_share_is_admissible(node: Node, gpu: int, cand: int) -> None:
    core, state = build(node)
    gpu %= node.n
    plan = ffi.new("huvm_prefetch_plan_t *")
    lib.huvm_decide_prefetch(core, state, gpu, cand, 1_000_000_000_000, plan)
    total = plan.local_chunks + plan.peer_chunks
    mode = node.prefetch_mode
    if mode == lib.HUVM_PREFETCH_OFF:
        assert total == 0
    elif mode == lib.HUVM_PREFETCH_LOCAL:
        assert (plan.local_chunks, plan.peer_chunks) == (node.prefetch_chunks, 0)
    elif mode == lib.HUVM_PREFETCH_MULTIPATH:
        assert total == node.prefetch_chunks
    else:
        assert plan.local_chunks == 0
    if plan.peer_chunks:
        assert cand & (1 << plan.peer)
        check_admissible(node, core, gpu, plan.peer, plan.peer_chunks * CHUNK)
    else:
        assert plan.peer == HOST


@SETTINGS
@given(nodes(min_gpus=2, max_gpus=6), st.lists(st.tuples(st.integers(0, 5), st.integers(1, 64)), max_size=8))
def test_synthetic_node_never_overcommits_lenders(node: Node, events: list[tuple[int, int]]) -> None:
    """End to end through dispatch: evictions with state updates keep every lender within its limit and
    above its reserve (for lenders that started above it)."""
    core, _ = build(node)
    caller = ffi.new("huvm_caller_t *", {"privileged": 1, "allow_test": 1, "now_ns": 1})
    start_free = [core.gpus[i].free_bytes for i in range(node.n)]
    start_lent = [core.counters[i].lent_bytes for i in range(node.n)]
    for gpu, count in events:
        gpu %= node.n
        if not node.present[gpu]:
            continue
        p = ffi.new("HUVM_TEST_EVENT_PARAMS *")
        p.hdr.abi_version = lib.HUVM_ABI_VERSION
        p.hdr.size = ffi.sizeof("HUVM_TEST_EVENT_PARAMS")
        p.event = lib.HUVM_TEST_EVENT_EVICT
        p.gpu = gpu
        p.count = count
        assert lib.huvm_dispatch(core, ffi.NULL, ffi.NULL, caller, lib.HUVM_IOCTL_TEST_EVENT, p,
                                 ffi.sizeof(p[0])) == lib.HUVM_NV_OK
        assert p.done == count
    for h in range(node.n):
        lent = core.counters[h].lent_bytes
        if lent > start_lent[h]:
            assert lent <= node.limits[h]
            # it only received while admission held; the free bytes it lost are what it lent
            assert core.gpus[h].free_bytes >= min(node.reserves[h], start_free[h])


@SETTINGS
@given(nodes(), st.integers(0, 7), st.integers(0, 200))
def test_giveback_own_data_never_yields_to_a_guest(node: Node, lender: int, need_chunks: int) -> None:
    core, state = build(node)
    lender %= node.n
    plan = ffi.new("huvm_giveback_plan_t *")
    lib.huvm_decide_giveback(core, state, lender, need_chunks * CHUNK, plan)
    held = [(core.pairs[o][lender].held_bytes + CHUNK - 1) // CHUNK if o != lender else 0
            for o in range(16)]
    assert plan.guest_chunks[lender] == 0
    for o in range(16):
        assert plan.guest_chunks[o] <= held[o]
    assert plan.total_guest_chunks == sum(plan.guest_chunks[o] for o in range(16))
    assert plan.total_guest_chunks + plan.own_chunks == need_chunks
    if plan.own_chunks > 0:
        assert plan.total_guest_chunks == sum(held), "own data evicted while guests remain"
    # most-held owners first: a skipped owner never holds more than one that was taken
    taken = [o for o in range(16) if plan.guest_chunks[o]]
    partial_or_skipped = [o for o in range(16) if plan.guest_chunks[o] < held[o]]
    for t in taken:
        for s in partial_or_skipped:
            if s != t:
                assert held[s] <= held[t]


ops = st.lists(
    st.tuples(st.sampled_from(["evict", "host", "fetch", "remote", "giveback", "prefetch", "reset"]),
              st.integers(0, 3), st.integers(0, 3), st.integers(0, 5 * CHUNK)),
    max_size=40)


@SETTINGS
@given(ops)
def test_accounting_conserves_bytes(seq: list[tuple[str, int, int, int]]) -> None:
    node = Node(4, [16 * GIB] * 4, [16 * GIB] * 4, [16000] * 4, [True] * 4,
                {(a, b): (lib.HUVM_LINK_NVLINK_4, 50000) for a in range(4) for b in range(a + 1, 4)},
                [3] * 4, [UNLIMITED] * 4, [0] * 4, 0, 100, 1, 0, 0, 1, [0] * 4, [])
    core, _ = build(node)
    model = {(o, h): 0 for o in range(4) for h in range(4)}
    for op, a, b, nbytes in seq:
        if op == "evict" and a != b:
            lib.huvm_account_evict(core, a, b, lib.HUVM_REASON_PEER, 0, nbytes, 0)
            model[(a, b)] += nbytes
        elif op == "host":
            lib.huvm_account_evict(core, a, HOST, lib.HUVM_REASON_PEER_FULL, 0, nbytes, 0)
        elif op == "fetch" and a != b:
            lib.huvm_account_fetch(core, a, b, 0, nbytes, 0)
            model[(a, b)] -= min(model[(a, b)], nbytes)
        elif op == "remote" and a != b:
            lib.huvm_account_fetch(core, a, b, 1, nbytes, 0)
        elif op == "giveback" and a != b:
            lib.huvm_account_giveback(core, b, a, nbytes, 0)
            model[(a, b)] -= min(model[(a, b)], nbytes)
        elif op == "prefetch":
            lib.huvm_account_prefetch(core, a, b, nbytes, 0)
            if a != b:
                model[(a, b)] += nbytes
        elif op == "reset":
            lib.huvm_account_reset(core, lib.HUVM_RESET_COUNTERS)
        for g in range(4):
            lent = sum(core.pairs[o][g].held_bytes for o in range(4))
            harvested = sum(core.pairs[g][h].held_bytes for h in range(4))
            assert core.counters[g].lent_bytes == lent
            assert core.counters[g].harvested_bytes == harvested
            assert core.counters[g].lent_peak_bytes >= core.counters[g].lent_bytes
        for (o, h), v in model.items():
            assert core.pairs[o][h].held_bytes == v


@SETTINGS
@given(nodes(), requests, st.integers(0, 7))
def test_stock_never_picks_a_peer(node: Node, r: tuple[int, int, int, int], other: int) -> None:
    core, state = build(node, preset=lib.HUVM_PRESET_STOCK)
    gpu = r[0] % node.n
    d = lib.huvm_decide_evict(core, state, make_req(gpu, r[1], r[2], r[3]))
    assert d.dst == HOST
    assert d.reason == lib.HUVM_REASON_TIER_OFF
    plan = ffi.new("huvm_prefetch_plan_t *")
    lib.huvm_decide_prefetch(core, state, gpu, 0xFFFF, 1, plan)
    assert plan.peer_chunks == 0 and plan.local_chunks == 0
    assert lib.huvm_decide_preevict(core, state, gpu) == 0
    assert lib.huvm_decide_fetch(core, gpu, other % node.n) == lib.HUVM_FETCH_MIGRATE
    for h in range(node.n):
        assert lib.huvm_admit_lend(core, state, gpu, h, CHUNK, 1) != lib.HUVM_REASON_PEER


@SETTINGS
@given(nodes(), requests, st.integers(0, 300))
def test_identical_inputs_identical_decisions(node: Node, r: tuple[int, int, int, int], need: int) -> None:
    core1, state1 = build(node)
    core2, state2 = build(node)
    assert snapshot(core1) == snapshot(core2)
    before = snapshot(core1)
    gpu = r[0] % node.n
    req = make_req(gpu, r[1], r[2], r[3])
    d1 = lib.huvm_decide_evict(core1, state1, req)
    d2 = lib.huvm_decide_evict(core2, state2, req)
    d3 = lib.huvm_decide_evict(core1, state1, req)
    assert (d1.dst, d1.reason) == (d2.dst, d2.reason) == (d3.dst, d3.reason)
    p1 = ffi.new("huvm_prefetch_plan_t *")
    p2 = ffi.new("huvm_prefetch_plan_t *")
    lib.huvm_decide_prefetch(core1, state1, gpu, r[1], 5, p1)
    lib.huvm_decide_prefetch(core2, state2, gpu, r[1], 5, p2)
    assert bytes(ffi.buffer(p1)) == bytes(ffi.buffer(p2))
    g1 = ffi.new("huvm_giveback_plan_t *")
    g2 = ffi.new("huvm_giveback_plan_t *")
    lib.huvm_decide_giveback(core1, state1, gpu, need * CHUNK, g1)
    lib.huvm_decide_giveback(core2, state2, gpu, need * CHUNK, g2)
    assert bytes(ffi.buffer(g1)) == bytes(ffi.buffer(g2))
    assert lib.huvm_decide_preevict(core1, state1, gpu) == lib.huvm_decide_preevict(core2, state2, gpu)
    assert snapshot(core1) == before, "a decision wrote to the core"
