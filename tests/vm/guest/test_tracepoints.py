"""The huvm tracepoints in a real kernel: their format matches driver/core/huvm_events.h, and bcc attached
to them (TRACEPOINT_PROBE(huvm, ...)) counts exactly what the module's counters say after TEST_EVENT traffic."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import guestlib
import pytest
from huvm import abi

lib = abi.lib
ffi = abi.ffi
TRACEFS = Path("/sys/kernel/tracing")
EVENTS_H = Path(os.environ.get("HUVM_ROOT", ".")) / "driver/core/huvm_events.h"
HOST = lib.HUVM_DEST_HOST


def core_events() -> list[str]:
    """The X(name) list of HUVM_EVENTS in huvm_events.h, in order."""
    text = EVENTS_H.read_text()
    block = text[text.index("#define HUVM_EVENTS(X)"):]
    block = block[: block.index("\n\n")]
    return re.findall(r"X\((\w+)\)", block)


def require_contract_names() -> None:
    """The kernel's tracepoints must be huvm:huvm_<name> for every name of huvm_events.h (as the simulator's
    USDT probes are), so that one bcc/bpftrace script works on both."""
    names = ["huvm_" + n for n in core_events()]
    have = sorted(p.name for p in (TRACEFS / "events/huvm").iterdir() if p.is_dir())
    assert have == sorted(names), (
        f"kernel tracepoints are huvm:{{{','.join(have)}}} but driver/core/huvm_events.h (the contract, and the "
        f"simulator's USDT probes) says huvm:{{{','.join(sorted(names))}}}: driver/uvm/uvm_huvm_trace.h must "
        f"DEFINE_EVENT(huvm_event_class, huvm_<name>, ...)")


def test_tracepoint_formats_match_the_event_list() -> None:
    names = core_events()
    assert names == ["evict", "preevict", "fetch", "giveback", "prefetch", "policy"]
    require_contract_names()
    for name in names:
        fmt = (TRACEFS / "events/huvm" / f"huvm_{name}" / "format").read_text()
        fields = re.findall(r"field:(\w+) (\w+);", fmt)
        own = [(t, n) for t, n in fields if not n.startswith("common_")]
        assert own == [("u32", "gpu"), ("u32", "peer"), ("u32", "reason"), ("u64", "bytes"), ("u64", "va"),
                       ("u32", "uvm_gpu"), ("u32", "uvm_peer")], name


def test_tracefs_sees_every_eviction(node: Any) -> None:
    """Without bcc: the ftrace ring buffer gets one huvm:huvm_evict line per evicted chunk, with nvidia-uvm's
    processor ids beside huvm's GPU indices. A synthetic GPU is no processor of nvidia-uvm's: its uvm id is 0, the
    id nvidia-uvm gives the CPU (uvm_huvm_trace_uvm_id reads the slot's registered GPU; the host is 0 too)."""
    require_contract_names()
    inst = TRACEFS / "instances/huvm_guest"
    inst.mkdir(exist_ok=True)
    try:
        (inst / "events/huvm/huvm_evict/enable").write_text("1")
        r = guestlib.event(node, lib.HUVM_TEST_EVENT_EVICT, 0, 7, va=0x100000000)
        (inst / "events/huvm/huvm_evict/enable").write_text("0")
        lines = [ln for ln in (inst / "trace").read_text().splitlines() if " huvm_evict: " in ln]
        assert len(lines) == r.done == 7
        assert "gpu=0 " in lines[0] and "bytes=2097152 " in lines[0] and "va=0x100000000" in lines[0]
        assert "uvm_gpu=0 " in lines[0] and "uvm_peer=0" in lines[0]
    finally:
        inst.rmdir()


EV = ["evict", "preevict", "fetch", "giveback", "prefetch", "policy"]
# bcc refuses map calls inside C macros, so the six probes are generated here.
BPF_TEXT = """
struct key_t { u32 ev; u32 gpu; u32 peer; u32 reason; };
BPF_HASH(counts, struct key_t, u64, 4096);
BPF_HASH(bytes, struct key_t, u64, 4096);
""" + "".join(f"""
TRACEPOINT_PROBE(huvm, huvm_{name}) {{
    struct key_t k = {{}};
    k.ev = {i}; k.gpu = args->gpu; k.peer = args->peer; k.reason = args->reason;
    counts.increment(k);
    bytes.increment(k, args->bytes);
    return 0;
}}
""" for i, name in enumerate(EV))


def traffic(node: Any) -> dict[str, int]:
    """A mixed workload on the synthetic node; returns the chunks TEST_EVENT reported per event kind."""
    done: Counter[str] = Counter()

    def ev(kind: int, gpu: int, count: int, flags: int = 0) -> None:
        r = guestlib.event(node, kind, gpu, count, flags=flags, va=0x7F0000000000 + gpu * (1 << 32))
        done[{lib.HUVM_TEST_EVENT_EVICT: "evict", lib.HUVM_TEST_EVENT_PREEVICT: "preevict",
              lib.HUVM_TEST_EVENT_FAULT: "fetch", lib.HUVM_TEST_EVENT_GIVEBACK: "giveback",
              lib.HUVM_TEST_EVENT_PREFETCH: "prefetch"}[kind]] += int(r.done)

    ev(lib.HUVM_TEST_EVENT_EVICT, 0, 24)                 # to peers
    ev(lib.HUVM_TEST_EVENT_EVICT, 1, 5, flags=1)         # PMA context: host, reason PMA_CONTEXT
    ev(lib.HUVM_TEST_EVENT_EVICT, 2, 6)
    ev(lib.HUVM_TEST_EVENT_PREEVICT, 3, 16)              # GPU 3 has no free memory: pre-evicts
    ev(lib.HUVM_TEST_EVENT_FAULT, 0, 9)                  # fetch back from peers, then host
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    lender = max(range(guestlib.GPUS), key=lambda g: int(s.gpus[g].lent_bytes))
    ev(lib.HUVM_TEST_EVENT_GIVEBACK, lender, 4)          # the busiest lender gives back what it holds
    ev(lib.HUVM_TEST_EVENT_PREFETCH, 2, 12)
    return dict(done)


def busy_node_policy(node: Any) -> Any:
    """Make GPU 3 of the synthetic node full (so pre-eviction has work) and return SET_POLICY params with an
    8-chunk reserve (batch 8) and 4-chunk multi-path prefetch, for traffic() to fire every event kind."""
    p = guestlib.node_params()
    p.gpus[3].free_bytes = 0
    node.call(lib.HUVM_IOCTL_TEST_SET_NODE, p)
    pol = guestlib.base_policy(node)
    pol.policy.preevict_chunks = 8
    pol.policy.preevict_batch = 8
    pol.policy.prefetch_mode = lib.HUVM_PREFETCH_MULTIPATH
    pol.policy.prefetch_chunks = 4
    pol.policy.prefetch_stride = 1
    return pol


def test_bcc_counts_equal_the_counters(node: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bcc = pytest.importorskip("bcc", reason="python3-bpfcc is not installed")
    require_contract_names()
    pol = busy_node_policy(node)
    b = bcc.BPF(text=BPF_TEXT.encode())
    try:
        node.call(lib.HUVM_IOCTL_SET_POLICY, pol)
        pol.policy.generation = 0
        node.call(lib.HUVM_IOCTL_SET_POLICY, pol)
        gen = int(guestlib.get_policy(node).generation)
        done = traffic(node)
        counts = {(k.ev, k.gpu, k.peer, k.reason): v.value for k, v in b[b"counts"].items()}
        nbytes = {(k.ev, k.gpu, k.peer, k.reason): v.value for k, v in b[b"bytes"].items()}
    finally:
        b.cleanup()
    s = node.call(lib.HUVM_IOCTL_GET_STATS)
    n = guestlib.GPUS

    def ev_sum(ev: int, **match: int) -> int:
        return sum(v for (e, g, pe, r), v in counts.items() if e == ev and
                   all({"gpu": g, "peer": pe, "reason": r}[k] == want for k, want in match.items()))

    def peer_sum(ev: int, gpu: int, peer: int) -> int:
        return ev_sum(ev, gpu=gpu, peer=peer)

    ctr = lambda name: guestlib.counter_sum(s, name)  # noqa: E731
    per_event = {name: ev_sum(i) for i, name in enumerate(EV)}
    with capsys.disabled():
        print("\n    bcc counts (TRACEPOINT_PROBE(huvm, *)) vs module counters:")
        rows = [
            ("evict", per_event["evict"], ctr("evict_to_peer") + ctr("evict_to_host")
             - ctr("preevict_to_peer") - ctr("preevict_to_host")),
            ("preevict", per_event["preevict"], ctr("preevict_to_peer") + ctr("preevict_to_host")),
            ("fetch", per_event["fetch"], ctr("fetch_from_peer") + ctr("fetch_from_host") + ctr("remote_map")),
            ("giveback", per_event["giveback"], ctr("giveback")),
            ("prefetch", per_event["prefetch"], ctr("prefetch_local") + ctr("prefetch_to_peer")),
            ("policy", per_event["policy"], 2),
        ]
        for name, seen, want in rows:
            print(f"      huvm:{name:<9} bcc={seen:<5} counters={want:<5} TEST_EVENT done={done.get(name, '-')}")

    for name, seen, want in rows:
        assert seen == want, name
    # Every chunk TEST_EVENT handled fired exactly one chunk event (a give-back's own chunks are evictions).
    assert sum(per_event[name] for name in EV[:5]) == sum(done.values())
    for name in EV[:5]:
        assert per_event[name] > 0, f"the workload fired no huvm:{name}"
    # Per destination and reason.
    assert ev_sum(0) - ev_sum(0, peer=HOST) + ev_sum(1) - ev_sum(1, peer=HOST) == ctr("evict_to_peer")
    for r in range(lib.HUVM_REASON_COUNT):
        assert ev_sum(0, peer=HOST, reason=r) + ev_sum(1, peer=HOST, reason=r) == sum(
            int(s.gpus[g].host_reason[r]) for g in range(n)), f"host reason {r}"
    assert ev_sum(0, gpu=1, peer=HOST, reason=lib.HUVM_REASON_PMA_CONTEXT) == 5
    # Per GPU pair (owner, holder).
    for o in range(n):
        for h in range(n):
            pr = s.pairs[o][h]
            assert peer_sum(0, o, h) + peer_sum(1, o, h) == pr.evict_chunks, (o, h)
            assert ev_sum(2, gpu=o, peer=h, reason=0) == pr.fetch_chunks, (o, h)
            assert peer_sum(3, h, o) == pr.giveback_chunks, (o, h)
            if o != h:
                assert peer_sum(4, o, h) == pr.prefetch_chunks, (o, h)
    # Bytes: every chunk event carries one 2 MiB chunk; policy events carry the generation.
    for (e, g, pe, r), v in counts.items():
        if e != 5:
            assert nbytes[(e, g, pe, r)] == v * guestlib.CHUNK
    assert sum(v for (e, *_), v in nbytes.items() if e == 5) == (gen - 1) + gen


def test_huvm_top_tracepoint_source_counts_what_the_counters_say(node: Any) -> None:
    """huvm-top's bcc source (huvm_top.sources.bcc, kernel-tracepoint mode) on the real huvm:* tracepoints:
    its in-kernel per-event counts and its event log both match the module's counters."""
    pytest.importorskip("bcc", reason="python3-bpfcc is not installed")
    require_contract_names()
    from huvm_top.sources.bcc import BccSource

    pol = busy_node_policy(node)
    before = node.call(lib.HUVM_IOCTL_GET_STATS)
    src = BccSource("tracepoint")
    src.start()
    try:
        node.call(lib.HUVM_IOCTL_SET_POLICY, pol)
        done = traffic(node)
        logged: Counter[str] = Counter()
        for _ in range(20):
            batch = src.poll(50)
            logged.update(e.name for e in batch)
            if not batch and sum(logged.values()) >= sum(done.values()):
                break
        counts = src.counts()
    finally:
        src.close()
    after = node.call(lib.HUVM_IOCTL_GET_STATS)

    def delta(name: str) -> int:
        return guestlib.counter_sum(after, name) - guestlib.counter_sum(before, name)

    want = {
        "evict": delta("evict_to_peer") + delta("evict_to_host") - delta("preevict_to_peer")
        - delta("preevict_to_host"),
        "preevict": delta("preevict_to_peer") + delta("preevict_to_host"),
        "fetch": delta("fetch_from_peer") + delta("fetch_from_host") + delta("remote_map"),
        "giveback": delta("giveback"),
        "prefetch": delta("prefetch_local") + delta("prefetch_to_peer"),
        "policy": 1,
    }
    assert all(v > 0 for v in want.values()), want
    assert {k: counts[k] for k in want} == want
    assert {k: logged[k] for k in want} == want, "the event log missed records"
