"""huvm's peer tier through faults in the middle of its life (issue 12): scenarios on the PATCHED nvidia-uvm only.

Like test_huvm_scenarios.py, each scenario sets the policy through the huvm ioctls (``huvm.open(backend="kernel")``),
drives UVM with its own ioctls and checks that UVM's residency (UVM_TEST_VA_RESIDENCY_INFO), huvm's counters and
gauges and the data (byte for byte, where data survives) agree, that the kernel logged no UVM assert or kernel
report meanwhile (/dev/kmsg), and that nothing leaked: NVIDIA's UVM_TEST_PMM_CHECK_LEAK (how many 2 MiB chunks
each GPU can still allocate, before and after) and, around module unloads, nvidia-uvm's own leak checker
(``uvm_leak_checker=2``, read back through UVM_TEST_REGISTER_UNLOAD_STATE_BUFFER), the objects in each of its
slab caches (the test bed boots with ``slab_nomerge``, so they are its own, and the kernel checks each cache for
objects left when it is destroyed), the software GPU's registrations and PMA, and its teardown warnings.

Scenarios (``scenario <name>: passed|failed`` at the end of the session):

- ``peer-alloc-failure``: the software GPU's ``fail_pma_alloc`` knob makes every PMA allocation of the lenders
  fail (their free root chunks given back to PMA first, so PMM must ask PMA); the 1.5x working set on GPU0
  then evicts to the host only, each eviction counted with host reason ``alloc_failed``; no gauge moves, data
  intact; with the knob off again the next eviction lands on a peer.
- ``peer-unregister``: a second VA space harvests (the evict-to-peer workload), then UVM_UNREGISTER_GPU of
  the lender GPU1 from it while GPU1 holds guest chunks: UVM moves them to the host (a give-back per chunk);
  GPU1's lent_bytes and the pair's held_bytes go to 0, the harvester's harvested_bytes equals the chunks
  still on the other peers; data byte-exact; no PMM leak once the VA space is closed.
- ``sigkill-mid-eviction``: a child process (sgchild.py loop) harvests with every peer copy slowed down and
  is SIGKILLed while GPU0 evicts to the peers; then every gauge is 0, its VA space is gone from
  LIST_VA_SPACES, no PMM leak, and a new process (sgchild.py evict) still harvests.
- ``load-unload-x20``: the phase's nvidia-uvm is unloaded (every session fixture closed first), then 20
  load/unload cycles of nvidia-uvm over the loaded software GPU, each with a small harvest (the huvm preset,
  4 chunks evicted to GPU1, read back, freed): nvidia-uvm's slab caches hold the same objects after every
  cycle's session, its leak checker finds nothing at each unload, the software GPU sees every GPU
  unregistered and all of PMA free after each.
- ``unload-while-harvested``: a child (sgchild.py hold) harvests; its exit closes its files with the chunks on
  the peers, nvidia-uvm is unloaded right after, then the software GPU: no report, nvidia-uvm's caches and
  leak checker clean, all of PMA free, no RM memory left (the software GPU warns at teardown); both are loaded
  again as the phase loads them and a new session harvests. The modules stay loaded for the phase's unload.

- ``slot-reuse``: GPU0 harvests onto GPU1 and leaves UVM with its chunks there; it comes back under new UUIDs
  (the software GPU's ``uuid_gen`` knob) until huvm's 16 slots are all given out: the next new GPU never takes
  the gone GPU's slot while its data is held, the chunks' gauges and their release stay on that slot, and once
  released the slot is reused.

The last three close the session-scoped fixtures (sglib.release_fixtures): they run last (conftest.py's ORDER
and their order here), and no test that needs those fixtures can follow them.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import huvm
import pytest
import sglib
from huvm import abi, metrics, softgpu, uvm
from sglib import KMSG_BAD, Kmsg
from test_huvm_scenarios import _oversubscribe, _scenario, _settled_stats, _slots

# Collected only on the patched variants (conftest.py's collect_ignore).

MIB = sglib.MIB
CHUNK = sglib.CHUNK
UVM_DEVICE = "/dev/nvidia-uvm"
SOFTGPU_DEVICE = softgpu.DEFAULT_DEVICE
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sgchild.py")

#: the modules as tests/vm/guest/run-guest.sh loads them (its softgpu phase)
SOFTGPU_KO = os.environ.get("HUVM_SOFTGPU_KO", "")
UVM_KO = os.environ.get("HUVM_UVM_KO", "")
UVM_PARAMS = ("uvm_enable_builtin_tests=1", "uvm_release_asserts=1")

#: beyond test_huvm_scenarios.KMSG_BAD: what a teardown reports (slab caches destroyed with objects in them,
#: the software GPU's leftovers of RM memory)
LIFECYCLE_BAD = (*KMSG_BAD, "general protection", "refcount_t", "list_add corruption", "list_del corruption",
                 "Slab cache still has objects", "kmem_cache_destroy", "still allocated", "still mapped",
                 "Objects remaining", "kmemleak", "Memory leak", "Leaked ", "not emulated")


def bad_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if any(p in ln for p in LIFECYCLE_BAD)]


def assert_clean_log(kmsg: Kmsg, when: str) -> None:
    bad = bad_lines(kmsg.read())
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports {when}, first: " + " | ".join(bad[:6])


# ---- huvm's gauges and NVIDIA's PMM leak check ---------------------------------------------------------------

def nonzero_gauges(st: Any) -> dict[str, int]:
    """Every huvm gauge of data held for another GPU that is not 0: per slot lent_bytes and harvested_bytes,
    per (owner, holder) pair held_bytes."""
    out = {}
    for i, g in enumerate(st.gpus):
        for name in ("lent_bytes", "harvested_bytes"):
            if g.scalar(name):
                out[f"slot{i}.{name}"] = g.scalar(name)
    for p in st.pairs:
        if p["held_bytes"]:
            out[f"pair({p.owner},{p.holder}).held_bytes"] = p["held_bytes"]
    return out


def gauges_settled_to_zero(node: Any, seconds: float = 30.0) -> tuple[Any, dict[str, int]]:
    """GET_STATS once every gauge is 0 (or after ``seconds``): (snapshot, the gauges still not 0)."""
    deadline = time.monotonic() + seconds
    while True:
        st = node.stats()
        left = nonzero_gauges(st)
        if not left or time.monotonic() > deadline:
            return st, left
        time.sleep(0.5)


def pmm_free_chunks(u: Any, gpus: tuple[softgpu.GpuInfo, ...]) -> dict[int, int]:
    """UVM_TEST_PMM_CHECK_LEAK per GPU: the 2 MiB user chunks PMM can allocate (from its free lists and PMA,
    without evicting), all freed again. Memory a scenario leaked is memory this count no longer finds."""
    return {g.index: int(u.run_test("PMM_CHECK_LEAK", gpu_uuid=g, chunk_size=CHUNK, alloc_limit=-1).allocated)
            for g in gpus}


def assert_no_pmm_leak(u: Any, gpus: tuple[softgpu.GpuInfo, ...], before: dict[int, int], when: str,
                       seconds: float = 15.0) -> dict[int, int]:
    """Every GPU can allocate at least as many 2 MiB chunks as before (given up to ``seconds`` for frees
    that UVM or huvm defer)."""
    deadline = time.monotonic() + seconds
    while True:
        now = pmm_free_chunks(u, gpus)
        short = {i: (before[i], now[i]) for i in before if now[i] < before[i]}
        if not short or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    print(f"{when}: PMM_CHECK_LEAK 2 MiB chunks allocatable per GPU: before {before}, after {now}")
    assert not short, f"{when}: PMM_CHECK_LEAK: GPUs that can allocate fewer 2 MiB chunks (before, after): {short}"
    return now


def own_va_spaces(node: Any, pid: int) -> dict[int, dict[str, int]]:
    return {v.id: v.counters for v in node.va_spaces() if v.pid == pid}


@pytest.fixture
def node(session: sglib.Session) -> Iterator[Any]:
    """The huvm control surface on the phase's module; the preset goes back to stock afterwards (always)."""
    n = huvm.open(backend="kernel", device=UVM_DEVICE)
    try:
        yield n
    finally:
        try:
            n.apply_preset("stock")
        finally:
            n.close()


# ---- child processes (sgchild.py) ----------------------------------------------------------------------------

class Child:
    """``python sgchild.py MODE SEED``: its stdout read line by line with a timeout."""

    def __init__(self, mode: str, seed: int) -> None:
        self.mode = mode
        self.proc = subprocess.Popen([sys.executable, CHILD, mode, hex(seed)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._pending = b""   # read from stdout, not yet returned

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, prefix: str, seconds: float) -> str:
        """The rest of the next line starting with prefix (other lines are skipped)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        while True:
            while b"\n" in self._pending:
                raw, self._pending = self._pending.split(b"\n", 1)
                text = raw.decode(errors="replace")
                if text.startswith(prefix):
                    return text[len(prefix):].strip()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"sgchild {self.mode}: no '{prefix}' line in {seconds:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                raise AssertionError(f"sgchild {self.mode} exited ({self.proc.wait()}) before '{prefix}': "
                                     f"{self.stderr_tail()}")
            self._pending += data

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr (a traceback), once it has exited."""
        if self.proc.poll() is None or self.proc.stderr is None or self.proc.stderr.closed:
            return ""
        return " | ".join(self.proc.stderr.read().decode(errors="replace").strip().splitlines()[-6:])

    def where(self) -> str:
        """What the child is doing now: /proc/PID/syscall (a number when blocked in a system call, 16 being
        ioctl; "running" on a CPU) and its kernel stack (/proc/PID/stack, root only; empty while it runs)."""
        try:
            with open(f"/proc/{self.pid}/syscall") as f:
                call = f.read().split()
            with open(f"/proc/{self.pid}/stack") as f:
                frames = [ln.split("]", 1)[-1].strip().split("+")[0] for ln in f.read().splitlines()]
        except OSError as exc:
            return f"(unknown: {exc.strerror})"
        what = "running" if call[:1] == ["running"] else f"syscall {call[0] if call else '?'}"
        return what + (": " + " < ".join(frames[:8]) if frames else "")

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


# ---- peer-alloc-failure --------------------------------------------------------------------------------------

@_scenario("peer-alloc-failure")
def test_peer_alloc_failure(session: sglib.Session, managed: Any, node: Any, kmsg: Kmsg) -> None:
    s = session
    assert len(s.gpus) >= 2, "peer-alloc-failure needs at least 2 GPUs"
    g0, lenders = s.gpus[0], s.gpus[1:]
    slot = _slots(node, s)
    owner = slot[g0.index]
    reason = int(abi.lib.HUVM_REASON_ALLOC_FAILED)
    _, policy = node.apply_preset("huvm")
    assert policy.preset_name == "huvm"

    before = pmm_free_chunks(s.uvm, s.gpus)
    # PMM allocates from its free root chunks before it asks PMA: give them back, so that every peer chunk
    # allocation reaches PMA (nvUvmInterfacePmaAllocPages), which the knob fails.
    for g in lenders:
        s.uvm.run_test("PMM_RELEASE_FREE_ROOT_CHUNKS", gpu_uuid=g)
    st0 = _settled_stats(node, owner)
    seed = 0xA110C_FA1
    fail_n = 1 << 20
    try:
        for g in lenders:
            s.sg.set_knob("fail_pma_alloc", g, fail_n)
        r, size, blocks = _oversubscribe(s, managed, g0, seed)
        st1 = _settled_stats(node, owner)
    finally:
        for g in lenders:
            s.sg.set_knob("fail_pma_alloc", g, 0)
    counts, odd = sglib.blocks_by_place(s, r.base, size)
    d = st1.delta(st0)
    g = d.gpus[owner]
    host_reasons = {metrics.REASON_NAMES[i]: v for i, v in enumerate(g["host_reason"]) if v}
    print(f"peer-alloc-failure: {blocks} blocks of {g0.name} ({size >> 20} MiB), lenders' PMA allocations "
          f"failing: residency {counts}; {g0.name} evict_to_peer +{g['evict_to_peer']} evict_to_host "
          f"+{g['evict_to_host']} host reasons {host_reasons}; gauges {nonzero_gauges(st1) or 'all 0'}")
    sglib.perf("peer_alloc_failure_to_host", g["host_reason"][reason], "chunks", blocks=blocks,
               on_cpu=counts.get("cpu", 0))

    assert_clean_log(kmsg, "during the failing evictions")
    assert not odd, f"blocks split between processors: {odd[:8]}"
    assert all(counts.get(f"GPU{p.index}", 0) == 0 for p in lenders), f"blocks landed on a lender: {counts}"
    assert counts.get("cpu", 0) > 0, f"nothing was evicted: {counts}"
    assert counts.get("cpu", 0) + counts.get(f"GPU{g0.index}", 0) == blocks, f"residency {counts}"
    assert g["evict_to_peer"] == 0 and g["preevict_to_peer"] == 0, \
        f"evictions to a peer counted: {g['evict_to_peer']} (preevict {g['preevict_to_peer']})"
    assert g["evict_to_host"] == counts.get("cpu", 0), \
        f"evict_to_host +{g['evict_to_host']} but {counts.get('cpu', 0)} blocks on the CPU"
    assert g["host_reason"][reason] == counts.get("cpu", 0), \
        f"host reason alloc_failed +{g['host_reason'][reason]} of {counts.get('cpu', 0)} evictions: {host_reasons}"
    assert not nonzero_gauges(st1), f"gauges moved by failed peer allocations: {nonzero_gauges(st1)}"

    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after the evictions to host, first at 0x{first:x}"
    r.close()

    # The knob is off again: the tier works (one block onto GPU0, evicted by NVIDIA's test path to a peer).
    again = managed(CHUNK)
    sglib.fill_pattern(again, seed ^ 1)
    again.migrate(g0)
    res = s.uvm.evict_chunk(g0, again.base)
    where, _ = sglib.blocks_by_place(s, again.base, CHUNK)
    print(f"peer-alloc-failure: knob off: UVM_TEST_EVICT_CHUNK evicted={res.evicted}, the block is on {where}")
    assert res.evicted and any(where.get(f"GPU{p.index}", 0) == 1 for p in lenders), \
        f"after the failures, an eviction did not land on a peer: {where}"
    n_bad, first = sglib.pattern_mismatches(again, seed ^ 1)
    assert n_bad == 0, f"{n_bad} words differ in the block evicted to a peer, first at 0x{first:x}"
    again.close()
    st2, left = gauges_settled_to_zero(node)
    assert not left, f"gauges not back to 0 once the data left the peers: {left}"
    assert_no_pmm_leak(s.uvm, s.gpus, before, "peer-alloc-failure")
    assert_clean_log(kmsg, "at the end")


# ---- peer-unregister -----------------------------------------------------------------------------------------

@_scenario("peer-unregister")
def test_peer_unregister(sg: softgpu.SoftGpu, session: sglib.Session, node: Any, kmsg: Kmsg) -> None:
    assert len(session.gpus) >= 2, "peer-unregister needs at least 2 GPUs"
    before = pmm_free_chunks(session.uvm, session.gpus)
    own = sglib.open_session(sg, va_spaces=True)
    regions: list[Any] = []

    def alloc(size: int) -> Any:
        r = own.uvm.alloc_managed(size)
        regions.append(r)
        return r

    try:
        g0, g1 = own.gpus[0], own.gpus[1]
        others = own.gpus[2:]
        slot = _slots(node, own)
        owner, holder = slot[g0.index], slot[g1.index]
        _, policy = node.apply_preset("huvm")
        assert policy.preset_name == "huvm"

        vas0 = own_va_spaces(node, os.getpid())
        seed = 0x0_9EE2
        r, size, blocks = _oversubscribe(own, alloc, g0, seed)
        st1 = _settled_stats(node, owner)
        counts1, odd1 = sglib.blocks_by_place(own, r.base, size)
        guest = counts1.get(f"GPU{g1.index}", 0)
        on_others1 = {o.index: counts1.get(f"GPU{o.index}", 0) for o in others}
        moved = {k: v for k, v in own_va_spaces(node, os.getpid()).items() if v != vas0.get(k)}
        print(f"peer-unregister: {blocks} blocks of {g0.name}: residency {counts1}; {g1.name} holds {guest} "
              f"guest chunks: lent_bytes {st1.gpus[holder].scalar('lent_bytes') >> 20} MiB, held_bytes "
              f"{st1.pair(owner, holder)['held_bytes'] >> 20} MiB")
        assert_clean_log(kmsg, "during the harvest")
        assert not odd1, f"blocks split between processors: {odd1[:8]}"
        assert counts1.get("cpu", 0) == 0, f"blocks evicted to the host before the unregister: {counts1}"
        assert guest > 0, f"no block of {g0.name} landed on {g1.name}: {counts1}"
        assert st1.pair(owner, holder)["held_bytes"] == guest * CHUNK
        assert st1.gpus[holder].scalar("lent_bytes") == guest * CHUNK
        assert len(moved) == 1, f"LIST_VA_SPACES: {len(moved)} VA spaces of pid {os.getpid()} moved: {moved}"
        (vas_id,) = moved

        # CUDA's context teardown on GPU1 in that process: UVM_UNREGISTER_GPU (its GPU VA space and channel
        # go with it). UVM moves every page of the VA space resident on GPU1 to the CPU.
        with sglib.timed() as t:
            own.uvm.unregister_gpu(g1)
        own.gone.add(g1.index)
        st2 = _settled_stats(node, owner, also=(holder,))
        counts2, odd2 = sglib.blocks_by_place(own, r.base, size)
        on_others2 = {o.index: counts2.get(f"GPU{o.index}", 0) for o in others}
        d = st2.delta(st1)
        gb_pair = st2.pair(owner, holder)["giveback_chunks"] - st1.pair(owner, holder)["giveback_chunks"]
        vas2 = own_va_spaces(node, os.getpid())[vas_id]
        print(f"peer-unregister: UVM_UNREGISTER_GPU {g1.name} in {t[0]:.2f} s: residency {counts1} -> {counts2}")
        print(f"peer-unregister: {g1.name} lent_bytes {st2.gpus[holder].scalar('lent_bytes') >> 20} MiB, "
              f"giveback +{d.gpus[holder]['giveback']}; pair held_bytes {st2.pair(owner, holder)['held_bytes']} "
              f"giveback_chunks +{gb_pair}; {g0.name} harvested_bytes "
              f"{st2.gpus[owner].scalar('harvested_bytes') >> 20} MiB (VA space {vas2['harvested_bytes'] >> 20} "
              f"MiB), evict_to_host +{d.gpus[owner]['evict_to_host']}")
        sglib.perf("peer_unregister_seconds", t[0], "s", guest_chunks=guest)

        assert_clean_log(kmsg, "during the unregister")
        assert not odd2, f"blocks split between processors after the unregister: {odd2[:8]}"
        assert counts2.get("cpu", 0) == counts1.get("cpu", 0) + guest, \
            f"{guest} chunks of {g1.name} should be on the CPU: {counts1} -> {counts2}"
        assert counts2.get(f"GPU{g0.index}", 0) == counts1.get(f"GPU{g0.index}", 0), \
            f"{g0.name}'s residency changed: {counts1} -> {counts2}"
        assert on_others2 == on_others1, f"the other lenders' chunks moved: {on_others1} -> {on_others2}"
        assert st2.gpus[holder].scalar("lent_bytes") == 0, \
            f"lent_bytes of {g1.name} {st2.gpus[holder].scalar('lent_bytes')} after it left the VA space"
        assert st2.pair(owner, holder)["held_bytes"] == 0, \
            f"held_bytes({g0.name}, {g1.name}) {st2.pair(owner, holder)['held_bytes']} after the unregister"
        assert st2.gpus[owner].scalar("harvested_bytes") == sum(on_others2.values()) * CHUNK, \
            f"harvested_bytes {st2.gpus[owner].scalar('harvested_bytes')} != {on_others2} chunks on other peers"
        assert vas2["harvested_bytes"] == sum(on_others2.values()) * CHUNK, \
            f"VA space harvested_bytes {vas2['harvested_bytes']} != {on_others2} chunks on other peers"
        assert gb_pair == guest and d.gpus[holder]["giveback"] == guest, \
            f"{guest} chunks left {g1.name}: pair giveback_chunks +{gb_pair}, giveback +{d.gpus[holder]['giveback']}"
        assert d.gpus[owner]["evict_to_host"] == 0, "the unregister counted as the harvester's evictions"

        n_bad, first = sglib.pattern_mismatches(r, seed)
        assert n_bad == 0, f"{n_bad} words differ after {g1.name} left the VA space, first at 0x{first:x}"
    finally:
        for reg in regions:
            reg.close()
        sglib.close_session(own)
    st3, left = gauges_settled_to_zero(node)
    assert not left, f"gauges not back to 0 after the VA space closed: {left}"
    assert_no_pmm_leak(session.uvm, session.gpus, before, "peer-unregister")
    assert_clean_log(kmsg, "at the end")


# ---- sigkill-mid-eviction ------------------------------------------------------------------------------------

#: the child is killed once the harvester has evicted this many chunks to peers during its run
KILL_AFTER_PEER_EVICTIONS = 6
#: the software GPU's extra latency per peer copy during sigkill-mid-eviction (its link_latency_us knob)
PEER_LATENCY_US = 20_000


@_scenario("sigkill-mid-eviction")
def test_sigkill_mid_eviction(session: sglib.Session, node: Any, kmsg: Kmsg) -> None:
    s = session
    assert len(s.gpus) >= 2, "sigkill-mid-eviction needs at least 2 GPUs"
    g0 = s.gpus[0]
    owner = _slots(node, s)[g0.index]
    _, policy = node.apply_preset("huvm")
    assert policy.preset_name == "huvm"
    before = pmm_free_chunks(s.uvm, s.gpus)
    st0 = node.stats()

    # Every peer copy (an eviction to a peer, a fetch back) takes PEER_LATENCY_US more, so that the child
    # spends its time inside UVM_MIGRATE waiting for them and the kill lands in the middle of evictions.
    child = Child("loop", 0x5_16C1)
    try:
        for g in s.gpus:
            s.sg.set_knob("link_latency_us", g, PEER_LATENCY_US)
        child.line("ready", 240)
        deadline = time.monotonic() + 240
        while True:
            cur = node.stats()
            evicted = cur.delta(st0).gpus[owner]["evict_to_peer"]
            if evicted >= KILL_AFTER_PEER_EVICTIONS:
                break
            assert child.proc.poll() is None, f"the child died on its own: {child.stderr_tail()}"
            assert time.monotonic() < deadline, f"the child evicted only {evicted} chunks to peers in 240 s"
            time.sleep(0.05)
        where = child.where()
        harvested = cur.gpus[owner].scalar("harvested_bytes")
        rc = child.kill()
    finally:
        child.close()
        for g in s.gpus:
            s.sg.set_knob("link_latency_us", g, 0)
    st1 = node.stats()
    print(f"sigkill-mid-eviction: killed pid {child.pid} after {evicted} peer evictions "
          f"({harvested >> 20} MiB harvested), the child then: {where}; exit {rc}; "
          f"evictions by the kill's return: to peer +{st1.delta(st0).gpus[owner]['evict_to_peer']}, to host "
          f"+{st1.delta(st0).gpus[owner]['evict_to_host']}")
    assert rc == -signal.SIGKILL, f"the child exited with {rc}, not by SIGKILL"

    st2, left = gauges_settled_to_zero(node)
    vas_left = own_va_spaces(node, child.pid)
    print(f"sigkill-mid-eviction: after the kill: gauges {left or 'all 0'}; VA spaces of pid {child.pid}: "
          f"{vas_left or 'none'}")
    assert_clean_log(kmsg, "around the kill")
    assert not vas_left, f"LIST_VA_SPACES still lists the killed process's VA space: {vas_left}"
    assert not left, f"gauges not back to 0 after the harvesting process was killed: {left}"
    assert_no_pmm_leak(s.uvm, s.gpus, before, "sigkill-mid-eviction")

    # A new process still harvests: 4 blocks onto GPU0, evicted by NVIDIA's test path to the peers.
    st3 = node.stats()
    fresh = Child("evict", 0x5_16C2)
    try:
        out = json.loads(fresh.line("evicted", 240))
        bad_words = int(fresh.line("data", 120))
        rc2 = fresh.proc.wait(timeout=120)
        err = fresh.stderr_tail()
    finally:
        fresh.close()
    st4, left = gauges_settled_to_zero(node)
    d = st4.delta(st3).gpus[owner]
    on_peers = sum(v for k, v in out["counts"].items() if k.startswith("GPU") and k != f"GPU{g0.index}")
    print(f"sigkill-mid-eviction: a new process: {out}; counted evict_to_peer +{d['evict_to_peer']}; "
          f"data mismatches {bad_words}; exit {rc2}")
    assert rc2 == 0, f"the new process failed ({rc2}): {err}"
    assert out["evicted"] == 4 and on_peers == 4, f"the new process's evictions did not land on peers: {out}"
    assert d["evict_to_peer"] == 4, f"evict_to_peer +{d['evict_to_peer']} for 4 blocks on peers"
    assert bad_words == 0, f"{bad_words} words of the new process's data differ"
    assert not left, f"gauges not back to 0 after the new process exited: {left}"
    assert_clean_log(kmsg, "at the end")


# ---- module unload and reload ------------------------------------------------------------------------------

SLAB_DIR = "/sys/kernel/slab"
#: nvidia-uvm's own leak checker (uvm_kvmalloc.c: 2 = every uvm_kvmalloc allocation tracked with its origin,
#: leaks printed at unload as "Memory leak of N bytes" and "Leaked N bytes from file:line") for the reloads of
#: the lifecycle scenarios; the phase's own load (UVM_PARAMS) stays as run-guest.sh makes it
UVM_LEAK_CHECKER = "uvm_leak_checker=2"


def _module_refs() -> dict[str, int]:
    with open("/proc/modules") as f:
        return {ln.split()[0]: int(ln.split()[2]) for ln in f.read().splitlines()}


def _run(*cmd: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")


def _rmmod(name: str, seconds: float = 10.0) -> tuple[float, int]:
    """rmmod name, retried while it is still in use (a file closed by an exiting process): (seconds, tries)."""
    start = time.monotonic()
    tries = 0
    while True:
        tries += 1
        p = subprocess.run(["rmmod", name], capture_output=True, text=True, check=False)
        if p.returncode == 0:
            return time.monotonic() - start, tries
        if time.monotonic() - start > seconds:
            raise AssertionError(f"rmmod {name}: {p.stderr.strip()} (refcount {_module_refs().get(name)}, "
                                 f"open here: {_open_here()})")
        time.sleep(0.2)


def _open_here() -> list[str]:
    """This process's files and mappings of /dev/nvidia-uvm and /dev/huvm-softgpu."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith((UVM_DEVICE, SOFTGPU_DEVICE)):
            out.append(f"fd {fd} -> {target}")
    with open("/proc/self/maps") as f:
        out += [f"mapping {ln.split()[0]} {ln.split()[-1]}" for ln in f if UVM_DEVICE in ln or SOFTGPU_DEVICE in ln]
    return out


def _load_softgpu(*extra: str) -> None:
    gpus, fb_mib = str(sglib.GPUS_EXPECTED or 4), str(sglib.FB_MIB or 128)
    engines = str(sglib.ENGINE_THREADS)
    _run("insmod", SOFTGPU_KO, f"gpus={gpus}", f"fb_mib={fb_mib}", f"arch={sglib.ARCH}", f"engine_threads={engines}",
         *extra)
    for name, want in (("gpus", gpus), ("fb_mib", fb_mib), ("arch", sglib.ARCH), ("engine_threads", engines)):
        with open(f"/sys/module/huvm_softgpu/parameters/{name}") as f:
            got = f.read().strip()
        assert got == want, f"huvm_softgpu: {name}={got}, expected {want}"


def _load_uvm(ko: str, *extra: str) -> None:
    """insmod nvidia-uvm as the phase does (plus ``extra`` parameters) and make its device nodes (UVM makes
    none: minors 0 and 1 of the chrdev region "nvidia-uvm", whose major may change from one load to the next)."""
    _run("insmod", ko, *UVM_PARAMS, *extra)
    with open("/proc/devices") as f:
        majors = [int(ln.split()[0]) for ln in f if ln.split()[1:] == ["nvidia-uvm"]]
    assert len(majors) == 1, f"/proc/devices: nvidia-uvm majors {majors}"
    for minor, path in ((0, UVM_DEVICE), (1, UVM_DEVICE + "-tools")):
        if os.path.exists(path):
            os.unlink(path)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(majors[0], minor))
        os.chmod(path, 0o666)


def _fast_ko(ko: str) -> str:
    """A copy of nvidia-uvm.ko on the guest's tmpfs without debug sections (insmod reads the whole file; the
    original lies on the 9p share). The kernel never loads debug sections, so the module is the same. One
    copy per module file: the guest's /tmp outlives a variant, and a later variant must not load an earlier
    one's module (the software GPU it was linked against differs between 535 and 580)."""
    out = f"/tmp/lifecycle-{os.path.basename(ko)}"
    if not os.path.exists(out):
        p = subprocess.run(["objcopy", "--strip-debug", ko, out], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            _run("cp", ko, out)
    return out


def _softgpu_idle(sg: softgpu.SoftGpu) -> list[str]:
    """What the software GPU says UVM still holds: RegisterGpu references, PMA memory not free."""
    info, ctr = sg.info(), sg.counters()
    out = []
    for g, c in zip(info.gpus, ctr.gpus, strict=True):
        if g.registered:
            out.append(f"GPU{g.index}: registered {g.registered}")
        if c.pma_free_bytes != g.pma_bytes:
            out.append(f"GPU{g.index}: PMA free {c.pma_free_bytes >> 20} of {g.pma_bytes >> 20} MiB (pinned "
                       f"{c.pma_pinned_bytes >> 20}, unpinned {c.pma_unpinned_bytes >> 20})")
    return out


def _kmemleak() -> list[str]:
    """Unreferenced objects kmemleak reports (empty where the kernel has no kmemleak: Debian's has none)."""
    path = "/sys/kernel/debug/kmemleak"
    if not os.path.exists(path):
        return []
    for _ in range(2):
        with open(path, "w") as f:
            f.write("scan")
    with open(path) as f:
        return [ln for ln in f.read().splitlines() if ln.startswith("unreferenced object")]


def _module_caches(base: set[str]) -> tuple[dict[str, int], list[str]]:
    """The slab caches nvidia-uvm made (those in /sys/kernel/slab beyond ``base``, the listing without it):
    ({cache: objects in use after a shrink}, [caches merged into another one]). The counts are exact only for
    caches of their own: a merged cache (SLAB_MERGE_DEFAULT; the test bed boots with slab_nomerge) is a
    symlink whose count includes every other user. A cache is named without the load-time suffix that
    nvidia-uvm 580 adds on kernels whose sysfs slab entries outlive their cache (nv-linux.h
    nv_kmem_cache_create: "<name>-<ns timestamp>"), so one load's caches compare with another's."""
    counts: dict[str, int] = {}
    merged: list[str] = []
    for name in sorted(set(os.listdir(SLAB_DIR)) - base):
        path = os.path.join(SLAB_DIR, name)
        if os.path.islink(path):
            merged.append(name)
            continue
        try:
            with open(os.path.join(path, "shrink"), "w") as f:
                f.write("1")
        except OSError:
            pass
        with open(os.path.join(path, "objects")) as f:
            key = re.sub(r"-\d+$", "", name)
            counts[key] = counts.get(key, 0) + int(f.read().split()[0])
    return counts, merged


class UnloadStates:
    """8-byte words nvidia-uvm fills at unload (UVM_TEST_REGISTER_UNLOAD_STATE_BUFFER, one registration per
    load): 0, or UVM_TEST_UNLOAD_STATE_MEMORY_LEAK when its leak checker found uvm_kvmalloc memory still
    allocated. A word keeps its sentinel if no module wrote it."""

    SENTINEL = 0x5E_5E_5E_5E

    def __init__(self, n: int) -> None:
        self.ffi = uvm.ffi()
        self.buf = self.ffi.new("uint64_t[]", n)
        for i in range(n):
            self.buf[i] = self.SENTINEL

    def register(self, u: uvm.Uvm, i: int) -> None:
        u.run_test("REGISTER_UNLOAD_STATE_BUFFER", unload_state_buf=int(self.ffi.cast("uintptr_t", self.buf + i)))

    def __getitem__(self, i: int) -> int:
        return int(self.buf[i])


@pytest.fixture
def unloadable() -> Iterator[None]:
    """Every session-scoped fixture closed, nothing of this process open on either device: the modules can
    go. Afterwards both are loaded again as the phase loads them if the test left them out (the phase
    unloads them itself)."""
    assert SOFTGPU_KO and os.path.exists(SOFTGPU_KO), f"HUVM_SOFTGPU_KO={SOFTGPU_KO!r}: no module file"
    assert UVM_KO and os.path.exists(UVM_KO), f"HUVM_UVM_KO={UVM_KO!r}: no module file"
    closed = sglib.release_fixtures()
    print(f"lifecycle: closed the fixtures' handles: {closed or 'none'}")
    still = _open_here()
    assert not still, f"this process still holds the devices: {still}"
    try:
        yield
    finally:
        refs = _module_refs()
        if "huvm_softgpu" not in refs:
            _load_softgpu()
        if "nvidia_uvm" not in refs:
            _load_uvm(UVM_KO)


def _small_harvest(s: sglib.Session, node: Any, seed: int) -> dict[str, Any]:
    """The huvm preset, 4 blocks onto GPU0, UVM_TEST_EVICT_CHUNK of each (to GPU1, the only peer when the
    session has 2 GPUs), their data read back and freed: what was counted, where the blocks were, how many
    words differ, the gauges left."""
    g0 = s.gpus[0]
    owner = _slots(node, s)[g0.index]
    _, policy = node.apply_preset("huvm")
    assert policy.preset_name == "huvm"
    st0 = node.stats()
    r = s.uvm.alloc_managed(4 * CHUNK)
    try:
        sglib.fill_pattern(r, sglib.stale_seed(seed))
        r.migrate(g0)
        sglib.gpu_fill(s, g0.index, r, seed)     # the data lives on GPU0 only: the evictions must copy it
        evicted = sum(int(s.uvm.evict_chunk(g0, r.base + off).evicted) for off in range(0, r.size, CHUNK))
        counts, _ = sglib.blocks_by_place(s, r.base, r.size)
        st1 = node.stats()
        bad, _ = sglib.pattern_mismatches(r, seed)
    finally:
        r.close()
    st2 = node.stats()
    return {"evicted": evicted, "counts": counts, "evict_to_peer": st1.delta(st0).gpus[owner]["evict_to_peer"],
            "harvested": st1.gpus[owner].scalar("harvested_bytes") // CHUNK, "bad_words": bad,
            "gauges_after": nonzero_gauges(st2)}


def _check_small_harvest(h: dict[str, Any], when: str) -> None:
    on_peers = sum(v for k, v in h["counts"].items() if k not in ("GPU0", "cpu"))
    assert h["evicted"] == 4 and on_peers == 4, f"{when}: the 4 evictions did not all land on peers: {h}"
    assert h["evict_to_peer"] == 4 and h["harvested"] == 4, f"{when}: counted {h}"
    assert h["bad_words"] == 0, f"{when}: {h['bad_words']} words differ"
    assert not h["gauges_after"], f"{when}: gauges not 0 after the blocks were freed: {h['gauges_after']}"


# ---- slot-reuse ---------------------------------------------------------------------------------------------

UUID_GEN = "/sys/module/huvm_softgpu/parameters/uuid_gen"


def _set_uuid_gen(sg: softgpu.SoftGpu, gpu: int, gen: int) -> softgpu.GpuInfo:
    """The software GPU's uuid_gen knob: GPU ``gpu`` answers to a new UUID (UVM must not hold it). Returns the GPU
    as SOFTGPU_GET_INFO describes it now."""
    with open(UUID_GEN, "w") as f:
        f.write(f"{gpu}:{gen}")
    g = sg.info(refresh=True).gpus[gpu]
    assert g.uuid[14] == gen, f"GPU{gpu}'s UUID {g.uuid_str} does not carry generation {gen}"
    return g


def _slot_of(node: Any, g: softgpu.GpuInfo) -> int:
    by_uuid = {x.uuid.lower(): x.index for x in node.info().gpus}
    assert g.uuid_str.lower() in by_uuid, \
        f"{g.uuid_str} has no huvm slot: {sorted(by_uuid.items(), key=lambda kv: kv[1])}"
    return by_uuid[g.uuid_str.lower()]


def _cycle(sg: softgpu.SoftGpu, node: Any, g: softgpu.GpuInfo) -> int:
    """UVM_REGISTER_GPU of g in a VA space of its own, then UVM_UNREGISTER_GPU: the slot huvm gave it."""
    with uvm.Uvm.open() as u:
        u.register_gpu(g, sg.client)
        try:
            return _slot_of(node, g)
        finally:
            u.unregister_gpu(g)


@_scenario("slot-reuse")
def test_slot_reuse(unloadable: None, kmsg: Kmsg) -> None:
    """huvm's 16 GPU slots (HUVM_MAX_GPUS) reused in the bed (issue 26, reviews.md row 19): GPU0 harvests 4 chunks
    onto GPU1 and leaves UVM (UVM_UNREGISTER_GPU) with them still there, so its slot is gone but in use (the
    chunks carry it as their owner); then GPU0 comes back under new UUIDs (the software GPU's uuid_gen knob) until
    all 16 slots have been given out. The next new GPU takes a gone slot that holds no data, never GPU0's first;
    the harvested chunks' gauges stay on that slot, and their release (munmap) is counted against it, not against
    the new GPU; once released, that slot is reused too."""
    sg = softgpu.SoftGpu.open()
    node = huvm.open(backend="kernel", device=UVM_DEVICE)
    s = None
    r = None
    try:
        max_gpus = int(abi.lib.HUVM_MAX_GPUS)
        s = sglib.open_session(sg, va_spaces=True, count=2)
        g0, g1 = s.gpus[0], s.gpus[1]
        slot0, slot1 = _slot_of(node, g0), _slot_of(node, g1)
        used_before = len(node.info().gpus)
        _, policy = node.apply_preset("huvm")
        assert policy.preset_name == "huvm"
        r = s.uvm.alloc_managed(4 * CHUNK)
        seed = 0x5_107
        sglib.fill_pattern(r, sglib.stale_seed(seed))
        r.migrate(g0)
        sglib.gpu_fill(s, g0.index, r, seed)
        evicted = sum(int(s.uvm.evict_chunk(g0, r.base + off).evicted) for off in range(0, r.size, CHUNK))
        counts, _ = sglib.blocks_by_place(s, r.base, r.size)
        assert evicted == 4 and counts == {f"GPU{g1.index}": 4}, f"the harvest: {evicted} evicted, {counts}"
        # GPU0 leaves UVM with its data held on GPU1
        s.uvm.unregister_gpu(g0)
        s.gone.add(g0.index)
        st = node.stats()
        held0 = st.pair(slot0, slot1)["held_bytes"]
        gone = [x for x in node.info().gpus if x.index == slot0]
        print(f"slot-reuse: {g0.name} ({g0.uuid_str}) had slot {slot0}, left UVM holding {held0 >> 20} MiB on "
              f"{g1.name} (slot {slot1}); {used_before} slots used; present flags {[x.flag_names for x in gone]}")
        assert held0 == 4 * CHUNK, f"held_bytes of slot {slot0} on slot {slot1}: {held0}"
        assert gone and not gone[0].present, f"slot {slot0} still present after UVM_UNREGISTER_GPU: {gone}"

        # GPU0 again and again under new UUIDs until every slot has been given out
        slots = []
        gen = 0
        while len(node.info().gpus) < max_gpus:
            gen += 1
            slots.append(_cycle(sg, node, _set_uuid_gen(sg, g0.index, gen)))
        print(f"slot-reuse: generations 1..{gen} of {g0.name} got slots {slots}")
        assert slots == list(range(used_before, max_gpus)), f"new GPUs got slots {slots}"
        # all used: the next new GPU takes a gone slot without data (the lowest), not slot0
        gen += 1
        reused = _cycle(sg, node, _set_uuid_gen(sg, g0.index, gen))
        st = node.stats()
        print(f"slot-reuse: generation {gen} got slot {reused}; slot {slot0} holds "
              f"{st.pair(slot0, slot1)['held_bytes'] >> 20} MiB on slot {slot1}")
        assert reused != slot0, f"slot {slot0} was given to a new GPU while its harvested chunks remain on GPU1"
        assert st.pair(slot0, slot1)["held_bytes"] == 4 * CHUNK, "the gone GPU's held_bytes moved"
        assert st.pair(reused, slot1)["held_bytes"] == 0, f"the new GPU (slot {reused}) holds data it never had"
        # the harvested chunks freed: released against slot0 (its gauges to 0, GPU1 lends nothing)
        n_bad, first = sglib.pattern_mismatches(r, seed)
        assert n_bad == 0, f"{n_bad} words of the gone GPU's data differ, first at 0x{first:x}"
        r.close()
        r = None
        st, left = gauges_settled_to_zero(node)
        assert not left, f"gauges not 0 after the gone GPU's chunks were freed: {left}"
        # now slot0 holds nothing: the next new GPU may take it (the lowest gone slot)
        gen += 1
        again = _cycle(sg, node, _set_uuid_gen(sg, g0.index, gen))
        print(f"slot-reuse: after the release, generation {gen} got slot {again}")
        assert again == slot0, f"slot {slot0} was not reused once its data was released (got {again})"
        assert_clean_log(kmsg, "slot reuse")
    finally:
        if r is not None:
            r.close()
        if s is not None:
            sglib.close_session(s)
        node.apply_preset("stock")
        node.close()
        with open(UUID_GEN, "w") as f:
            f.write("0:0")
        sg.close()


# ---- load-unload-x20 -----------------------------------------------------------------------------------------

CYCLES = 20


def _uvm_cycle(sg: softgpu.SoftGpu, ko: str, seed: int, states: UnloadStates, i: int,
               base: set[str]) -> dict[str, Any]:
    """insmod nvidia-uvm (leak checker on), a session of GPU0 and GPU1 that registers unload state word i,
    a small harvest, close; nvidia-uvm's slab caches counted; rmmod. Returns what each step saw."""
    start = time.monotonic()
    _load_uvm(ko, UVM_LEAK_CHECKER)
    s = sglib.open_session(sg, va_spaces=True, count=2)
    try:
        states.register(s.uvm, i)
        n = huvm.open(backend="kernel", device=UVM_DEVICE)
        try:
            preset = n.get_policy().preset_name
            h = _small_harvest(s, n, seed)
        finally:
            n.close()
    finally:
        sglib.close_session(s)
    caches, merged = _module_caches(base)
    _rmmod("nvidia_uvm")
    return {"harvest": h, "preset_at_load": preset, "caches": caches, "merged": merged,
            "seconds": time.monotonic() - start}


@_scenario("load-unload-x20")
def test_load_unload_x20(unloadable: None, kmsg: Kmsg) -> None:
    ko = _fast_ko(UVM_KO)
    _rmmod("nvidia_uvm")
    base = set(os.listdir(SLAB_DIR))
    states = UnloadStates(CYCLES + 1)
    sg = softgpu.SoftGpu.open()
    try:
        left = _softgpu_idle(sg)
        assert not left, f"after the phase's nvidia-uvm was unloaded the software GPU says: {left}"
        warm = _uvm_cycle(sg, ko, 0x20_00, states, 0, base)    # caches that grow once (sysfs, kernfs, 9p)
        print(f"load-unload-x20: warm-up cycle: {warm}")
        assert not warm["merged"], \
            f"the guest kernel merged nvidia-uvm's slab caches {warm['merged']} into others: their objects cannot " \
            "be counted (the test bed boots with slab_nomerge, tests/vm/run-vm.sh)"
        assert warm["caches"], "nvidia-uvm made no slab cache of its own"
        _check_small_harvest(warm["harvest"], "warm-up cycle")
        slabs0, vm0 = sglib.slabs(), sglib.vmalloc_areas()
        cycles = []
        for i in range(1, CYCLES + 1):
            c = _uvm_cycle(sg, ko, 0x20_00 + i, states, i, base)
            cycles.append(c)
            _check_small_harvest(c["harvest"], f"cycle {i}")
            assert c["preset_at_load"] == "stock", f"cycle {i}: a fresh nvidia-uvm has preset {c['preset_at_load']}"
            grown = {k: (warm["caches"].get(k), v) for k, v in c["caches"].items() if v != warm["caches"].get(k)}
            assert not grown, f"cycle {i}: nvidia-uvm's slab caches after the session closed (warm-up, now): {grown}"
            assert states[i] == 0, f"cycle {i}: nvidia-uvm's unload state 0x{states[i]:x} (1: its leak checker " \
                "found memory still allocated)"
            left = _softgpu_idle(sg)
            assert not left, f"cycle {i}: after rmmod nvidia_uvm the software GPU says: {left}"
        slabs1, vm1 = sglib.slabs(), sglib.vmalloc_areas()
    finally:
        sg.close()
    seconds = [c["seconds"] for c in cycles]
    busy = {k: v for k, v in warm["caches"].items() if v}
    grown_all = sglib.slab_growth(slabs0, slabs1, CYCLES)
    print(f"load-unload-x20: {CYCLES} cycles of insmod nvidia-uvm ({UVM_LEAK_CHECKER}), 2 GPUs registered, 4 "
          f"chunks harvested and freed, rmmod: {sum(seconds):.1f} s ({min(seconds):.1f}-{max(seconds):.1f} s "
          f"each); nvidia-uvm's {len(warm['caches'])} slab caches after each session: the same every cycle "
          f"(non-empty: {busy or 'none'}); unload states all 0; for information (the guest's own noise, "
          f"9p dentries and fids): all caches grown by > max({CYCLES}, 1 slab) {grown_all or 'none'}, vmalloc "
          f"areas {vm0} -> {vm1}")
    sglib.perf("load_unload_cycle_seconds", sum(seconds) / CYCLES, "s", cycles=CYCLES)
    assert_clean_log(kmsg, f"during the {CYCLES} cycles")
    _load_uvm(UVM_KO)


# ---- unload-while-harvested ----------------------------------------------------------------------------------

@_scenario("unload-while-harvested")
def test_unload_while_harvested(unloadable: None, kmsg: Kmsg) -> None:
    # nvidia-uvm again, with its leak checker on and an unload state word registered.
    _rmmod("nvidia_uvm")
    base = set(os.listdir(SLAB_DIR))
    _load_uvm(UVM_KO, UVM_LEAK_CHECKER)
    states = UnloadStates(1)
    with uvm.Uvm.open() as u:
        states.register(u, 0)
    idle, merged = _module_caches(base)
    assert not merged, f"the guest kernel merged nvidia-uvm's slab caches {merged} (boot with slab_nomerge)"
    sg = softgpu.SoftGpu.open()
    try:
        gpus = sg.gpus
        n = huvm.open(backend="kernel", device=UVM_DEVICE)
        try:
            _, policy = n.apply_preset("huvm")
            assert policy.preset_name == "huvm"
            child = Child("hold", 0x0_5EED)
            try:
                out = json.loads(child.line("harvested", 240))
                st = n.stats()
            except BaseException:
                child.close()
                raise
        finally:
            n.close()   # nothing of this process stays open on nvidia-uvm
        on_peers = sum(v for k, v in out["counts"].items() if k not in ("GPU0", "cpu"))
        harvested = sum(g.scalar("harvested_bytes") for g in st.gpus)
        print(f"unload-while-harvested: the child holds {out['counts']}; harvested_bytes {harvested >> 20} MiB")
        # The child's files close as it exits with the chunks on the peers; nvidia-uvm goes right after.
        assert child.proc.stdin is not None
        child.proc.stdin.close()
        rc = child.proc.wait(timeout=120)
        err = child.stderr_tail()
        child.close()
        caches, _ = _module_caches(base)
        unload_s, tries = _rmmod("nvidia_uvm")
        left = _softgpu_idle(sg)
    finally:
        sg.close()
    _rmmod("huvm_softgpu")
    leaks = _kmemleak()
    grown = {k: (idle.get(k), v) for k, v in caches.items() if v != idle.get(k)}
    print(f"unload-while-harvested: child exit {rc}; rmmod nvidia_uvm took {unload_s:.2f} s ({tries} tries); "
          f"nvidia-uvm's slab caches at the unload against its idle state: {grown or 'the same'}; unload state "
          f"0x{states[0]:x}; "
          f"software GPU after it: {left or 'idle, all of PMA free'}; kmemleak: {leaks or 'none (or not built)'}")
    assert_clean_log(kmsg, "at the unload")
    assert on_peers > 0 and harvested == on_peers * CHUNK, \
        f"the child's chunks on peers {out['counts']}, harvested_bytes {harvested}"
    assert rc == 0, f"the child exited with {rc}: {err}"
    assert not grown, f"nvidia-uvm's slab caches at the unload (idle, then): {grown}"
    assert states[0] == 0, f"nvidia-uvm's unload state 0x{states[0]:x} (1: its leak checker found memory left)"
    assert not left, f"after rmmod nvidia_uvm the software GPU says: {left}"
    assert not leaks, f"kmemleak: {leaks[:4]}"

    # Both load again as the phase loads them, and a new session harvests.
    _load_softgpu()
    _load_uvm(UVM_KO)
    sg2 = softgpu.SoftGpu.open()
    try:
        assert len(sg2.gpus) == len(gpus), f"{len(sg2.gpus)} GPUs after the reload, {len(gpus)} before"
        s = sglib.open_session(sg2, va_spaces=True)
        try:
            n = huvm.open(backend="kernel", device=UVM_DEVICE)
            try:
                assert n.get_policy().preset_name == "stock"
                h = _small_harvest(s, n, 0x0_5EEE)
                n.apply_preset("stock")
            finally:
                n.close()
        finally:
            sglib.close_session(s)
    finally:
        sg2.close()
    print(f"unload-while-harvested: after the reload: {h}")
    _check_small_harvest(h, "after the reload")
    assert_clean_log(kmsg, "after the reload")


# ---- a mismatched nvidia.ko is refused by the module itself -----------------------------------------------

MISMATCH_VERSION = "580.159.04"


def test_version_mismatch_refused(unloadable: None, kmsg: Kmsg) -> None:
    """huvm's nvidia-uvm asks nvidia.ko's version first thing at load (nvidia_get_rm_ops(), as nvidia-modeset
    does) and refuses another one, with one kernel log line naming both; the software GPU answers with what
    its nvidia_version= parameter says. Afterwards the fixture loads both again with matching versions."""
    with open("/sys/module/huvm_softgpu/parameters/nvidia_version") as f:
        ours = f.read().strip()
    assert ours and ours != MISMATCH_VERSION
    _rmmod("nvidia_uvm")
    _rmmod("huvm_softgpu")
    _load_softgpu(f"nvidia_version={MISMATCH_VERSION}")
    kmsg.read()
    p = subprocess.run(["insmod", UVM_KO, *UVM_PARAMS], capture_output=True, text=True, check=False)
    lines = kmsg.read()
    loaded = "nvidia_uvm" in _module_refs()
    if loaded:
        _rmmod("nvidia_uvm")
    _rmmod("huvm_softgpu")
    mismatch = [ln for ln in lines if "Version mismatch" in ln]
    print(f"version-mismatch: insmod exit {p.returncode} ({(p.stderr or p.stdout).strip()}); log: {mismatch}")
    assert p.returncode != 0 and not loaded, "nvidia-uvm loaded next to an nvidia.ko of another version"
    line = f"nvidia-uvm: Version mismatch: nvidia.ko({MISMATCH_VERSION}) nvidia-uvm.ko({ours}), huvm refuses to load"
    assert mismatch == [line], lines
    assert_clean_log(kmsg, "after the refused load")
