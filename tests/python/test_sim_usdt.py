"""bcc attached to the simulator's USDT probes (provider huvm, fired by the core's huvm_account_*) counts
exactly the events the counters say happened, and reads each event's arguments (gpu, peer, reason, bytes,
va) with the values the counters imply per GPU and per GPU pair. Needs root and bcc (python3-bpfcc)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from conftest import require_or_skip

PROBES = ("evict", "preevict", "fetch", "giveback", "prefetch", "policy")
HOST = 16

CHILD = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
    from huvmlab.sim import run_scenario
    from huvm_testing import usdt_scenario
    node, tenants = usdt_scenario()
    print("ready", flush=True)
    sys.stdin.readline()
    res = run_scenario(node, tenants, "huvm")
    print(json.dumps({{k: res.stats[k] for k in ("gpus", "pairs", "generation")}}), flush=True)
    sys.stdin.readline()
""")

# bcc rewrites bpf_usdt_readarg per probe function, so each handler reads its arguments itself.
BPF_TEXT = """
#include <uapi/linux/ptrace.h>
BPF_ARRAY(counts, u64, 16);
BPF_ARRAY(nbytes, u64, 16);
""" + "".join(f"""
int on_{p}(struct pt_regs *ctx) {{
    u64 peer = 0, b = 0;
    bpf_usdt_readarg(2, ctx, &peer);
    bpf_usdt_readarg(4, ctx, &b);
    int k = {i} * 2 + ((u32)peer == HOST ? 1 : 0);
    u64 *c = counts.lookup(&k);
    if (c) __sync_fetch_and_add(c, 1);
    u64 *n = nbytes.lookup(&k);
    if (n) __sync_fetch_and_add(n, b);
    return 0;
}}
""" for i, p in enumerate(PROBES))


# Every event keyed by all its small arguments; the values are read as the 64-bit operands the probes pass
# (driver/core/huvm_port.h), and one that does not fit in 32 bits is counted as bad.
ARGS_BPF_TEXT = """
#include <uapi/linux/ptrace.h>
struct key_t { u32 probe; u32 gpu; u32 peer; u32 reason; };
BPF_HASH(events, struct key_t, u64, 4096);
BPF_HASH(evbytes, struct key_t, u64, 4096);
BPF_ARRAY(bad, u64, 2);     /* [0]: gpu/peer/reason above 32 bits; [1]: chunk event with a va 0 or unaligned */
""" + "".join(f"""
int on_{p}(struct pt_regs *ctx) {{
    u64 gpu = 0, peer = 0, reason = 0, b = 0, va = 0, zero = 0;
    bpf_usdt_readarg(1, ctx, &gpu);
    bpf_usdt_readarg(2, ctx, &peer);
    bpf_usdt_readarg(3, ctx, &reason);
    bpf_usdt_readarg(4, ctx, &b);
    bpf_usdt_readarg(5, ctx, &va);
    int i = 0;
    if ((gpu | peer | reason) >> 32) {{
        u64 *x = bad.lookup(&i);
        if (x) __sync_fetch_and_add(x, 1);
    }}
    if ({i} != POLICY && (va == 0 || (va & (CHUNK - 1)))) {{
        i = 1;
        u64 *x = bad.lookup(&i);
        if (x) __sync_fetch_and_add(x, 1);
    }}
    struct key_t k = {{}};
    k.probe = {i};
    k.gpu = (u32)gpu;
    k.peer = (u32)peer;
    k.reason = (u32)reason;
    u64 *c = events.lookup_or_try_init(&k, &zero);
    if (c) __sync_fetch_and_add(c, 1);
    u64 *n = evbytes.lookup_or_try_init(&k, &zero);
    if (n) __sync_fetch_and_add(n, b);
    return 0;
}}
""" for i, p in enumerate(PROBES))


def _run_traced(bpf_text: str) -> tuple[Any, dict[str, Any]]:
    """Run CHILD with bpf_text attached to every probe; (the BPF object after the run, the child's stats)."""
    from bcc import BPF, USDT  # type: ignore[import-untyped]

    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        usdt = USDT(pid=child.pid)
        for p in PROBES:
            usdt.enable_probe(probe=f"huvm:huvm_{p}", fn_name=f"on_{p}")
        bpf = BPF(text=bpf_text, usdt_contexts=[usdt])
        child.stdin.write("go\n")
        child.stdin.flush()
        stats: dict[str, Any] = json.loads(child.stdout.readline())
        child.stdin.write("done\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
        try:
            bpf.cleanup()
        except Exception:  # noqa: BLE001 - perf-event uprobes on hosts without tracefs: detach is moot
            pass
        atexit.unregister(bpf.cleanup)   # once is enough (bcc registers it again at exit)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return bpf, stats


def _bcc_available() -> bool:
    try:
        import bcc  # noqa: F401
    except ImportError:
        return False
    return True


def test_usdt_probe_counts_equal_counters() -> None:
    require_or_skip(os.geteuid() == 0, "attaching USDT probes needs root")
    require_or_skip(_bcc_available(), "bcc (python3-bpfcc) is not importable")
    bpf, stats = _run_traced(BPF_TEXT.replace("HOST", str(HOST)))
    gpus = stats["gpus"]
    counts = {int(k.value): int(v.value) for k, v in bpf["counts"].items()}
    nbytes = {int(k.value): int(v.value) for k, v in bpf["nbytes"].items()}

    def ev(name: str, host: bool | None = None) -> int:
        i = PROBES.index(name) * 2
        if host is None:
            return counts.get(i, 0) + counts.get(i + 1, 0)
        return counts.get(i + int(host), 0)

    tot = {k: sum(g[k] for g in gpus) for k in gpus[0] if k != "host_reason"}
    # Per-destination splits: test_usdt_probe_arguments_match_counters.
    assert ev("evict") == (tot["evict_to_peer"] - tot["preevict_to_peer"]) + \
        (tot["evict_to_host"] - tot["preevict_to_host"])
    assert ev("preevict") == tot["preevict_to_peer"] + tot["preevict_to_host"]
    assert ev("fetch") == tot["fetch_from_peer"] + tot["remote_map"] + tot["fetch_from_host"]
    assert ev("giveback") == tot["giveback"]
    assert ev("prefetch") == tot["prefetch_local"] + tot["prefetch_to_peer"]
    assert ev("policy") == 1  # the scenario's one SET_POLICY (roles)
    # Every event moved one 2 MiB chunk.
    chunk = 2 << 20
    for i, p in enumerate(PROBES[:5]):
        assert nbytes.get(2 * i, 0) + nbytes.get(2 * i + 1, 0) == chunk * ev(p)
    # The scenario exercises every kind of movement.
    assert all(ev(p) > 0 for p in PROBES), counts


def test_usdt_probe_arguments_match_counters() -> None:
    """Each event's gpu, peer and reason, read by bcc, split the counters exactly: per GPU, per GPU pair and
    per host reason. (bcc 0.26 read 4-byte register operands as 0; the probes now pass 8-byte ones.)"""
    require_or_skip(os.geteuid() == 0, "attaching USDT probes needs root")
    require_or_skip(_bcc_available(), "bcc (python3-bpfcc) is not importable")
    chunk = 2 << 20
    bpf, stats = _run_traced(ARGS_BPF_TEXT.replace("POLICY", str(PROBES.index("policy")))
                             .replace("CHUNK", str(chunk)))
    gpus, pairs = stats["gpus"], stats["pairs"]
    n = len(gpus)
    events: dict[tuple[str, int, int, int], int] = {}
    nbytes: dict[tuple[str, int, int, int], int] = {}
    for k, v in bpf["events"].items():
        events[(PROBES[k.probe], k.gpu, k.peer, k.reason)] = int(v.value)
    for k, v in bpf["evbytes"].items():
        nbytes[(PROBES[k.probe], k.gpu, k.peer, k.reason)] = int(v.value)
    assert [int(v.value) for _, v in sorted(bpf["bad"].items(), key=lambda kv: int(kv[0].value))] == [0, 0]

    def count(probe: str, gpu: int | None = None, peer: int | None = None, reason: int | None = None) -> int:
        return sum(c for (p, g, q, r), c in events.items()
                   if p == probe and gpu in (None, g) and peer in (None, q) and reason in (None, r))

    # Every argument is in range: GPUs of the node or 16 (host), reasons of their probe.
    for (p, g, q, r), _ in events.items():
        if p == "policy":
            assert (g, q) == (HOST, HOST)
            continue
        assert g < n and (q < n or q == HOST), (p, g, q, r)
    for g in range(n):
        c = gpus[g]
        # evict/preevict: peer != 16 is evict_to_peer, per pair evict_chunks; host per reason.
        assert count("evict", g) + count("preevict", g) - count("evict", g, HOST) - count("preevict", g, HOST) \
            == c["evict_to_peer"]
        assert count("preevict", g) - count("preevict", g, HOST) == c["preevict_to_peer"]
        assert count("evict", g, HOST) + count("preevict", g, HOST) == c["evict_to_host"]
        assert count("preevict", g, HOST) == c["preevict_to_host"]
        for r, v in enumerate(c["host_reason"]):
            assert count("evict", g, HOST, r) + count("preevict", g, HOST, r) == v, (g, r)
        assert count("evict", g, g) == count("preevict", g, g) == 0
        # fetch: reason 1 = remote map, 0 = moved; peer 16 = from host.
        assert count("fetch", g, HOST) == c["fetch_from_host"]
        assert count("fetch", g, reason=1) == c["remote_map"]
        assert count("fetch", g, reason=0) - count("fetch", g, HOST) == c["fetch_from_peer"]
        # giveback: gpu = the lender, reason 9; prefetch: peer = the destination (the GPU itself = local).
        assert count("giveback", g) == count("giveback", g, reason=9) == c["giveback"]
        assert count("prefetch", g, g) == c["prefetch_local"]
        assert count("prefetch", g) - count("prefetch", g, g) == c["prefetch_to_peer"]
        for h in range(n):
            if h == g:
                continue
            pc = pairs[g][h]
            assert count("evict", g, h, 0) + count("preevict", g, h, 0) == pc["evict_chunks"], (g, h)
            assert count("fetch", g, h, 0) == pc["fetch_chunks"], (g, h)
            assert count("prefetch", g, h) == pc["prefetch_chunks"], (g, h)
            assert count("giveback", h, g) == pc["giveback_chunks"], (g, h)   # lender h gave back g's data
            # every chunk event moved 2 MiB
            for p in ("evict", "preevict", "fetch", "prefetch"):
                key_sum = sum(b for (pp, gg, q, _), b in nbytes.items() if (pp, gg, q) == (p, g, h))
                assert key_sum == chunk * count(p, g, h), (p, g, h)
    # The per-GPU sums are the node's totals, and the split is not degenerate: GPU 0 evicts to both peers,
    # GPU 2 gives back GPU 0's data, so gpu/peer values other than 0 were read.
    assert sum(count("evict", g) + count("preevict", g) for g in range(n)) == \
        sum(c["evict_to_peer"] + c["evict_to_host"] for c in gpus)
    assert count("evict", 0, 1) + count("preevict", 0, 1) > 0 and count("evict", 0, 2) + count("preevict", 0, 2) > 0
    assert count("giveback", 2, 0) > 0
    assert count("evict", 0, HOST, 5) + count("preevict", 0, HOST, 5) > 0   # peer_full
    # policy: reason = the preset applied, bytes = its generation.
    [(key, c)] = [(k, c) for k, c in events.items() if k[0] == "policy"]
    assert c == 1 and key[3] in (2, 3)        # huvm, or custom once the roles differ from it
    assert nbytes[key] == stats["generation"]
