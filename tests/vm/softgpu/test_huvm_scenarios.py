"""huvm's peer tier on the emulated node (issue 12): scenarios on the PATCHED nvidia-uvm only.

Each scenario sets a policy through the huvm ioctls on /dev/nvidia-uvm (pyctl: ``huvm.open(backend="kernel")``),
drives UVM with its own ioctls (UVM_MIGRATE, UVM_TEST_EVICT_CHUNK), and checks that UVM's residency
(UVM_TEST_VA_RESIDENCY_INFO), huvm's counters (GET_STATS, LIST_VA_SPACES) and the data (CPU reads, byte for
byte) agree, and that the kernel logged no UVM assert or kernel report meanwhile (/dev/kmsg). The preset is
put back to ``stock`` after every scenario, passed or failed, so later tests see stock behaviour.

Scenarios (``scenario <name>: passed|failed`` at the end of the session):

- ``evict-to-peer``: the ``huvm`` preset, a harvester's (GPU0) working set 1.5x its PMA region brought onto it
  in pieces, lenders (GPU1..3) idle; then UVM_TEST_EVICT_CHUNK of some blocks still on GPU0 (NVIDIA's test
  path: the eviction runs with no VA space lock held). Evictions land on the peers, none on the host.
- ``giveback``: the evict-to-peer setup, then the lender (GPU1) takes two blocks of its own data; then GPU1's
  framebuffer is taken as another process's cudaMalloc would (softgpu FOREIGN_ALLOC: PMA without
  DONT_EVICT, so RM calls UVM's PMA eviction callback): exactly what GPU1 can give without its own data.
  The guest chunks leave GPU1 for the host (give-back), GPU1's own data stays, the give-back counters and
  gauges equal the residency, no byte is lost.
- ``stock-equals-upstream``: the ``stock`` preset on the patched module, the same 1.5x working set: UVM
  evicts to the host only, no peer counter moves, data intact.
- ``stock-fault-path``: the ``stock`` preset, GPU0's SM writes fault on fresh managed pages: the fault batches
  are counted and the prefetch decision (``huvm_decide_prefetch``, counted by a kprobe) is never reached, so
  nothing is gathered across GPUs; the same faults under ``huvm`` (prefetch on) do reach it (the probe works).
- ``readers-shared``: a loop of GET_INFO, GET_STATS and GET_POLICY (the commands any user may call); a kprobe on
  GET_INFO's free-memory walk (``uvm_pmm_gpu_free_user_root_bytes``: UVM's free root chunks) reads the huvm
  lock's word (``g_uvm_huvm.lock``, a qrwlock): it is held shared (readers counted, no writer), never
  exclusively, so such a loop cannot stall the eviction and fault paths (readers of the same lock).
- ``stale-tlb``: evict-to-peer again with GPU0's TLB invalidates dropped (the software GPU's
  ``tlb_drop_invalidates`` knob): it must fail (GPU0 reads evicted blocks through stale translations).
- ``lend-traffic``: the evict-to-peer workload with one lender whose guest-traffic budget is the smallest the
  ABI takes: it takes a chunk per 20 ms window at most, the rest goes to host (reason lender_busy).
- ``rates-clamp``: SET_GPU_RATES (``huvmctl rates set``) gives a lender an HBM rate; the lender bound T then
  clamps its 50 GB/s guest-traffic budget to the smallest one: the lend-traffic behaviour without that budget set.
- ``fetch-back``: harvested data comes back to GPU0, 64 KiB of a block (partial: the peer keeps the chunk) and a
  whole block (the chunk is released), then a block from host: every copy is one ``huvm:huvm_fetch`` event
  whose bytes equal the pages UVM moved and the counters; ftrace and bcc agree; events carry UVM's GPU ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, Self

import pytest
import sglib

MIB = sglib.MIB
CHUNK = sglib.CHUNK

# Collected only on the patched variants (conftest.py's collect_ignore).


# ---- fixtures ------------------------------------------------------------------------------------------------

@pytest.fixture
def huvm_node(session: sglib.Session) -> Iterator[Any]:
    """The patched module's huvm control surface; the preset goes back to stock afterwards (always)."""
    import huvm

    node = huvm.open(backend="kernel", device="/dev/nvidia-uvm")
    try:
        yield node
    finally:
        try:
            node.apply_preset("stock")
            assert node.get_policy().preset_name == "stock", "the preset did not go back to stock"
        finally:
            node.close()


def _slots(node: Any, s: sglib.Session) -> dict[int, int]:
    """softgpu GPU index -> huvm slot (GET_INFO), by UUID."""
    by_uuid = {g.uuid.lower(): g.index for g in node.info().gpus}
    out = {}
    for g in s.gpus:
        assert g.uuid_str.lower() in by_uuid, f"{g.name} ({g.uuid_str}) is not registered with huvm: {by_uuid}"
        out[g.index] = by_uuid[g.uuid_str.lower()]
    return out


def _settled_stats(node: Any, owner: int, seconds: float = 30.0, also: tuple[int, ...] = ()) -> Any:
    """GET_STATS once the owner's eviction counters (and the give-back counters of the slots in ``also``)
    have stopped moving for a second (pre-eviction runs in its own worker after an evicting allocation)."""
    def key(st: Any) -> tuple[int, ...]:
        g = st.gpus[owner]
        return (g.scalar("evict_to_peer"), g.scalar("evict_to_host"), g.scalar("harvested_bytes"),
                *(st.gpus[a].scalar(k) for a in also for k in ("giveback", "lent_bytes", "evict_to_host")))

    return _settled(node, key, seconds)


def _settled(node: Any, key: Any, seconds: float) -> Any:
    """GET_STATS once key(stats) has stopped changing for a second (or after seconds)."""
    last = node.stats()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        cur = node.stats()
        if key(cur) == key(last):
            return cur
        last = cur
    return last


# ---- scenario reporting --------------------------------------------------------------------------------------

def _scenario(name: str) -> pytest.MarkDecorator:
    return pytest.mark.scenario(name)


# ---- evict-to-peer ---------------------------------------------------------------------------------------------

@_scenario("evict-to-peer")
def test_evict_to_peer(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    s, node = session, huvm_node
    g0 = s.gpus[0]
    lenders = s.gpus[1:]
    assert lenders, "evict-to-peer needs at least 2 GPUs"
    slot = _slots(node, s)
    owner = slot[g0.index]

    before_policy, policy = node.apply_preset("huvm")
    print(f"policy: {before_policy.preset_name} -> {policy.preset_name}: preevict_chunks={policy.preevict_chunks} "
          f"preevict_batch={policy.preevict_batch} prefetch_mode={policy.prefetch_mode} "
          f"peer_usage_max_pct={policy.peer_usage_max_pct} roles="
          + ",".join(f"{g.role_name}" for g in policy.gpus))
    assert policy.preset_name == "huvm"

    st0 = node.stats()
    vas_before = {v.id: v.counters for v in node.va_spaces() if v.pid == os.getpid()}
    seed = 0xE7_1CE
    r, size, blocks = _oversubscribe(s, managed, g0, seed)

    # NVIDIA's test path: evict blocks still on GPU0 with no VA space lock held (uvm_test_evict_chunk).
    test_evicted = 0
    for off in range(size - 4 * CHUNK, size, CHUNK):
        if s.uvm.va_residency_info(r.base + off).resident_on == (g0.uuid,):
            res = s.uvm.evict_chunk(g0, r.base + off)
            test_evicted += int(res.evicted)

    st1 = _settled_stats(node, owner)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    st2 = node.stats()
    d = st2.delta(st0)
    g = d.gpus[owner]
    on_peers = {ln.index: counts.get(f"GPU{ln.index}", 0) for ln in lenders}
    pair_evicts = {ln.index: st2.pair(owner, slot[ln.index])["evict_chunks"]
                   - st0.pair(owner, slot[ln.index])["evict_chunks"] for ln in lenders}
    pair_held = {ln.index: st2.pair(owner, slot[ln.index])["held_bytes"] for ln in lenders}
    print(f"evict-to-peer: {blocks} blocks of {g0.name} ({size >> 20} MiB, PMA {g0.pma_bytes >> 20} MiB): "
          f"residency {counts}; UVM_TEST_EVICT_CHUNK evicted {test_evicted}")
    print(f"evict-to-peer: counters of {g0.name}: evict_to_peer +{g['evict_to_peer']} "
          f"(preevict +{g['preevict_to_peer']}), evict_to_host +{g['evict_to_host']} "
          f"host_reason +{g['host_reason']}, harvested_bytes {g['harvested_bytes'] >> 20} MiB; "
          f"pairs evict {pair_evicts} held MiB { {k: v >> 20 for k, v in pair_held.items()} }")

    sglib.perf("evict_to_peer_blocks_on_peers", sum(on_peers.values()), "blocks", per_peer=on_peers,
               on_gpu0=counts.get(f"GPU{g0.index}", 0), on_cpu=counts.get("cpu", 0), blocks=blocks)
    sglib.perf("evict_to_peer_counted", g["evict_to_peer"], "chunks", preevict=g["preevict_to_peer"],
               to_host=g["evict_to_host"], test_evict_chunk=test_evicted)

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports during the evictions, first: " \
        + " | ".join(bad_log[:6])
    assert st1.gpus[owner].scalar("evict_to_peer") == st2.gpus[owner].scalar("evict_to_peer"), \
        "evictions still going on after the counters settled"
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert counts.get("cpu", 0) == 0, f"{counts.get('cpu', 0)} blocks were evicted to the host: {counts}"
    assert sum(on_peers.values()) > 0, f"no block landed on a peer: {counts}"
    assert counts.get(f"GPU{g0.index}", 0) > 0, f"nothing stayed on {g0.name}: {counts}"
    assert test_evicted > 0, "UVM_TEST_EVICT_CHUNK evicted nothing"

    # huvm's counters agree with UVM's residency: every block on a peer was evicted there once, none to host
    assert g["evict_to_host"] == 0 and g.scalar("host_reason") == 0, \
        f"evictions to host counted: {g['evict_to_host']}, reasons {g['host_reason']}"
    assert g["evict_to_peer"] == sum(on_peers.values()), \
        f"evict_to_peer +{g['evict_to_peer']} but {sum(on_peers.values())} blocks on peers ({on_peers})"
    assert pair_evicts == on_peers, f"per-peer evictions {pair_evicts} != residency {on_peers}"
    assert g["harvested_bytes"] == sum(on_peers.values()) * CHUNK, \
        f"harvested_bytes {g['harvested_bytes']} != {sum(on_peers.values())} chunks on peers"
    assert pair_held == {k: v * CHUNK for k, v in on_peers.items()}, f"held_bytes {pair_held} != {on_peers}"
    # the VA space's own counters (LIST_VA_SPACES): this process has other VA spaces (session fixtures), only
    # the scenario's moved
    moved = {v.id: v.counters for v in node.va_spaces()
             if v.pid == os.getpid() and v.counters != vas_before.get(v.id)}
    print(f"evict-to-peer: VA spaces whose counters moved: {moved}")
    assert len(moved) == 1, f"LIST_VA_SPACES: {len(moved)} VA spaces of pid {os.getpid()} moved: {moved}"
    ((vid, vas1),) = moved.items()
    vas0 = vas_before.get(vid, {k: 0 for k in vas1})
    assert vas1["evict_to_peer"] - vas0["evict_to_peer"] == sum(on_peers.values())
    assert vas1["evict_to_host"] == vas0["evict_to_host"]
    assert vas1["harvested_bytes"] == vas0["harvested_bytes"] + sum(on_peers.values()) * CHUNK

    # data byte-exact, written by GPU0's SMs before the evictions: GPU0 reads four blocks held by peers (faults:
    # fetched back, or mapped remotely), then the CPU reads everything (from the peers and GPU0)
    names = {ln.uuid: ln for ln in lenders}
    held_offs = [off for off in range(0, size, CHUNK)
                 if len(where := s.uvm.va_residency_info(r.base + off).resident_on) == 1 and where[0] in names][:4]
    assert held_offs, f"no block on a peer to read back: {counts}"
    for off in held_offs:
        n_bad, first = sglib.gpu_mismatches(s, g0.index, r, seed, off, CHUNK)
        assert n_bad == 0, f"GPU0 reads {n_bad} words that differ in the block at +{off >> 20} MiB it fetched " \
            f"back from a peer, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after eviction to peers, first at 0x{first:x}"
    counts_after, _ = sglib.blocks_by_place(s, r.base, size)
    st3 = _settled_stats(node, owner)
    giveback = {ln.index: st3.pair(owner, slot[ln.index])["giveback_chunks"]
                - st0.pair(owner, slot[ln.index])["giveback_chunks"] for ln in lenders}
    print(f"evict-to-peer: after CPU read-back residency {counts_after}; harvested_bytes "
          f"{st3.gpus[owner].scalar('harvested_bytes') >> 20} MiB, giveback {giveback}")
    assert counts_after == {"cpu": blocks}, f"after CPU reads: {counts_after}"
    assert st3.gpus[owner].scalar("harvested_bytes") == 0, "harvested gauge not back to 0 after the data left"
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])


# ---- stale-tlb: a missing TLB invalidate fails the scenario -----------------------------------------------------

@_scenario("stale-tlb")
def test_missing_tlb_invalidate_fails_evict_to_peer(session: sglib.Session, managed: Any, huvm_node: Any,
                                                    kmsg: sglib.Kmsg) -> None:
    """The software GPU caches translations until UVM invalidates them (test_tlb_engines.py). With the
    ``tlb_drop_invalidates`` knob on GPU0 its invalidates keep the SM's entries, as if UVM had left them out:
    evict-to-peer (GPU-written data evicted to the peers, then read back by GPU0's SMs, which must fault and
    fetch it back) must FAIL, through a stale translation (GPU0 reads the framebuffer page its block had before
    the eviction, which now holds another block: wrong data, and no fault). evict-to-peer itself, run without
    the knob in the same session, passes."""
    s = session
    g0 = s.gpus[0]
    c0 = s.sg.counters()
    s.sg.set_knob("tlb_drop_invalidates", g0, 1)
    try:
        with pytest.raises(AssertionError) as failure:
            test_evict_to_peer(s, managed, huvm_node, kmsg)
    finally:
        # off again: the software GPU drops every entry the knob kept
        s.sg.set_knob("tlb_drop_invalidates", g0, 0)
    d = s.sg.counters().minus(c0).gpus[0]
    message = str(failure.value).splitlines()[0] if str(failure.value) else repr(failure.value)
    print(f"stale-tlb: evict-to-peer with GPU0's TLB invalidates dropped failed as it must: {message}")
    print(f"stale-tlb: GPU0 TLB: entries kept by the knob +{d['tlb_kept']}, dropped +{d['tlb_dropped']}, "
          f"hits +{d['tlb_hits']}, misses +{d['tlb_misses']}")
    sglib.perf("stale_tlb_kept_entries", d["tlb_kept"], "entries", failure=message[:200])
    assert d["tlb_kept"] > 0, "the knob kept no TLB entry: no invalidate of GPU0's user VA space reached it"
    assert "kernel log" not in message, f"evict-to-peer failed on kernel log lines, not on stale data: {message}"
    bad = sglib.bad_lines(kmsg.read())
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports, first: " + " | ".join(bad[:6])


# ---- lend-traffic -----------------------------------------------------------------------------------------------

@_scenario("lend-traffic")
def test_lend_traffic_budget(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """A lender's guest-traffic budget on the patched module: the huvm preset with GPU1 the only lender and its
    budget the smallest the ABI takes (105 MB/s: one 2 MiB chunk per 20 ms window), then the evict-to-peer
    workload. GPU1 takes guests' chunks at most one per window: consecutive evictions onto it are a window or
    more apart (the huvm_evict events' time stamps), the ones in between go to the host with reason
    lender_busy although GPU1 had room, and counters, residency and data agree. Without a budget the same
    workload sends nothing to the host (test_evict_to_peer)."""
    from huvm import abi

    lib = abi.lib
    s, node = session, huvm_node
    assert len(s.gpus) >= 2, "lend-traffic needs at least 2 GPUs"
    g0, lender = s.gpus[0], s.gpus[1]
    slot = _slots(node, s)
    owner, holder = slot[g0.index], slot[lender.index]
    budget = int(lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S)
    window_ns = int(lib.HUVM_LEND_TRAFFIC_WINDOW_MS) * 1_000_000

    node.apply_preset("huvm")
    # The budget as an operator sets it: huvmctl policy lender-budget on the module, for a 2 % target of a
    # lender whose HBM moves 5 GB/s (1.96 % of it is under the smallest budget, which the command takes).
    cli = subprocess.run([sys.executable, "-m", "huvm", "--backend", "kernel", "policy", "lender-budget",
                          "--device", "/dev/nvidia-uvm", str(holder), "--max-slowdown", "2%", "--hbm", "5GB/s", "--json"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert cli.returncode == 0, f"huvmctl policy lender-budget: rc {cli.returncode}: {cli.stderr.strip()}"
    doc = json.loads(cli.stdout)
    assert doc["applied"] and [(b["gpu"], b["lend_traffic_mbyte_per_s"]) for b in doc["budgets"]] == [
        (holder, budget)], doc
    _, policy = node.set([f"gpu.{slot[o.index]}.role=harvester" for o in s.gpus[2:]])
    entry = policy.gpu_by_uuid(lender.uuid_str)
    assert entry is not None and entry.lend_traffic_mbyte_per_s == budget, entry
    print(f"lend-traffic: policy {policy.preset_name}, {lender.name} lends at most {budget} MB/s of guests' "
          f"traffic; roles " + ",".join(g.role_name for g in policy.gpus))

    seed = 0x1E_7D
    st0 = node.stats()
    tools = _EvictionEvents(s)
    try:
        with sglib.TraceRecorder() as rec:
            r, size, blocks = _oversubscribe(s, managed, g0, seed)
            _settled_stats(node, owner)
            events = [e for e in rec.events() if e.name in ("evict", "preevict") and e.gpu == owner]
            lost = rec.lost()
        tools.read()
    finally:
        tools.close()
    st1 = node.stats()
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    d = st1.delta(st0)
    g = d.gpus[owner]
    busy = g["host_reason"][lib.HUVM_REASON_LENDER_BUSY]
    on_lender = counts.get(f"GPU{lender.index}", 0)
    onto = sorted(e.ts_ns for e in events if e.peer == holder)
    gaps = [b - a for a, b in zip(onto, onto[1:])]
    print(f"lend-traffic: {blocks} blocks of {g0.name}: residency {counts}; evict_to_peer +{g['evict_to_peer']}, "
          f"evict_to_host +{g['evict_to_host']} (lender_busy {busy}, reasons {g['host_reason']}); events "
          f"{len(events)} ({len(onto)} onto {lender.name}), smallest gap {min(gaps, default=0) / 1e6:.1f} ms")
    sglib.perf("lend_traffic_lender_busy", busy, "chunks", to_peer=g["evict_to_peer"], to_host=g["evict_to_host"])

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert lost == 0, f"the trace buffer dropped {lost} events"
    # the budget turned evictions away that GPU1 had room for, and let others through
    assert busy > 0, f"no eviction was refused by the budget: reasons {g['host_reason']}"
    assert g["evict_to_peer"] > 0 and on_lender == g["evict_to_peer"], (counts, g["evict_to_peer"])
    assert g["host_reason"][lib.HUVM_REASON_PEER_FULL] == 0, f"GPU1 was full: {g['host_reason']}"
    assert counts.get("cpu", 0) == g["evict_to_host"], f"host blocks {counts.get('cpu', 0)} != {g['evict_to_host']}"
    assert len(onto) == g["evict_to_peer"], f"{len(onto)} evict events onto GPU1, counters {g['evict_to_peer']}"
    # the rate: after a chunk the lender takes the next one only once the window holding it has passed (the
    # sliding window keeps all but 1/1024 of the last window's traffic; the stamps are per-CPU clocks)
    assert all(gap >= window_ns * 9 // 10 for gap in gaps), f"chunks onto GPU1 {[x / 1e6 for x in gaps]} ms apart"
    # UVM's tools event "Eviction" (what CUPTI sees): one per chunk, GPU0 -> GPU1 for the blocks on GPU1, GPU0 ->
    # CPU for those on the host (each block moved once: nothing came back before the census)
    where = {off: s.uvm.va_residency_info(r.base + off) for off in range(0, size, CHUNK)}
    _check_tools_evictions(tools, g0.index, lender.index, r, size,
                           [o for o, w in where.items() if w.resident_on == (lender.uuid,)], "to the peer")
    _check_tools_evictions(tools, g0.index, None, r, size, [o for o, w in where.items() if w.on_cpu],
                           "to the host")
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"


@_scenario("rates-clamp")
def test_rates_clamp_budget(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """SET_GPU_RATES on the patched module (issue 28): the lender bound T clamps a budget once the admin has set
    the lender's HBM rate. The huvm preset (T = 2 %) with GPU1 the only lender and a budget of 50 GB/s (about
    500 chunks per 20 ms window: never reached by this workload); then ``huvmctl rates set`` (as root) gives GPU1
    an HBM rate of 5 GB/s: T allows 5000 x 2 / 102 = 98 MB/s, below the smallest budget, so the clamp is one
    chunk per window. The module accepts the command, GET_GPU_RATES reads it back, and the evict-to-peer
    workload then sees lender_busy refusals with chunks onto GPU1 a window apart, as test_lend_traffic_budget
    does with that budget set directly; residency, counters and data agree. The rates are reset to unknown
    afterwards."""
    from huvm import abi

    lib = abi.lib
    s, node = session, huvm_node
    assert len(s.gpus) >= 2, "rates-clamp needs at least 2 GPUs"
    g0, lender = s.gpus[0], s.gpus[1]
    slot = _slots(node, s)
    owner, holder = slot[g0.index], slot[lender.index]
    window_ns = int(lib.HUVM_LEND_TRAFFIC_WINDOW_MS) * 1_000_000

    node.apply_preset("huvm")
    _, policy = node.set([f"gpu.{holder}.lend_traffic_mbyte_per_s=50GB/s"] +
                         [f"gpu.{slot[o.index]}.role=harvester" for o in s.gpus[2:]])
    entry = policy.gpu_by_uuid(lender.uuid_str)
    assert entry is not None and entry.lend_traffic_mbyte_per_s == 50_000 and entry.lend_slowdown_max_pct == 2, entry
    try:
        cli = subprocess.run([sys.executable, "-m", "huvm", "--backend", "kernel", "--device", "/dev/nvidia-uvm",
                              "rates", "set", str(holder), "--hbm", "5GB/s", "--giveback", "3GB/s", "--json"],
                             capture_output=True, text=True, check=False, timeout=120)
        assert cli.returncode == 0, f"huvmctl rates set: rc {cli.returncode}: {cli.stderr.strip()}"
        doc = json.loads(cli.stdout)
        assert doc["changed"] == [holder], doc
        got = {r.gpu: (r.hbm_mbyte_per_s, r.giveback_mbyte_per_s) for r in node.gpu_rates()}
        assert got[holder] == (5000, 3000), got
        assert all(v == (0, 0) for k, v in got.items() if k != holder), got
        print(f"rates-clamp: {lender.name} hbm 5 GB/s, give-back 3 GB/s; budget 50 GB/s, T 2 %")

        seed = 0x2A_7E
        st0 = node.stats()
        with sglib.TraceRecorder() as rec:
            r, size, blocks = _oversubscribe(s, managed, g0, seed)
            _settled_stats(node, owner)
            events = [e for e in rec.events() if e.name in ("evict", "preevict") and e.gpu == owner]
            lost = rec.lost()
        st1 = node.stats()
    finally:
        node.set_gpu_rates(holder, 0, 0)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    g = st1.delta(st0).gpus[owner]
    busy = g["host_reason"][lib.HUVM_REASON_LENDER_BUSY]
    onto = sorted(e.ts_ns for e in events if e.peer == holder)
    gaps = [b - a for a, b in zip(onto, onto[1:])]
    print(f"rates-clamp: {blocks} blocks of {g0.name}: residency {counts}; evict_to_peer +{g['evict_to_peer']}, "
          f"evict_to_host +{g['evict_to_host']} (lender_busy {busy}); {len(onto)} onto {lender.name}, smallest gap "
          f"{min(gaps, default=0) / 1e6:.1f} ms")
    sglib.perf("rates_clamp_lender_busy", busy, "chunks", to_peer=g["evict_to_peer"], to_host=g["evict_to_host"])

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert lost == 0, f"the trace buffer dropped {lost} events"
    # T clamped the 50 GB/s budget: refusals although GPU1 had room, chunks onto it a window apart
    assert busy > 0, f"no eviction was refused by the clamped budget: reasons {g['host_reason']}"
    assert g["host_reason"][lib.HUVM_REASON_PEER_FULL] == 0, f"GPU1 was full: {g['host_reason']}"
    assert g["evict_to_peer"] > 0 and counts.get(f"GPU{lender.index}", 0) == g["evict_to_peer"], counts
    assert counts.get("cpu", 0) == g["evict_to_host"], f"host blocks {counts.get('cpu', 0)} != {g['evict_to_host']}"
    assert all(gap >= window_ns * 9 // 10 for gap in gaps), f"chunks onto GPU1 {[x / 1e6 for x in gaps]} ms apart"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"


# ---- shared workload -----------------------------------------------------------------------------------------

def _oversubscribe(s: sglib.Session, managed: Any, gpu: Any, seed: int) -> tuple[Any, int, int]:
    """A managed region 1.5x gpu's PMA region, filled by the CPU with a stale pattern
    (``sglib.stale_seed(seed)``), migrated onto gpu in 16 MiB pieces, each piece then written over by gpu's
    SMs with the pattern of ``seed`` (the evict-to-peer workload). The data a test checks lives on gpu only
    (UVM keeps the CPU's pages, with the stale words, after migrating a block): every eviction, give-back and
    fetch-back must copy it for the checks to pass. Returns (region, bytes, 2 MiB blocks)."""
    size = -(-gpu.pma_bytes * 3 // 2 // CHUNK) * CHUNK
    r = managed(size)
    sglib.fill_pattern(r, sglib.stale_seed(seed))
    piece = 16 * MIB
    for off in range(0, size, piece):
        n = min(piece, size - off)
        r.migrate(gpu, off, n)
        sglib.gpu_fill(s, gpu.index, r, seed, off, n)
    return r, size, size // CHUNK


def _pma_room(s: sglib.Session, gpu: Any) -> tuple[int, int]:
    """(bytes in free 2 MiB PMA pages, bytes UVM holds unpinned: what PMA may evict) of gpu."""
    p = s.uvm.run_test("PMM_QUERY_PMA_STATS", gpu_uuid=gpu)
    return int(p.pma_stats.numFreePages2m) * CHUNK, s.sg.counters().gpus[gpu.index].pma_unpinned_bytes


def _own_va_space_counters(node: Any) -> dict[int, dict[str, int]]:
    return {v.id: v.counters for v in node.va_spaces() if v.pid == os.getpid()}


# ---- UVM's tools event "Eviction" (UvmEventTypeEviction), which huvm sends and stock UVM never does -----------

class _EvictionEvents:
    """Tools event queues on the session's VA space (/dev/nvidia-uvm-tools, as CUPTI opens them) with only
    UvmEventTypeEviction enabled: a V1 queue and, on 570+, a V2 queue (the glue fills both: V1 indexes GPUs by
    parent GPU, 1, 2, 3..., V2 by processor id, sglib.uvm_gpu_id())."""

    def __init__(self, s: sglib.Session) -> None:
        from huvm import uvm

        self.queues: list[Any] = []
        try:
            for version in (1, 2) if sglib.BRANCH >= 570 else (1,):
                q = uvm.ToolsEventQueue(s.uvm, 4096, version=version)
                self.queues.append(q)
                q.enable(uvm.constant("UvmEventTypeEviction"))
        except BaseException:
            self.close()
            raise
        self.got: dict[int, list[Any]] = {q.version: [] for q in self.queues}

    @staticmethod
    def index(version: int, nth: int) -> int:
        """The tools index of the nth GPU (the CPU is 0 in both versions)."""
        return nth + 1 if version == 1 else sglib.uvm_gpu_id(nth)

    def read(self) -> dict[int, list[Any]]:
        """version -> every eviction event so far (uvm.EvictionEvent), nothing dropped."""
        from huvm import uvm

        for q in self.queues:
            self.got[q.version] += [q.eviction(e) for e in q.read()]
            dropped = q.dropped(uvm.constant("UvmEventTypeEviction"))
            assert dropped == 0, f"the V{q.version} tools event queue dropped {dropped} eviction events"
        return self.got

    def between(self, version: int, src: int, dst: int | None, lo: int, hi: int) -> list[Any]:
        """Events of queue ``version`` from softgpu GPU ``src`` to GPU ``dst`` (None: the CPU) in [lo, hi)."""
        want_src, want_dst = self.index(version, src), 0 if dst is None else self.index(version, dst)
        return [e for e in self.got[version] if e.src == want_src and e.dst == want_dst and lo <= e.address < hi]

    def close(self) -> None:
        for q in self.queues:
            q.close()
        self.queues = []


def _check_tools_evictions(ev: _EvictionEvents, src: int, dst: int | None, r: Any, size: int, want: list[int],
                           what: str) -> None:
    """Every queue holds exactly one 2 MiB eviction event from GPU src to dst (None: the CPU) per block offset of
    ``want`` (a block that went twice counts twice), and no other event of that pair in the region."""
    for version in ev.got:
        got = ev.between(version, src, dst, r.base, r.base + size)
        offs = sorted(e.address - r.base for e in got)
        print(f"tools events: V{version} {what}: {len(got)} Eviction events "
              f"{ev.index(version, src)} -> {0 if dst is None else ev.index(version, dst)}")
        assert all(e.size == CHUNK for e in got), f"V{version} {what}: sizes {sorted({e.size for e in got})}"
        assert offs == sorted(want), \
            f"V{version} {what}: {len(got)} tools Eviction events at {[o >> 20 for o in offs][:12]} MiB, " \
            f"expected {len(want)} at {[o >> 20 for o in sorted(want)][:12]} MiB"


# ---- giveback --------------------------------------------------------------------------------------------------

@_scenario("giveback")
def test_giveback(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    s, node = session, huvm_node
    assert len(s.gpus) >= 2, "giveback needs at least 2 GPUs"
    g0, lender = s.gpus[0], s.gpus[1]
    others = s.gpus[2:]
    slot = _slots(node, s)
    owner, holder = slot[g0.index], slot[lender.index]

    # Give-back alone: with the preset's pre-eviction on, the cudaMalloc below is memory pressure on the lender,
    # whose worker may then pre-evict its own data (to peers) once the guests are gone, racing the checks.
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0"])
    assert policy.preevict_chunks == 0
    print(f"giveback: policy {policy.preset_name}: peer_select={policy.peer_select} "
          f"preevict_chunks={policy.preevict_chunks}")

    seed = 0x61_7EBAC
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    st1 = _settled_stats(node, owner)
    counts1, odd1 = sglib.blocks_by_place(s, r.base, size)
    guest = counts1.get(f"GPU{lender.index}", 0)
    on_others1 = {o.index: counts1.get(f"GPU{o.index}", 0) for o in others}
    held1 = st1.pair(owner, holder)["held_bytes"]
    print(f"giveback: {blocks} blocks of {g0.name} ({size >> 20} MiB): residency {counts1}; "
          f"{lender.name} holds {guest} guest chunks, held_bytes {held1 >> 20} MiB, lent_bytes "
          f"{st1.gpus[holder].scalar('lent_bytes') >> 20} MiB")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports during the setup, first: " \
        + " | ".join(bad_log[:6])
    assert not odd1, f"blocks split between processors: {odd1[:8]}"
    assert counts1.get("cpu", 0) == 0, f"blocks evicted to the host before the give-back: {counts1}"
    assert guest > 0, f"no block of {g0.name} landed on {lender.name}: {counts1}"
    assert held1 == guest * CHUNK, f"held_bytes {held1} != {guest} guest chunks on {lender.name}"
    assert st1.gpus[holder].scalar("lent_bytes") == guest * CHUNK, \
        f"lent_bytes of {lender.name} {st1.gpus[holder].scalar('lent_bytes')} != {guest} chunks"

    # The lender's own process starts: two blocks of its own data on GPU1 (room enough, nothing evicted).
    # Not before the harvest: UVM then takes GPU1's whole PMA in one batch (uvm_perf_pma_batch_nonpinned_order)
    # and huvm, which reads only PMA's free pages (gpu_free_bytes in driver/uvm/uvm_huvm.c, not the free root
    # chunks UVM's PMM keeps), sees GPU1 full and lends nothing: an open defect.
    own = managed(2 * CHUNK)
    own_seed = 0x0E_0D_A7A
    sglib.fill_pattern(own, own_seed)
    own.migrate(lender)
    own_bad = sglib.resident_exactly_on(s.uvm, own, lender)
    assert not own_bad, f"the lender's own data is not on {lender.name}: {own_bad[:4]}"
    counts1b, _ = sglib.blocks_by_place(s, r.base, size)
    assert counts1b == counts1, f"the lender's own allocation moved guest data: {counts1} -> {counts1b}"

    # Another process's cudaMalloc on GPU1: all it can get without the lender's own data (free 2 MiB pages
    # plus everything UVM holds unpinned, less the two own blocks). PMA's eviction callback must give the
    # guest chunks back (they are picked right after UVM's free chunks, before any own data).
    free_before, unpinned_before = _pma_room(s, lender)
    want = (free_before + unpinned_before - own.size) // CHUNK * CHUNK
    assert want > 0
    vas_before = _own_va_space_counters(node)
    sg_before = s.sg.counters()
    tools = _EvictionEvents(s)
    try:
        fa = s.sg.foreign_alloc(lender, want)
    except BaseException:
        tools.close()
        raise
    try:
        st2 = _settled_stats(node, owner, also=(holder,))
        try:
            tools.read()
        finally:
            tools.close()
        counts2, odd2 = sglib.blocks_by_place(s, r.base, size)
        own_bad = sglib.resident_exactly_on(s.uvm, own, lender)
        free_after, unpinned_after = _pma_room(s, lender)
        sg_d = s.sg.counters().minus(sg_before).gpus[lender.index]
        vas_after = _own_va_space_counters(node)
        d = st2.delta(st1)
        gb_pair = st2.pair(owner, holder)["giveback_chunks"] - st1.pair(owner, holder)["giveback_chunks"]
        on_others2 = {o.index: counts2.get(f"GPU{o.index}", 0) for o in others}
        print(f"giveback: PMA of {lender.name} before: free 2M {free_before >> 20} MiB, unpinned "
              f"{unpinned_before >> 20} MiB; foreign allocation asked {want >> 20} MiB, got {fa.allocated >> 20} MiB "
              f"(pma_evictions +{sg_d['pma_evictions']}); after: free 2M {free_after >> 20} MiB, unpinned "
              f"{unpinned_after >> 20} MiB")
        print(f"giveback: residency {counts1} -> {counts2}; own data on {lender.name}: "
              f"{'yes' if not own_bad else own_bad[:2]}")
        print(f"giveback: counters: {lender.name} giveback +{d.gpus[holder]['giveback']} evict_to_host "
              f"+{d.gpus[holder]['evict_to_host']} lent_bytes {st2.gpus[holder].scalar('lent_bytes') >> 20} MiB; "
              f"pair({g0.name},{lender.name}) giveback_chunks +{gb_pair} held_bytes "
              f"{st2.pair(owner, holder)['held_bytes'] >> 20} MiB; {g0.name} harvested_bytes "
              f"{st2.gpus[owner].scalar('harvested_bytes') >> 20} MiB evict_to_host +{d.gpus[owner]['evict_to_host']} "
              f"evict_to_peer +{d.gpus[owner]['evict_to_peer']}")
        sglib.perf("giveback_chunks", gb_pair, "chunks", guest_chunks=guest, to_cpu=counts2.get("cpu", 0),
                   foreign_mib=fa.allocated >> 20)

        bad_log = sglib.bad_lines(kmsg.read())
        assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports during the give-back, first: " \
            + " | ".join(bad_log[:6])
        assert fa.allocated == want, f"the foreign allocation got {fa.allocated} of {want} bytes"
        assert not odd2, f"blocks split between processors after the give-back: {odd2[:8]}"
        # the guest chunks left GPU1, for the host (huvm never cascades a guest chunk to a third GPU)
        assert counts2.get(f"GPU{lender.index}", 0) == 0, f"guest chunks still on {lender.name}: {counts2}"
        assert counts2.get("cpu", 0) == guest, f"{guest} guest chunks given back, residency {counts2}"
        assert counts2.get(f"GPU{g0.index}", 0) == counts1.get(f"GPU{g0.index}", 0), \
            f"{g0.name}'s own residency changed: {counts1} -> {counts2}"
        assert on_others2 == on_others1, f"other lenders' chunks moved: {on_others1} -> {on_others2}"
        # the lender's own data was never evicted while guest chunks remained
        assert not own_bad, f"the lender's own data left {lender.name}: {own_bad[:4]}"
        assert d.gpus[holder]["evict_to_host"] == 0, \
            f"{lender.name} counted {d.gpus[holder]['evict_to_host']} evictions of its own data"
        # counters and gauges equal the residency
        assert d.gpus[holder]["giveback"] == guest, f"giveback +{d.gpus[holder]['giveback']} != {guest}"
        assert gb_pair == guest, f"pair giveback_chunks +{gb_pair} != {guest}"
        assert st2.pair(owner, holder)["held_bytes"] == 0, "held_bytes not 0 after the give-back"
        assert st2.gpus[holder].scalar("lent_bytes") == 0, "lent_bytes of the lender not 0 after the give-back"
        assert st2.gpus[owner].scalar("harvested_bytes") == sum(on_others2.values()) * CHUNK, \
            f"harvested_bytes {st2.gpus[owner].scalar('harvested_bytes')} != {on_others2} chunks on other peers"
        assert d.gpus[owner]["evict_to_host"] == 0 and d.gpus[owner]["evict_to_peer"] == 0, \
            "the give-back counted as the harvester's evictions"
        moved = {k: v for k, v in vas_after.items() if v != vas_before.get(k)}
        assert len(moved) == 1, f"LIST_VA_SPACES: {len(moved)} VA spaces of pid {os.getpid()} moved: {moved}"
        ((vid, vas1),) = moved.items()
        assert vas_before[vid]["harvested_bytes"] - vas1["harvested_bytes"] == guest * CHUNK, \
            f"VA space harvested_bytes {vas_before[vid]['harvested_bytes']} -> {vas1['harvested_bytes']}"
        # UVM's tools event "Eviction" for each given-back chunk: the lender -> CPU, at the blocks now on the host;
        # nothing from GPU0 (its data did not move)
        on_cpu = [off for off in range(0, size, CHUNK) if s.uvm.va_residency_info(r.base + off).on_cpu]
        _check_tools_evictions(tools, lender.index, None, r, size, on_cpu, "give-back to the host")
        for version in tools.got:
            from_g0 = [e for e in tools.got[version] if e.src == tools.index(version, g0.index)]
            assert not from_g0, f"V{version}: {len(from_g0)} tools Eviction events from {g0.name} during the give-back"
    finally:
        s.sg.foreign_free(fa)

    # data byte-exact, written by GPU0's SMs before the evictions: the given-back blocks are on the host now (the
    # CPU reads them: a give-back that skipped its copy leaves the stale words UVM kept on the CPU), then
    # everything (from the host, GPU0 and the other peers)
    gave = [off for off in range(0, size, CHUNK) if s.uvm.va_residency_info(r.base + off).on_cpu]
    for off in gave:
        n_bad, first = sglib.pattern_mismatches(r, seed, off, CHUNK)
        assert n_bad == 0, f"{n_bad} words differ in the block at +{off >> 20} MiB given back to the host, first " \
            f"at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after the give-back, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(own, own_seed)
    assert n_bad == 0, f"{n_bad} words of the lender's own data differ, first at 0x{first:x}"
    st3 = _settled_stats(node, owner)
    assert st3.gpus[owner].scalar("harvested_bytes") == 0, "harvested gauge not back to 0 after the data left"
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])


# ---- stock-fault-path ------------------------------------------------------------------------------------------

KPROBE_GROUP = "huvm_sgtest"


def _tracefs_append(path: str, text: str) -> None:
    """One line appended to a tracefs file (O_APPEND without Python's seek to the end, which tracefs refuses)."""
    fd = os.open(os.path.join(sglib.TRACEFS, path), os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


class _KprobeCount:
    """A kprobe on nvidia-uvm's symbol, counted (tracefs kprobe_profile's hits), removed on exit."""

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol
        self.event = f"{KPROBE_GROUP}/{symbol}"

    def _write(self, path: str, text: str) -> None:
        _tracefs_append(path, text)

    def __enter__(self) -> Self:
        assert os.path.exists(os.path.join(sglib.TRACEFS, "kprobe_events")), "no kprobe events in this kernel"
        self._write("kprobe_events", f"p:{self.event} nvidia_uvm:{self.symbol}")
        self._write(f"events/{self.event}/enable", "1")
        return self

    def hits(self) -> int:
        with open(os.path.join(sglib.TRACEFS, "kprobe_profile")) as f:
            for line in f:
                words = line.split()
                if words and words[0] == self.symbol:
                    return int(words[1])
        raise AssertionError(f"kprobe {self.event} not in kprobe_profile")

    def __exit__(self, *exc: object) -> None:
        self._write(f"events/{self.event}/enable", "0")
        self._write("kprobe_events", f"-:{self.event}")


def _sm_fault_pages(s: sglib.Session, managed: Any, mib: int) -> None:
    """GPU0's SM writes one word per page of a fresh managed region: replayable faults, no eviction."""
    from huvm import softgpu

    r = managed(mib * MIB)
    accesses = [softgpu.Access.write(r.base + off, 8, seed=3) for off in range(0, r.size, sglib.PAGE)]
    s.sg.sm_access(s.channels[0], accesses, check=True)


#: the qrwlock word (asm-generic/qrwlock_types.h): writer byte, readers counted from bit 9
QW_LOCKED = 0xFF
QR_SHIFT = 9


def _trace_lines(inst: str) -> list[str]:
    with open(os.path.join(inst, "trace")) as f:
        return [ln for ln in f if not ln.startswith("#")]


@_scenario("readers-shared")
def test_glue_readers_shared(session: sglib.Session, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    node = huvm_node
    inst = os.path.join(sglib.TRACEFS, "instances", KPROBE_GROUP)
    event = f"{KPROBE_GROUP}/free_bytes"
    # g_uvm_huvm's first field is its rwlock_t (no lock debugging in the guest's kernel: the qrwlock word)
    _tracefs_append("kprobe_events",
                    f"p:{event} nvidia_uvm:uvm_pmm_gpu_free_user_root_bytes cnts=@g_uvm_huvm:x32")
    os.makedirs(inst, exist_ok=True)
    try:
        with open(os.path.join(inst, "events", KPROBE_GROUP, "free_bytes", "enable"), "w") as f:
            f.write("1")
        rounds = 50
        for _ in range(rounds):
            info = node.info()
            node.stats()
            node.get_policy()
        with open(os.path.join(inst, "events", KPROBE_GROUP, "free_bytes", "enable"), "w") as f:
            f.write("0")
        lines = _trace_lines(inst)
    finally:
        os.rmdir(inst)
        _tracefs_append("kprobe_events", f"-:{event}")

    words = [int(ln.rsplit("cnts=", 1)[1].split()[0], 16) for ln in lines if "cnts=" in ln]
    exclusive = [w for w in words if w & QW_LOCKED]
    unlocked = [w for w in words if not w & QW_LOCKED and (w >> QR_SHIFT) == 0]
    print(f"readers-shared: {rounds} rounds, {len(info.gpus)} GPUs: {len(words)} free-memory walks, "
          f"{len(exclusive)} under the lock held exclusively, {len(unlocked)} unlocked")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert len(words) >= rounds, f"GET_INFO walked the free memory {len(words)} times in {rounds} calls"
    assert not exclusive, f"{len(exclusive)} of {len(words)} walks ran under the huvm lock held for write: " \
        + ", ".join(hex(w) for w in exclusive[:4])
    assert not unlocked, f"{len(unlocked)} walks without the huvm lock"


@_scenario("stock-fault-path")
def test_glue_stock_fault_path(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    s, node = session, huvm_node
    owner = _slots(node, s)[s.gpus[0].index]

    with _KprobeCount("huvm_decide_prefetch") as probe:
        _, policy = node.apply_preset("stock")
        assert policy.preset_name == "stock"
        st0, h0 = node.stats(), probe.hits()
        _sm_fault_pages(s, managed, 4)
        d, stock_hits = node.stats().delta(st0), probe.hits() - h0

        node.apply_preset("huvm")
        h1 = probe.hits()
        _sm_fault_pages(s, managed, 4)
        huvm_hits = probe.hits() - h1
        node.apply_preset("stock")

    batches = d.gpus[owner]["fault_batches"]
    print(f"stock-fault-path: stock: {d.gpus[owner]['faults']} faults in {batches} batches, "
          f"huvm_decide_prefetch {stock_hits}x; huvm preset: {huvm_hits}x")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert batches > 0, "no fault batch was counted: the workload did not fault"
    assert stock_hits == 0, f"stock: the fault path gathered the node's state {stock_hits} times ({batches} batches)"
    assert huvm_hits > 0, "huvm preset: the fault path never reached the prefetch decision (probe not working?)"


# ---- stock-equals-upstream -------------------------------------------------------------------------------------

@_scenario("stock-equals-upstream")
def test_stock_equals_upstream(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]

    _, policy = node.apply_preset("stock")
    assert policy.preset_name == "stock"
    print(f"stock: preevict_chunks={policy.preevict_chunks} prefetch_mode={policy.prefetch_mode} roles="
          + ",".join(g.role_name for g in policy.gpus))

    st0 = node.stats()
    seed = 0x5_70C
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    st1 = _settled_stats(node, owner)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    d = st1.delta(st0)
    peers = [p for p in s.gpus if p.index != g0.index]
    g = d.gpus[owner]
    print(f"stock: {blocks} blocks of {g0.name} ({size >> 20} MiB): residency {counts}; counters of "
          f"{g0.name}: evict_to_peer +{g['evict_to_peer']} evict_to_host +{g['evict_to_host']} host_reason "
          f"{g['host_reason']} harvested_bytes {g['harvested_bytes']}")
    sglib.perf("stock_blocks_on_cpu", counts.get("cpu", 0), "blocks", on_gpu0=counts.get(f"GPU{g0.index}", 0),
               evict_to_host=g["evict_to_host"], blocks=blocks)

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert all(counts.get(f"GPU{p.index}", 0) == 0 for p in peers), f"blocks landed on peers: {counts}"
    assert counts.get("cpu", 0) > 0, f"nothing was evicted to the host: {counts}"
    assert counts.get("cpu", 0) + counts.get(f"GPU{g0.index}", 0) == blocks, f"residency {counts}"
    for i, gd in enumerate(d.gpus):
        assert gd["evict_to_peer"] == 0 and gd["preevict_to_peer"] == 0, \
            f"slot {i}: evict_to_peer +{gd['evict_to_peer']} preevict_to_peer +{gd['preevict_to_peer']}"
        assert gd["prefetch_to_peer"] == 0 and gd["giveback"] == 0, \
            f"slot {i}: prefetch_to_peer +{gd['prefetch_to_peer']} giveback +{gd['giveback']}"
        assert st1.gpus[i].scalar("harvested_bytes") == 0 and st1.gpus[i].scalar("lent_bytes") == 0, \
            f"slot {i}: harvested/lent gauges moved under the stock preset"
    assert all(p["evict_chunks"] == 0 for p in d.pairs), f"pair evictions under stock: {d.pairs}"
    # the host evictions are counted (reason: tier off), one per block UVM's residency shows on the CPU
    assert g["evict_to_host"] == counts.get("cpu", 0), \
        f"evict_to_host +{g['evict_to_host']} but {counts.get('cpu', 0)} blocks on the CPU"

    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after eviction to host, first at 0x{first:x}"
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])


# ---- unused-chunks (defect 1: no phantom peer evictions) ----------------------------------------------------------

@_scenario("unused-chunks")
def test_unused_chunks(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """Blocks that went to GPU0 and back to the CPU leave their 2 MiB chunks on GPU0 with nothing resident in
    them (PMM's "unused" list, evicted before any used chunk). Evicting such a chunk moves nothing: no peer
    chunk may be taken for it, no eviction counted, no gauge moved. Then the evict-to-peer workload: the
    counters equal the blocks UVM shows on the peers."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    _, policy = node.apply_preset("huvm")
    assert policy.preset_name == "huvm"

    # A quarter of GPU0's PMA region visits GPU0 and comes back: its chunks stay on GPU0, unused.
    visit_size = max(4, g0.pma_bytes // 4 // CHUNK) * CHUNK
    visit = managed(visit_size)
    visit_seed = 0x0_0B5E
    sglib.fill_pattern(visit, visit_seed)
    visit.migrate(g0)
    visit.migrate("cpu")
    vcounts, _ = sglib.blocks_by_place(s, visit.base, visit_size)
    assert vcounts == {"cpu": visit_size // CHUNK}, f"the visiting blocks did not come back: {vcounts}"

    st0 = _settled_stats(node, owner)
    seed = 0x0_5ED
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    st1 = _settled_stats(node, owner)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    vcounts_after, _ = sglib.blocks_by_place(s, visit.base, visit_size)
    d = st1.delta(st0)
    g = d.gpus[owner]
    lenders = [p for p in s.gpus if p.index != g0.index]
    on_peers = sum(counts.get(f"GPU{p.index}", 0) for p in lenders)
    held = sum(st1.pair(owner, slot[p.index])["held_bytes"] for p in lenders)
    lent = sum(st1.gpus[slot[p.index]].scalar("lent_bytes") for p in lenders)
    print(f"unused-chunks: {visit_size // CHUNK} unused chunks on {g0.name}, then {blocks} blocks: residency "
          f"{counts}, visiting blocks {vcounts_after}; evict_to_peer +{g['evict_to_peer']} evict_to_host "
          f"+{g['evict_to_host']}; held {held >> 20} MiB lent {lent >> 20} MiB harvested "
          f"{st1.gpus[owner].scalar('harvested_bytes') >> 20} MiB")
    sglib.perf("unused_chunks_phantom_evictions", g["evict_to_peer"] + g["evict_to_host"] - on_peers
               - counts.get("cpu", 0), "chunks", unused=visit_size // CHUNK, on_peers=on_peers)

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert vcounts_after == vcounts, f"the visiting blocks moved: {vcounts} -> {vcounts_after}"
    assert on_peers > 0, f"no block landed on a peer: {counts}"
    assert g["evict_to_peer"] == on_peers, \
        f"evict_to_peer +{g['evict_to_peer']} but {on_peers} blocks on peers: unused chunks counted as evictions"
    assert g["evict_to_host"] == counts.get("cpu", 0), \
        f"evict_to_host +{g['evict_to_host']} but {counts.get('cpu', 0)} blocks on the CPU"
    assert held == on_peers * CHUNK and lent == on_peers * CHUNK, \
        f"held {held} / lent {lent} bytes but {on_peers} chunks on peers"
    assert st1.gpus[owner].scalar("harvested_bytes") == on_peers * CHUNK, \
        f"harvested_bytes {st1.gpus[owner].scalar('harvested_bytes')} != {on_peers} chunks"

    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(visit, visit_seed)
    assert n_bad == 0, f"{n_bad} words of the visiting blocks differ, first at 0x{first:x}"


# ---- read-duplicated (issue 26: pages the CPU also holds are dropped, not copied to a peer) --------------------

@_scenario("read-duplicated")
def test_read_duplicated_blocks_are_dropped_not_copied(session: sglib.Session, managed: Any, huvm_node: Any,
                                                       kmsg: sglib.Kmsg) -> None:
    """Read-duplicated data (cudaMemAdviseSetReadMostly: GPU reads copy the pages and the CPU keeps its own)
    evicted from GPU0 loses only GPU0's copy, as under stock UVM: nothing is copied to a peer (which would also
    revoke the CPU's copy), nothing is harvested. The GPU reads 1.5x its PMA region of such data, so UVM evicts
    duplicated blocks while lenders with room are registered."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    assert len(s.gpus) >= 2, "read-duplicated needs a lender"
    slot = _slots(node, s)
    owner = slot[g0.index]
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0", "prefetch_mode=off"])
    assert policy.preevict_chunks == 0 and policy.gpus[owner].role_name in ("harvester", "both")

    size = -(-g0.pma_bytes * 3 // 2 // CHUNK) * CHUNK
    r = managed(size)
    seed = 0x2EAD_D0
    sglib.fill_pattern(r, seed)                     # the CPU writes: every page resident on the CPU
    s.uvm.enable_read_duplication(r.base, size)
    st0 = _settled_stats(node, owner)
    for off in range(0, size, CHUNK):                # GPU0 reads every block: read faults duplicate them
        s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(r.base + off, CHUNK, seed=seed)],
                       check=True, timeout_ms=60_000)
    st1 = _settled_stats(node, owner)
    counts, _ = sglib.blocks_by_place(s, r.base, size)
    g = st1.delta(st0).gpus[owner]
    lenders = [p for p in s.gpus if p.index != g0.index]
    on_peers = {k: v for k, v in counts.items() if any(f"GPU{p.index}" in k.split("+") for p in lenders)}
    print(f"read-duplicated: {size // CHUNK} blocks read by {g0.name} (PMA {g0.pma_bytes >> 20} MiB): residency "
          f"{counts}; evict_to_peer +{g['evict_to_peer']} evict_to_host +{g['evict_to_host']} "
          f"host_reason +{g['host_reason']} harvested {st1.gpus[owner].scalar('harvested_bytes') >> 20} MiB")

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert counts.get(f"GPU{g0.index}+cpu", 0) > 0, f"no block is read-duplicated on {g0.name}: {counts}"
    assert not on_peers, f"read-duplicated blocks were copied to peers: {on_peers} (residency {counts})"
    assert counts.get("cpu", 0) > 0, f"nothing was evicted from {g0.name} (not oversubscribed?): {counts}"
    assert g["evict_to_peer"] == 0 and st1.gpus[owner].scalar("harvested_bytes") == 0, \
        f"evict_to_peer +{g['evict_to_peer']}, harvested {st1.gpus[owner].scalar('harvested_bytes')} bytes"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"


# ---- the test commands on a live node (defect 7) -------------------------------------------------------------------

def test_test_commands_refused_while_gpus_are_registered(session: sglib.Session) -> None:
    """TEST_SET_NODE would replace, and TEST_EVENT would move the counters of, the emulated GPUs the hooks are
    using: both are refused (NV_ERR_STATE_IN_USE) even for root with uvm_enable_builtin_tests=1, and the
    counters do not move."""
    import huvm
    from huvm import abi
    from huvm.backend import KernelBackend

    assert session.gpus, "needs the emulated GPUs registered"
    node = huvm.open(backend="kernel", device="/dev/nvidia-uvm")
    try:
        before = node.stats()
        with KernelBackend("/dev/nvidia-uvm") as kb:
            ev = abi.new_params(abi.lib.HUVM_IOCTL_TEST_EVENT)
            ev.event, ev.gpu, ev.count = abi.lib.HUVM_TEST_EVENT_EVICT, 0, 1
            setnode = abi.new_params(abi.lib.HUVM_IOCTL_TEST_SET_NODE)
            setnode.gpu_count = 1
            setnode.gpus[0].memory_bytes = 1 << 30
            setnode.gpus[0].flags = abi.lib.HUVM_GPU_FLAG_PRESENT
            for cmd, p in ((abi.lib.HUVM_IOCTL_TEST_EVENT, ev), (abi.lib.HUVM_IOCTL_TEST_SET_NODE, setnode)):
                kb.ioctl(cmd, p)     # the refusal is in-band: rmStatus
                assert p.rmStatus == abi.lib.HUVM_NV_ERR_STATE_IN_USE, f"{abi.command_name(cmd)}: {p.rmStatus:#x}"
        after = node.stats()
        keys = ("evict_to_peer", "evict_to_host", "giveback", "faults")
        moved = {(i, k): g[k] for i, g in enumerate(after.delta(before).gpus) for k in keys if g[k]}
        assert not moved, f"a refused test command moved counters: {moved}"
        assert len(node.info().gpus) == len(session.gpus), "the node changed"
    finally:
        node.close()


# ---- lender-grows (defect 9: proactive give-back) ------------------------------------------------------------------

def _huvm_free(node: Any, slot: int) -> int:
    """Free memory of a huvm slot as the policy sees it (GET_INFO: PMA's free 2 MiB pages + UVM's free root
    chunks)."""
    return int(node.info().gpus[slot].free_bytes)


@_scenario("lender-grows")
def test_lender_grows(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """The lender (GPU1, lend reserve R) holds guest chunks; its own process then allocates until its free
    memory is R/2 below the reserve, without ever running out of memory (nothing has to evict). The lender's
    worker must give guest chunks back (to host) until its free memory is back at R, before its own work has
    to evict; its own data stays; counters equal residency; no byte lost."""
    s, node = session, huvm_node
    assert len(s.gpus) >= 2, "lender-grows needs at least 2 GPUs"
    g0, lender = s.gpus[0], s.gpus[1]
    slot = _slots(node, s)
    owner, holder = slot[g0.index], slot[lender.index]
    reserve = 16 * MIB

    _, policy = node.apply_preset("huvm")
    _, policy = node.set([f"gpu.{holder}.lend_reserve_bytes={reserve >> 20}MiB"])
    assert policy.gpus[holder].lend_reserve_bytes == reserve, policy.gpus[holder]

    seed = 0x1E_6D0
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    st1 = _settled_stats(node, owner)
    counts1, _ = sglib.blocks_by_place(s, r.base, size)
    guest1 = counts1.get(f"GPU{lender.index}", 0)
    free1 = _huvm_free(node, holder)
    print(f"lender-grows: residency {counts1}; {lender.name} holds {guest1} guest chunks, free "
          f"{free1 >> 20} MiB (reserve {reserve >> 20} MiB)")
    assert guest1 > 0, f"no guest chunk on {lender.name}: {counts1}"
    assert free1 >= reserve, f"{lender.name} admitted guests below its reserve: free {free1 >> 20} MiB"

    # The lender's own work: allocations that leave free memory R/2 below the reserve, in 2 MiB steps,
    # never more than what is free (no allocation has to evict).
    grow = (free1 - reserve // 2) // CHUNK * CHUNK
    own = managed(grow)
    own_seed = 0x0_6E0
    sglib.fill_pattern(own, own_seed)
    for off in range(0, grow, CHUNK):
        own.migrate(lender, off, CHUNK)
    st2 = _settled_stats(node, owner, also=(holder,))
    counts2, odd2 = sglib.blocks_by_place(s, r.base, size)
    free2 = _huvm_free(node, holder)
    own_bad = sglib.resident_exactly_on(s.uvm, own, lender)
    d = st2.delta(st1)
    given = d.gpus[holder]["giveback"]
    guest2 = counts2.get(f"GPU{lender.index}", 0)
    print(f"lender-grows: own data {grow >> 20} MiB on {lender.name}; residency {counts2}; free "
          f"{free2 >> 20} MiB; giveback +{given}, {lender.name} evict_to_host +{d.gpus[holder]['evict_to_host']}")
    sglib.perf("lender_grows_giveback_chunks", given, "chunks", guest_before=guest1, guest_after=guest2,
               free_after_mib=free2 >> 20)

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd2, f"blocks split between processors: {odd2[:8]}"
    assert not own_bad, f"the lender's own data is not (all) on {lender.name}: {own_bad[:4]}"
    assert given > 0, f"{lender.name} is {(reserve - free2) >> 20} MiB below its reserve and gave nothing back"
    assert free2 >= reserve or guest2 == 0, \
        f"{lender.name} still {(reserve - free2) >> 20} MiB below its reserve with {guest2} guest chunks left"
    assert guest1 - guest2 == given, f"{guest1 - guest2} chunks left {lender.name}, giveback counted {given}"
    assert counts2.get("cpu", 0) - counts1.get("cpu", 0) == given, f"given-back chunks not on the host: {counts2}"
    assert d.gpus[holder]["evict_to_host"] == 0, "the lender evicted its own data"
    assert st2.pair(owner, holder)["held_bytes"] == guest2 * CHUNK
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(own, own_seed)
    assert n_bad == 0, f"{n_bad} words of the lender's own data differ, first at 0x{first:x}"


# ---- block-split (defect 2) ------------------------------------------------------------------------------------------

def _munmap(addr: int, length: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    if libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(length)) != 0:
        raise OSError(ctypes.get_errno(), f"munmap(0x{addr:x}, {length})")


@_scenario("block-split")
def test_block_split(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """munmap of the second half of a block harvested on a peer splits the block (UVM splits the range and
    its 2 MiB block). Before the split, the block's pages on the peer go to the host (a give-back): no piece
    of a split block stays harvested, the gauges equal the chunks UVM shows on peers, the first half's data
    is intact."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    _, policy = node.apply_preset("huvm")
    assert policy.preset_name == "huvm"

    seed = 0xB1_0C5
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    _settled_stats(node, owner)
    names = {g.uuid: g for g in s.gpus}
    victim, holder_gpu = None, None
    for off in range(0, size, CHUNK):
        where = s.uvm.va_residency_info(r.base + off).resident_on
        if len(where) == 1 and where[0] in names and names[where[0]].index != g0.index:
            victim, holder_gpu = off, names[where[0]]
            break
    assert victim is not None, "no block landed on a peer"
    holder = slot[holder_gpu.index]
    st1 = node.stats()

    half = CHUNK // 2
    _munmap(r.base + victim + half, half)

    st2 = _settled_stats(node, owner, also=(holder,))
    first_half = s.uvm.va_residency_info(r.base + victim).resident_on
    before, odd_a = sglib.blocks_by_place(s, r.base, victim)
    after, odd_b = sglib.blocks_by_place(s, r.base + victim + CHUNK, size - victim - CHUNK)
    peers = [p for p in s.gpus if p.index != g0.index]
    on_peers = {p.index: before.get(f"GPU{p.index}", 0) + after.get(f"GPU{p.index}", 0) for p in peers}
    d = st2.delta(st1)
    held = {p.index: st2.pair(owner, slot[p.index])["held_bytes"] for p in peers}
    print(f"block-split: block +{victim >> 20} MiB on {holder_gpu.name}, second half unmapped; first half now on "
          f"{[names[u].name if u in names else 'cpu' for u in first_half]}; "
          f"giveback +{d.gpus[holder]['giveback']}; held {held}; on peers {on_peers}")

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd_a and not odd_b, f"blocks split between processors: {(odd_a + odd_b)[:8]}"
    assert holder_gpu.uuid not in first_half, f"the split block's first half stayed on {holder_gpu.name}"
    assert d.gpus[holder]["giveback"] == 1, f"giveback +{d.gpus[holder]['giveback']} for the split block"
    assert held == {k: v * CHUNK for k, v in on_peers.items()}, f"held_bytes {held} != chunks on peers {on_peers}"
    assert st2.gpus[owner].scalar("harvested_bytes") == sum(on_peers.values()) * CHUNK, \
        f"harvested_bytes {st2.gpus[owner].scalar('harvested_bytes')} != {sum(on_peers.values())} chunks"
    for p in peers:
        assert st2.gpus[slot[p.index]].scalar("lent_bytes") == on_peers[p.index] * CHUNK, \
            f"lent_bytes of {p.name} != {on_peers[p.index]} chunks"
    # the split block's first half (given back to the host before the split) holds what GPU0's SMs wrote: GPU0
    # reads it, then the CPU reads everything left
    n_bad, first = sglib.gpu_mismatches(s, g0.index, r, seed, victim, half)
    assert n_bad == 0, f"GPU0 reads {n_bad} words that differ in the split block's first half, first at 0x{first:x}"
    for off, n in ((0, victim + half), (victim + CHUNK, size - victim - CHUNK)):
        n_bad, first = sglib.pattern_mismatches(r, seed, off, n)
        assert n_bad == 0, f"{n_bad} words differ in +{off >> 20} MiB..+{(off + n) >> 20} MiB, first at 0x{first:x}"


# ---- block-split-failure (issue 26: a failed give-back before a split must not lose the allocation) ------------

@_scenario("block-split-failure")
def test_block_split_failure(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """A block written by GPU0's SMs only (no CPU page ever allocated for it) is evicted to a peer by NVIDIA's
    test path; UVM's own error injection (UVM_TEST_VA_BLOCK_INJECT_ERROR: 4 KiB CPU chunks,
    cpu_pages_allocation_error_count=1) makes the block's next CPU allocation fail; then the second half of the
    block is unmapped. huvm's give-back
    before the split (to the CPU) fails for want of CPU memory: the split must go on anyway (on munmap UVM
    destroys the whole VA range when a split fails, uvm_vm_open_failure()), the pages staying on the peer as the
    block's own residency there, no longer harvested. Checked: the range is still there, its data (written by
    GPU0) reads back on GPU0 and the CPU, and no gauge counts the split block."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0", "prefetch_mode=off"])
    assert policy.preevict_chunks == 0

    blocks = 4
    r = managed(blocks * CHUNK)
    seed = 0x5_9117_FA11
    sglib.gpu_fill(s, g0.index, r, seed)            # GPU first touch: the block has no CPU pages
    victim = CHUNK
    res = s.uvm.evict_chunk(g0, r.base + victim)
    names = {g.uuid: g for g in s.gpus}
    where = s.uvm.va_residency_info(r.base + victim).resident_on
    assert res.evicted and len(where) == 1 and where[0] in names and names[where[0]].index != g0.index, \
        f"the block did not go to a peer: evicted={res.evicted}, resident on {where}"
    peer = names[where[0]]
    holder = slot[peer.index]
    st1 = _settled_stats(node, owner)
    assert st1.pair(owner, holder)["held_bytes"] >= CHUNK

    # 4 KiB CPU chunks only, so that one injected failure fails the populate (with larger sizes allowed, UVM
    # falls back to a smaller size after a failed allocation, and the injection counts each try)
    # (the count's field was renamed in 570: cpu_chunk_allocation_error_count)
    count_field = "cpu_chunk_allocation_error_count" if sglib.BRANCH >= 570 else "cpu_pages_allocation_error_count"
    s.uvm.run_test("VA_BLOCK_INJECT_ERROR", lookup_address=r.base + victim, cpu_chunk_allocation_size_mask=sglib.PAGE,
                   **{count_field: 1})
    half = CHUNK // 2
    _munmap(r.base + victim + half, half)
    st2 = _settled_stats(node, owner, also=(holder,))
    status, info = s.uvm.test_status("VA_RANGE_INFO", lookup_address=r.base)
    d = st2.delta(st1)
    print(f"block-split-failure: block +{victim >> 20} MiB on {peer.name}, CPU allocation failing, second half "
          f"unmapped: VA_RANGE_INFO status {status:#x}; giveback +{d.gpus[holder]['giveback']}; held_bytes "
          f"{st1.pair(owner, holder)['held_bytes'] >> 20} -> {st2.pair(owner, holder)['held_bytes'] >> 20} MiB")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert status == 0, f"the managed range is gone after a partial munmap (VA_RANGE_INFO: {status:#x}): the " \
        "failed split destroyed the whole allocation"
    assert (int(info.va_range_start), int(info.va_range_end)) == (r.base, r.base + victim + half - 1), \
        f"range [0x{int(info.va_range_start):x}, 0x{int(info.va_range_end):x}] after the split"
    first_half = s.uvm.va_residency_info(r.base + victim).resident_on
    print(f"block-split-failure: the first half is resident on {[names[u].name if u in names else 'cpu' for u in first_half]}")
    # the injection took: the give-back could not allocate CPU pages, so the first half stayed on the peer
    assert first_half == (peer.uuid,), f"the first half is on {first_half}, not on {peer.name}: the injected CPU " \
        "allocation failure did not stop the give-back (the scenario would prove nothing)"
    # and nothing of the split block is harvested any more
    assert st2.pair(owner, holder)["held_bytes"] == st1.pair(owner, holder)["held_bytes"] - CHUNK, \
        f"held_bytes {st1.pair(owner, holder)['held_bytes']} -> {st2.pair(owner, holder)['held_bytes']}"
    assert st2.gpus[holder].scalar("lent_bytes") == st1.gpus[holder].scalar("lent_bytes") - CHUNK
    n_bad, first = sglib.gpu_mismatches(s, g0.index, r, seed, 0, victim + half)
    assert n_bad == 0, f"GPU0 reads {n_bad} words that differ before the unmapped half, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(r, seed, 0, victim + half)
    assert n_bad == 0, f"the CPU reads {n_bad} words that differ before the unmapped half, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(r, seed, victim + CHUNK, r.size - victim - CHUNK)
    assert n_bad == 0, f"the CPU reads {n_bad} words that differ after the unmapped half, first at 0x{first:x}"


# ---- partial-move (issue 26: a partly failed peer move leaves no harvested chunk behind) --------------------------

FAIL_PEER_MOVES = "/sys/module/nvidia_uvm/parameters/uvm_huvm_test_fail_peer_moves"


def _set_param(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


@_scenario("partial-move")
def test_partial_peer_move(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """GPU1 the only lender; one block of GPU0 harvested there (UVM_TEST_EVICT_CHUNK). Then another block's move
    to GPU1 fails after its pages reached GPU1 (huvm's test-only injection uvm_huvm_test_fail_peer_moves,
    honoured with uvm_enable_builtin_tests=1): the eviction falls back to the host (reason copy_failed), GPU0's
    data (written by its SMs) reaches the CPU, and the chunk left on GPU1 is not harvested data: nothing counted
    it, so freeing the block must not uncount anything. Before the fix the chunk stayed marked harvested and its
    release took the first block's bytes off the pair's held_bytes."""
    from huvm import abi

    s, node = session, huvm_node
    assert len(s.gpus) >= 2, "partial-move needs at least 2 GPUs"
    g0, lender = s.gpus[0], s.gpus[1]
    slot = _slots(node, s)
    owner, holder = slot[g0.index], slot[lender.index]
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0", "prefetch_mode=off"]
                         + [f"gpu.{slot[o.index]}.role=harvester" for o in s.gpus[2:]])
    assert policy.preevict_chunks == 0

    keep, keep_seed = managed(CHUNK), 0x6EE9
    sglib.gpu_fill(s, g0.index, keep, keep_seed)
    assert s.uvm.evict_chunk(g0, keep.base).evicted
    assert s.uvm.va_residency_info(keep.base).resident_on == (lender.uuid,), "the first block is not on GPU1"
    st0 = _settled_stats(node, owner, also=(holder,))
    held0 = st0.pair(owner, holder)["held_bytes"]
    assert held0 >= CHUNK, f"held_bytes {held0} with a block harvested on {lender.name}"

    part, part_seed = managed(CHUNK), 0x9A27
    sglib.gpu_fill(s, g0.index, part, part_seed)
    _set_param(FAIL_PEER_MOVES, 1)
    try:
        res = s.uvm.evict_chunk(g0, part.base)
    finally:
        _set_param(FAIL_PEER_MOVES, 0)
    st1 = _settled_stats(node, owner, also=(holder,))
    where = s.uvm.va_residency_info(part.base)
    d = st1.delta(st0)
    print(f"partial-move: the failing move: evicted={res.evicted}, block now {where.describe()}; evict_to_host "
          f"+{d.gpus[owner]['evict_to_host']} (copy_failed +{d.gpus[owner]['host_reason'][abi.lib.HUVM_REASON_COPY_FAILED]}); "
          f"held_bytes {held0 >> 20} -> {st1.pair(owner, holder)['held_bytes'] >> 20} MiB")
    assert res.evicted and where.on_cpu, f"the block did not fall back to the host: {where.describe()}"
    assert d.gpus[owner]["evict_to_host"] == 1 and d.gpus[owner]["evict_to_peer"] == 0, d.gpus[owner]
    assert d.gpus[owner]["host_reason"][abi.lib.HUVM_REASON_COPY_FAILED] == 1, d.gpus[owner]["host_reason"]
    assert st1.pair(owner, holder)["held_bytes"] == held0
    n_bad, first = sglib.pattern_mismatches(part, part_seed)
    assert n_bad == 0, f"the CPU reads {n_bad} words that differ after the fallback to host, first at 0x{first:x}"

    part.close()                                    # the block's state on GPU1 (its leftover chunk) is destroyed
    st2 = _settled_stats(node, owner, also=(holder,))
    print(f"partial-move: after the block was freed: held_bytes {st2.pair(owner, holder)['held_bytes'] >> 20} MiB, "
          f"lent_bytes of {lender.name} {st2.gpus[holder].scalar('lent_bytes') >> 20} MiB")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert st2.pair(owner, holder)["held_bytes"] == held0, \
        f"held_bytes {held0} -> {st2.pair(owner, holder)['held_bytes']}: the failed move's chunk was uncounted"
    assert st2.gpus[holder].scalar("lent_bytes") == st0.gpus[holder].scalar("lent_bytes")
    assert s.uvm.va_residency_info(keep.base).resident_on == (lender.uuid,), "the first block left GPU1"
    n_bad, first = sglib.gpu_mismatches(s, g0.index, keep, keep_seed)
    assert n_bad == 0, f"GPU0 reads {n_bad} words of the harvested block that differ, first at 0x{first:x}"


# ---- fetch-back (defect 12: every fetch visible, with nvidia-uvm's GPU ids) --------------------------------------

def _block_on(s: sglib.Session, base: int, size: int, gpu: Any, skip: tuple[int, ...] = ()) -> int:
    """Offset of the first 2 MiB block of [base, base + size) entirely on gpu (first and last page)."""
    for off in range(0, size, CHUNK):
        if off in skip:
            continue
        if all(s.uvm.va_residency_info(base + off + p).resident_on == (gpu.uuid,) for p in (0, CHUNK - sglib.PAGE)):
            return off
    raise AssertionError(f"no block of the region is on {gpu.name}")


def _fetched(events: list[sglib.HuvmEvent], lo: int, hi: int, reason: int) -> list[sglib.HuvmEvent]:
    return [e for e in events if e.name == "fetch" and e.reason == reason and lo <= e.va < hi]


@_scenario("fetch-back")
def test_fetch_back(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """The evict-to-peer workload, then harvested data comes back to GPU0: 64 KiB of one block migrated (a
    partial fetch-back: the peer keeps the chunk), then another block read by GPU0's SMs (a fault: the whole
    block comes back and the chunk leaves the peer). Then, under
    stock, a block on the host is migrated to GPU0 (a host fetch). Every copy is a huvm:huvm_fetch event
    (reason pages, then released) whose bytes equal the pages UVM moved and the counters' bytes; the events
    name GPUs by huvm index and by nvidia-uvm's processor id; bcc (huvm-top's tracepoint source) counts the
    same events as the ftrace instance."""
    from huvm import abi
    from huvm_top.sources.bcc import BccSource

    lib = abi.lib
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0", "prefetch_mode=off", "fetch_mode=migrate"])
    assert policy.preevict_chunks == 0 and policy.gpus[owner].role_name != "none"

    seed = 0xFE7C4
    r, size, _ = _oversubscribe(s, managed, g0, seed)
    _settled_stats(node, owner)
    counts, _ = sglib.blocks_by_place(s, r.base, size)
    peer = next((g for g in s.gpus[1:] if counts.get(f"GPU{g.index}", 0) >= 2), None)
    assert peer is not None, f"no peer holds two blocks: {counts}"
    holder = slot[peer.index]
    a = _block_on(s, r.base, size, peer)
    b = _block_on(s, r.base, size, peer, skip=(a,))

    bcc = BccSource("tracepoint")
    bcc.start()
    try:
        with sglib.TraceRecorder() as rec:
            st0 = node.stats()
            # partial: 64 KiB of block a to GPU0 (UVM_MIGRATE, as cudaMemPrefetchAsync of part of a buffer; a
            # fault would fetch the whole block: uvm_huvm_prefetch_whole_block())
            r.migrate(g0, a, 64 * 1024)
            st1 = _settled_stats(node, owner)
            pages_a = sglib.resident_pages(s, r.base + a, CHUNK)
            ev1 = rec.events()
            # whole: all of block b
            s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(r.base + b, CHUNK, seed=seed)],
                           check=True, timeout_ms=60_000)
            st2 = _settled_stats(node, owner)
            pages_b = sglib.resident_pages(s, r.base + b, CHUNK)
            # host fetch, under stock: a block brought to the CPU, then migrated to GPU0 as one 2 MiB run
            node.apply_preset("stock")
            r.migrate("cpu", b, CHUNK)
            st3 = node.stats()
            pages_b_cpu = sglib.resident_pages(s, r.base + b, CHUNK)
            r.migrate(g0, b, CHUNK)
            st4 = _settled_stats(node, owner)
            print(f"fetch-back: block b on the CPU {pages_b_cpu}, then {sglib.resident_pages(s, r.base + b, CHUNK)}; "
                  f"fetch_from_host +{st4.delta(st3).gpus[owner]['fetch_from_host']} bytes_from_host "
                  f"+{st4.delta(st3).gpus[owner]['bytes_from_host']}")
            ev = rec.events()
            lost = rec.lost()
        logged: list[Any] = []
        for _ in range(40):
            batch = bcc.poll(50)
            logged.extend(batch)
            if not batch and len(logged) >= len(ev):
                break
        bcc_counts = bcc.counts()
    finally:
        bcc.close()

    print(f"fetch-back: peer {peer.name} (slot {holder}), blocks +{a >> 20} MiB (partial) and +{b >> 20} MiB "
          f"(whole); block a pages {pages_a}; block b pages {pages_b}; {len(ev)} events, {lost} lost")
    assert lost == 0, f"the trace buffer dropped {lost} events"
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])

    # partial fetch-back: the pages now on GPU0 came from the peer, as events and as counters
    on_g0 = pages_a.get(f"GPU{g0.index}", 0)
    assert 0 < on_g0 < CHUNK // sglib.PAGE and pages_a.get(f"GPU{peer.index}", 0) > 0, \
        f"block a is not split between {g0.name} and {peer.name}: {pages_a}"
    # the pages that came back hold what GPU0's SMs wrote before the eviction (GPU0 reads them, no fault)
    n_bad, first_bad = sglib.gpu_mismatches(s, g0.index, r, seed, a, 64 * 1024)
    assert n_bad == 0, f"GPU0 reads {n_bad} words that differ in the partly fetched block, first at 0x{first_bad:x}"
    part = _fetched(ev1, r.base + a, r.base + a + CHUNK, lib.HUVM_FETCHED_PAGES)
    assert part and all(e.gpu == owner and e.peer == holder for e in part), \
        f"no partial fetch-back event for block a (0x{r.base + a:x}); events: {ev1}"
    assert sum(e.bytes for e in part) == on_g0 * sglib.PAGE, \
        f"fetch events carry {sum(e.bytes for e in part)} bytes but {on_g0} pages came back"
    assert not _fetched(ev1, r.base + a, r.base + a + CHUNK, lib.HUVM_FETCHED_RELEASED), "released too early"
    d1 = st1.delta(st0)
    assert d1.gpus[owner]["fetch_from_peer"] == 0, "a partial fetch-back counted a chunk"
    assert st1.pair(owner, holder)["fetch_chunks"] == st0.pair(owner, holder)["fetch_chunks"]
    from_peer_1 = sum(e.bytes for e in ev1 if e.name == "fetch" and e.reason == lib.HUVM_FETCHED_PAGES
                      and e.gpu == owner and e.peer != lib.HUVM_DEST_HOST)
    assert d1.gpus[owner]["bytes_from_peer"] - _evicted_in(ev1, owner, into=True) == from_peer_1, \
        f"bytes_from_peer +{d1.gpus[owner]['bytes_from_peer']} vs fetch events {from_peer_1}"

    # whole block: its pages (bytes), then the chunk released (one chunk, gauges)
    assert pages_b == {f"GPU{g0.index}": CHUNK // sglib.PAGE}, f"block b not all on {g0.name}: {pages_b}"
    ev2 = ev[len(ev1):]
    whole = _fetched(ev2, r.base + b, r.base + b + CHUNK, lib.HUVM_FETCHED_PAGES)
    released = _fetched(ev2, r.base + b, r.base + b + CHUNK, lib.HUVM_FETCHED_RELEASED)
    assert sum(e.bytes for e in whole if e.peer == holder) == CHUNK, whole
    assert len(released) == 1 and released[0].bytes == CHUNK and released[0].peer == holder, released
    d2 = st2.delta(st1)

    def pair_change(name: str) -> int:
        return int(st2.pair(owner, holder)[name] - st1.pair(owner, holder)[name])

    assert pair_change("fetch_chunks") == 1 and d2.gpus[owner]["fetch_from_peer"] == 1, \
        f"fetch_from_peer +{d2.gpus[owner]['fetch_from_peer']}"
    assert pair_change("held_bytes") == (pair_change("evict_chunks") - 1) * CHUNK, \
        f"held_bytes {pair_change('held_bytes'):+} with {pair_change('evict_chunks')} evictions and one release"

    # host fetch: one 2 MiB run from the CPU (uvm_peer 0), one chunk and its bytes
    ev4 = [e for e in ev if e.name == "fetch" and e.peer == lib.HUVM_DEST_HOST and e.va == r.base + b]
    assert ev4 and ev4[-1].bytes == CHUNK and ev4[-1].reason == lib.HUVM_FETCHED_PAGES, \
        f"no host fetch of block b (0x{r.base + b:x}); events after the whole fetch-back: {ev[len(ev1):]}"
    d4 = st4.delta(st3)
    assert d4.gpus[owner]["fetch_from_host"] == 1 and d4.gpus[owner]["bytes_from_host"] == CHUNK, \
        f"fetch_from_host +{d4.gpus[owner]['fetch_from_host']} bytes_from_host +{d4.gpus[owner]['bytes_from_host']}"

    # nvidia-uvm's ids: the CPU is 0; sglib.open_session registered the GPUs in index order, so UVM numbered
    # them in that order (its log says "GPU ID 1: ... (softgpu 0)"; on 580 GPU ids step by 8)
    uvm_id = {g.index: sglib.uvm_gpu_id(g.index) for g in s.gpus}
    for e in ev:
        if e.name == "policy":
            continue
        assert e.uvm_gpu == uvm_id[next(i for i, sl in slot.items() if sl == e.gpu)], e
        want_peer = 0 if e.peer == lib.HUVM_DEST_HOST else uvm_id[next(i for i, sl in slot.items() if sl == e.peer)]
        assert e.uvm_peer == want_peer, e

    # bcc saw what ftrace saw
    names = {e.name for e in ev}
    ftrace_counts = {n: sum(1 for e in ev if e.name == n) for n in names}
    assert {n: bcc_counts.get(n, 0) for n in names} == ftrace_counts, f"bcc {bcc_counts} vs ftrace {ftrace_counts}"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after the fetch-backs, first at 0x{first:x}"


def _evicted_in(events: list[sglib.HuvmEvent], gpu: int, *, into: bool) -> int:
    """Bytes of evictions (and pre-evictions) into GPU gpu (into) as peer."""
    return sum(e.bytes for e in events if e.name in ("evict", "preevict") and into and e.peer == gpu)


# ---- preevict: the reserve is kept ahead of demand ------------------------------------------------------------

@_scenario("preevict")
@pytest.mark.parametrize("flags", ["none", "huvm"])
def test_preevict(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg, flags: str) -> None:
    """The ``huvm`` preset with a pre-eviction reserve of 8 chunks on GPU0; the evict-to-peer workload makes
    GPU0 evict (memory pressure), and the pre-eviction worker moves GPU0's least recently used blocks to the
    peers in the background. Checked: pre-evictions were counted, every block on a peer was counted once
    (evictions plus pre-evictions), none went to the host, data intact.

    The reserve kept is the core's pre-eviction target, ``min(preevict_chunks, memory / 16)`` chunks
    (``preevict_count()``'s adaptive bound: never more than 1/16 of the GPU kept free). With GPU0's policy flags
    ``none`` the reserve is restored whenever GPU0's free memory falls below it (an allocation that did not
    have to evict wakes the worker too: ``uvm_huvm_note_alloc()``): once things settle GPU0 has at least the
    target free. With the ``huvm`` preset's flags (``preevict-on-pressure``: only within the pressure window
    after an evicting allocation, at most 4x the last fault batch's allocations) GPU0's free memory is
    reported (perf preevict_free_mib), not asserted: by design it depends on the timing of the last evicting
    allocation."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    reserve = 8
    node.apply_preset("huvm")
    settings = [f"preevict_chunks={reserve}"] + ([f"gpu.{owner}.flags=none"] if flags == "none" else [])
    _, policy = node.set(settings)
    assert policy.preevict_chunks == reserve
    assert (policy.gpus[owner].flags == 0) == (flags == "none"), policy.gpus[owner]
    memory = int(node.info().gpus[owner].memory_bytes)
    target = min(reserve, memory // CHUNK // 16) * CHUNK

    st0 = _settled_stats(node, owner)
    seed = 0x9_E7E
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    st1 = _settled_stats(node, owner)
    free = _huvm_free(node, owner)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    d = st1.delta(st0)
    g = d.gpus[owner]
    on_peers = sum(counts.get(f"GPU{p.index}", 0) for p in s.gpus[1:])
    print(f"preevict[flags {flags}]: {blocks} blocks, residency {counts}; evict_to_peer +{g['evict_to_peer']} "
          f"(of which pre-evictions +{g['preevict_to_peer']}), to host +{g['evict_to_host']}; free on {g0.name} "
          f"{free >> 20} MiB (reserve {reserve * CHUNK >> 20} MiB, target {target >> 20} MiB of "
          f"{memory >> 20} MiB)")
    sglib.perf(f"preevict_free_mib_{flags}", free >> 20, "MiB", reserve_mib=reserve * CHUNK >> 20,
               target_mib=target >> 20, preevicted=g["preevict_to_peer"], evicted=g["evict_to_peer"])

    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert g["preevict_to_peer"] > 0, f"no pre-eviction under pressure with a reserve of {reserve} chunks"
    assert g["evict_to_host"] == 0, f"{g['evict_to_host']} evictions to host"
    assert g["evict_to_peer"] == on_peers, f"evict_to_peer +{g['evict_to_peer']} but {on_peers} blocks on peers"
    if flags == "none":
        assert free >= target, f"{free >> 20} MiB free on {g0.name}, the reserve kept is {target >> 20} MiB"
    # data written by GPU0's SMs before the (pre-)evictions: GPU0 reads two blocks held by peers back, then the
    # CPU reads everything
    names = {p.uuid for p in s.gpus[1:]}
    held_offs = [off for off in range(0, size, CHUNK)
                 if len(where := s.uvm.va_residency_info(r.base + off).resident_on) == 1 and where[0] in names][:2]
    for off in held_offs:
        n_bad, first = sglib.gpu_mismatches(s, g0.index, r, seed, off, CHUNK)
        assert n_bad == 0, f"GPU0 reads {n_bad} words that differ in the block at +{off >> 20} MiB it fetched " \
            f"back, first at 0x{first:x}"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after pre-eviction, first at 0x{first:x}"


# ---- two-stage prefetch: a fault brings the window's peer-held blocks back --------------------------------------

@_scenario("two-stage-prefetch")
def test_two_stage_prefetch(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """The ``huvm`` preset (prefetch two-stage: host-resident blocks of the window go to a peer, peer-held ones
    come back to the faulting GPU), pre-eviction off. GPU0's data is evicted to the peers, then 16 MiB of GPU0
    is freed (the region's tail unmapped), then GPU0's SMs read one block held by a peer: the fault fetches it back and the prefetch
    worker brings blocks of the window after it (every ``prefetch_stride``-th block) back from the peers
    without any access to them, as far as GPU0's free memory goes and without evicting: each such block is a
    huvm:huvm_fetch (pages, then released) and ends wholly on GPU0; nothing went to the host; data intact."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0"])
    assert policy.prefetch_mode == sglib.abi_lib().HUVM_PREFETCH_TWO_STAGE, policy.prefetch_mode
    stride, window = policy.prefetch_stride, policy.prefetch_chunks

    room = 8
    seed = 0x2_57A6E
    r, size, blocks = _oversubscribe(s, managed, g0, seed)
    _settled_stats(node, owner)
    names = {g.uuid: f"GPU{g.index}" for g in s.gpus}

    def place(off: int) -> str:
        where = s.uvm.va_residency_info(r.base + off).resident_on
        return "+".join(names.get(u, "cpu") for u in where) or "nowhere"

    # the first block held by a peer whose window holds peer-held blocks too
    start = next(off for off in range(0, size - CHUNK * stride * window, CHUNK)
                 if place(off) not in ("GPU0", "cpu") and place(off + stride * CHUNK) not in ("GPU0", "cpu"))
    before = {k: place(start + k * stride * CHUNK) for k in range(1, window + 1)}
    # the region's last 16 MiB (on GPU0: brought last) unmapped: their chunks are free on GPU0 now
    tail = size - room * CHUNK
    assert all(place(off) == "GPU0" for off in range(tail, size, CHUNK)), "the region's tail is not on GPU0"
    assert start + window * stride * CHUNK <= tail
    _munmap(r.base + tail, room * CHUNK)
    with sglib.TraceRecorder() as rec:
        st0 = node.stats()
        s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(r.base + start, 4096, seed=seed)],
                       check=True, timeout_ms=60_000)
        st1 = _settled_stats(node, owner)
        time.sleep(1.0)
        ev = rec.events()
    after = {k: place(start + k * stride * CHUNK) for k in before}
    came_back = [k for k in before if before[k] not in ("GPU0", "cpu") and after[k] == "GPU0"]
    d = st1.delta(st0)
    print(f"two-stage-prefetch: fault at +{start >> 20} MiB; window (stride {stride}) before {before}, after "
          f"{after}; came back without an access: {came_back}; fetch_from_peer +{d.gpus[owner]['fetch_from_peer']}")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert place(start) == "GPU0", f"the faulted block is on {place(start)}"
    assert came_back, f"no block of the window came back from a peer: before {before}, after {after}"
    assert len(came_back) < room, f"{len(came_back)} blocks came back into {room} free chunks"
    for k in came_back:
        va = r.base + start + k * stride * CHUNK
        rel = [e for e in ev
               if e.name == "fetch" and e.va == va and e.reason == sglib.abi_lib().HUVM_FETCHED_RELEASED]
        assert len(rel) == 1, f"block +{(va - r.base) >> 20} MiB came back without one release event: {rel}"
    # the blocks that came back hold what GPU0's SMs wrote before they left (GPU0 reads them where they are now)
    for k in [0, *came_back]:
        off = start + k * stride * CHUNK
        n_bad, first = sglib.gpu_mismatches(s, g0.index, r, seed, off, CHUNK)
        assert n_bad == 0, f"GPU0 reads {n_bad} words that differ in the block at +{off >> 20} MiB the prefetch " \
            f"brought back, first at 0x{first:x}"
    assert d.gpus[owner]["fetch_from_peer"] >= 1 + len(came_back)
    assert d.gpus[owner]["evict_to_host"] == 0, "the prefetch evicted to host"
    n_bad, first = sglib.pattern_mismatches(r, seed, 0, tail)
    assert n_bad == 0, f"{n_bad} words differ after the two-stage prefetch, first at 0x{first:x}"


# ---- prefetch-pressure: the prefetcher puts data on a peer only under memory pressure ----------------------------

def _settled_prefetch(node: Any, owner: int, seconds: float = 30.0) -> Any:
    """GET_STATS once owner's prefetch counters have stopped moving for a second (the prefetcher is a worker)."""
    def key(st: Any) -> tuple[int, ...]:
        g = st.gpus[owner]
        return (g.scalar("prefetch_local"), g.scalar("prefetch_to_peer"), g.scalar("fetch_from_peer"))

    return _settled(node, key, seconds)


def _block_places(s: sglib.Session, r: Any, first: int, n: int) -> list[str]:
    """Where blocks first..first+n-1 of region r are resident ("GPU0", "GPU1+cpu", "cpu", "nowhere")."""
    names = {g.uuid: f"GPU{g.index}" for g in s.gpus}
    return ["+".join(names.get(u, "cpu") for u in s.uvm.va_residency_info(r.base + k * CHUNK).resident_on)
            or "nowhere" for k in range(first, first + n)]


def _prefetch_policy(node: Any, owner: int, mode: str, window: int, flags: str) -> Any:
    """The huvm preset with pre-eviction off and prefetch mode/window (stride 1); GPU owner's flags."""
    node.apply_preset("huvm")
    _, policy = node.set(["preevict_chunks=0", f"prefetch_mode={mode}", f"prefetch_chunks={window}",
                          "prefetch_stride=1", f"gpu.{owner}.flags={flags}"])
    assert policy.prefetch_chunks == window and policy.preevict_chunks == 0, policy
    return policy


@_scenario("prefetch-pressure")
def test_prefetch_pressure(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """The ``huvm`` preset with ``MULTIPATH`` prefetch (a window of 4 blocks after each fault, split between
    host -> GPU0 and host -> a peer), pre-eviction off, GPU0's flags none (no feedback probe).

    1. No pressure: GPU0 has room; its SMs read the first block of a host-resident region. The window's blocks
       are prefetched to GPU0 only: ``prefetch_to_peer`` does not move and no block of the region is on a peer
       (issue 12 defect 3: before the core's gate, half of every prefetch went to a peer).
    2. Pressure: GPU0 is filled past its memory (the evict-to-peer workload, its last allocations evict), then
       its SMs read a block of a second host-resident region: that fault has to evict, so the GPU is under
       pressure, and the window's host blocks go to a peer (``prefetch_to_peer`` moves, the blocks are on
       peers); nothing to host, data intact in both regions."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    window = 4
    policy = _prefetch_policy(node, owner, "multipath", window, "none")
    assert policy.prefetch_mode == sglib.abi_lib().HUVM_PREFETCH_MULTIPATH and policy.gpus[owner].flags == 0

    # 1. no pressure: room on GPU0
    time.sleep(0.5)     # well past the pressure window of any earlier scenario (200 ms)
    seed_a = 0x9F_A
    a = managed((window + 4) * CHUNK)
    sglib.fill_pattern(a, seed_a)
    free_a = _huvm_free(node, owner)
    assert free_a >= (window + 2) * CHUNK, f"GPU0 has only {free_a >> 20} MiB free: not a run without pressure"
    st0 = node.stats()
    s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(a.base, 4096, seed=seed_a)],
                   check=True, timeout_ms=60_000)
    st1 = _settled_prefetch(node, owner)
    d1 = st1.delta(st0).gpus[owner]
    where_a = _block_places(s, a, 0, window + 1)
    print(f"prefetch-pressure[room]: {free_a >> 20} MiB free; window {where_a}; prefetch_local "
          f"+{d1['prefetch_local']}, prefetch_to_peer +{d1['prefetch_to_peer']}")
    assert where_a[0] == "GPU0", f"the faulted block is on {where_a[0]}"
    assert d1["prefetch_to_peer"] == 0, f"{d1['prefetch_to_peer']} chunks prefetched to a peer with room on GPU0"
    assert not any(p.startswith("GPU") and p != "GPU0" for p in where_a), f"blocks on a peer: {where_a}"
    assert d1["prefetch_local"] >= 1, f"nothing prefetched to GPU0 with {free_a >> 20} MiB free: {where_a}"

    # 2. pressure: GPU0 full, the fault must evict
    seed_f = 0x9F_F
    full, _, _ = _oversubscribe(s, managed, g0, seed_f)
    _settled_stats(node, owner)
    seed_b = 0x9F_B
    b = managed((window + 4) * CHUNK)
    sglib.fill_pattern(b, seed_b)
    free_b = _huvm_free(node, owner)
    st2 = node.stats()
    s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(b.base, 4096, seed=seed_b)],
                   check=True, timeout_ms=60_000)
    st3 = _settled_prefetch(node, owner)
    d3 = st3.delta(st2).gpus[owner]
    where_b = _block_places(s, b, 0, window + 1)
    print(f"prefetch-pressure[full]: {free_b >> 20} MiB free before the fault; window {where_b}; evict_to_peer "
          f"+{d3['evict_to_peer']}, prefetch_local +{d3['prefetch_local']}, prefetch_to_peer "
          f"+{d3['prefetch_to_peer']}")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert where_b[0] == "GPU0", f"the faulted block is on {where_b[0]}"
    assert d3["evict_to_peer"] >= 1, "the fault on a full GPU0 did not evict: no pressure"
    assert d3["prefetch_to_peer"] >= 1, f"no prefetch to a peer under pressure: window {where_b}"
    on_peer = [p for p in where_b[1:] if p.startswith("GPU") and p != "GPU0"]
    assert len(on_peer) >= d3["prefetch_to_peer"], f"prefetch_to_peer +{d3['prefetch_to_peer']}, window {where_b}"
    assert d3["evict_to_host"] == 0, f"{d3['evict_to_host']} evictions to host"
    for r, seed in ((a, seed_a), (b, seed_b), (full, seed_f)):
        n_bad, first = sglib.pattern_mismatches(r, seed)
        assert n_bad == 0, f"{n_bad} words differ, first at 0x{first:x}"


# ---- prefetch-feedback: unused prefetches shrink the window, used ones restore it -------------------------------

@_scenario("prefetch-feedback")
def test_prefetch_feedback(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: sglib.Kmsg) -> None:
    """The ``huvm`` preset with ``LOCAL`` prefetch (4 blocks after each fault, host -> GPU0, room on GPU0) and
    GPU0's flags ``prefetch-feedback`` only. The kernel keeps the core's feedback facts: a block huvm prefetched
    for GPU0 is *used* when GPU0 faults on it (it is resident but not mapped yet) and *unused* when it is
    evicted or freed first.

    1. A fault on a host region's first block prefetches the 4 next; the region is freed: 4 unused.
    2. A fault on a second region's first block now prefetches 1 block (the probe: more unused than used).
    3. GPU0 then reads the probed blocks one after another: each read is a use; once the uses have caught up
       with the unused (4 and 4), a fault prefetches the whole window again. Data intact."""
    s, node = session, huvm_node
    g0 = s.gpus[0]
    slot = _slots(node, s)
    owner = slot[g0.index]
    window = 4
    policy = _prefetch_policy(node, owner, "local", window, "prefetch-feedback")
    assert policy.gpus[owner].flags == sglib.abi_lib().HUVM_GPU_POLICY_PREFETCH_FEEDBACK

    def read(r: Any, k: int, seed: int) -> int:
        """GPU0 reads block k of r; returns the chunks prefetched for GPU0 because of it."""
        st0 = node.stats()
        s.sg.sm_access(s.channels[g0.index], [sglib.softgpu.Access.read(r.base + k * CHUNK, 4096, seed=seed)],
                       check=True, timeout_ms=60_000)
        st1 = _settled_prefetch(node, owner)
        return int(st1.delta(st0).gpus[owner]["prefetch_local"])

    free0 = _huvm_free(node, owner)
    assert free0 >= 24 * CHUNK, f"GPU0 has only {free0 >> 20} MiB free"
    # 1. a full window, never touched, then freed
    seed_a, seed_b = 0xFEED_A, 0xFEED_B
    a = managed(12 * CHUNK)
    sglib.fill_pattern(a, seed_a)
    first = read(a, 0, seed_a)
    where_a = _block_places(s, a, 0, window + 2)
    a.close()
    # 2. the probe
    b = managed(16 * CHUNK)
    sglib.fill_pattern(b, seed_b)
    probe = read(b, 0, seed_b)
    where_b = _block_places(s, b, 0, window + 2)
    # 3. uses restore the window
    after = [read(b, k, seed_b) for k in range(1, window + 1)]
    print(f"prefetch-feedback: first fault prefetched {first} ({where_a}); after {first} unused, a fault "
          f"prefetched {probe} ({where_b}); reading the probed blocks 1..{window}: prefetched {after}")
    bad_log = sglib.bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
    assert first == window and where_a[1:window + 1] == ["GPU0"] * window, (first, where_a)
    assert probe == 1 and where_b[1] == "GPU0" and where_b[2] == "cpu", \
        f"after {window} unused prefetches a fault prefetched {probe} blocks: {where_b}"
    assert after[:window - 1] == [1] * (window - 1), f"the probe grew before the uses caught up: {after}"
    assert after[window - 1] == window, f"the window did not come back after {window} uses: {after}"
    n_bad, first_bad = sglib.pattern_mismatches(b, seed_b)
    assert n_bad == 0, f"{n_bad} words differ, first at 0x{first_bad:x}"
