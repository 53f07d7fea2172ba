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
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sglib

MIB = sglib.MIB
CHUNK = sglib.CHUNK

# Collected only on the patched variants (conftest.py's collect_ignore).


# ---- the kernel log ------------------------------------------------------------------------------------------

#: what must not appear in the kernel log during a scenario (UVM's asserts, kernel reports)
KMSG_BAD = ("Assert failed", "Call Trace", "WARNING:", "BUG:", "Oops", "circular locking", "recursive locking")


class Kmsg:
    """Kernel log records written after open(), read from /dev/kmsg (root in the guest)."""

    def __init__(self) -> None:
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)

    def read(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EPIPE:    # overwritten records: go on with the next one
                    continue
                raise
            text = rec.decode(errors="replace")
            out.append(text.split(";", 1)[1].rstrip("\n") if ";" in text else text.rstrip("\n"))

    def close(self) -> None:
        os.close(self.fd)


def _bad_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if any(p in ln for p in KMSG_BAD)]


# ---- fixtures ------------------------------------------------------------------------------------------------

@pytest.fixture
def kmsg() -> Iterator[Kmsg]:
    k = Kmsg()
    try:
        yield k
    finally:
        k.close()


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


def _settled_stats(node: Any, owner: int, seconds: float = 30.0) -> Any:
    """GET_STATS once the owner's eviction counters have stopped moving for a second (pre-eviction runs in
    its own worker after an evicting allocation)."""
    def key(st: Any) -> tuple[int, ...]:
        g = st.gpus[owner]
        return (g.scalar("evict_to_peer"), g.scalar("evict_to_host"), g.scalar("harvested_bytes"))

    last = node.stats()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        cur = node.stats()
        if key(cur) == key(last):
            return cur
        last = cur
    return last


def _blocks_by_place(s: sglib.Session, base: int, size: int) -> tuple[dict[str, int], list[str]]:
    """Every 2 MiB block classified by its first and last page: 'cpu', 'GPU<n>' or 'mixed'."""
    names = {g.uuid: f"GPU{g.index}" for g in s.gpus}
    from huvm import uvm

    names[uvm.cpu_uuid()] = "cpu"
    counts: dict[str, int] = {}
    odd: list[str] = []
    for off in range(0, size, CHUNK):
        places = set()
        for page in (off, off + CHUNK - sglib.PAGE):
            r = s.uvm.va_residency_info(base + page)
            places.add(tuple(sorted(names.get(u, "?") for u in r.resident_on)))
        if len(places) == 1:
            (where,) = places
            key = where[0] if len(where) == 1 else "+".join(where) or "nowhere"
        else:
            key = "mixed"
        if key in ("mixed", "nowhere") or "+" in key:
            odd.append(f"+{off >> 20} MiB: {sorted(places)}")
        counts[key] = counts.get(key, 0) + 1
    return counts, odd


# ---- scenario reporting --------------------------------------------------------------------------------------

def _scenario(name: str) -> pytest.MarkDecorator:
    return pytest.mark.scenario(name)


# ---- evict-to-peer ---------------------------------------------------------------------------------------------

@_scenario("evict-to-peer")
def test_evict_to_peer(session: sglib.Session, managed: Any, huvm_node: Any, kmsg: Kmsg) -> None:
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
    size = -(-g0.pma_bytes * 3 // 2 // CHUNK) * CHUNK
    blocks = size // CHUNK
    r = managed(size)
    seed = 0xE7_1CE
    sglib.fill_pattern(r, seed)

    piece = 16 * MIB
    for off in range(0, size, piece):
        r.migrate(g0, off, min(piece, size - off))

    # NVIDIA's test path: evict blocks still on GPU0 with no VA space lock held (uvm_test_evict_chunk).
    test_evicted = 0
    for off in range(size - 4 * CHUNK, size, CHUNK):
        if s.uvm.va_residency_info(r.base + off).resident_on == (g0.uuid,):
            res = s.uvm.evict_chunk(g0, r.base + off)
            test_evicted += int(res.evicted)

    st1 = _settled_stats(node, owner)
    counts, odd = _blocks_by_place(s, r.base, size)
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

    bad_log = _bad_lines(kmsg.read())
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

    # data byte-exact: CPU reads (from the peers, GPU0 and nothing from host)
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after eviction to peers, first at 0x{first:x}"
    counts_after, _ = _blocks_by_place(s, r.base, size)
    st3 = _settled_stats(node, owner)
    giveback = {ln.index: st3.pair(owner, slot[ln.index])["giveback_chunks"]
                - st0.pair(owner, slot[ln.index])["giveback_chunks"] for ln in lenders}
    print(f"evict-to-peer: after CPU read-back residency {counts_after}; harvested_bytes "
          f"{st3.gpus[owner].scalar('harvested_bytes') >> 20} MiB, giveback {giveback}")
    assert counts_after == {"cpu": blocks}, f"after CPU reads: {counts_after}"
    assert st3.gpus[owner].scalar("harvested_bytes") == 0, "harvested gauge not back to 0 after the data left"
    bad_log = _bad_lines(kmsg.read())
    assert not bad_log, f"{len(bad_log)} kernel log lines of asserts/reports, first: " + " | ".join(bad_log[:6])
