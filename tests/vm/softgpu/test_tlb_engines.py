"""The software GPU's TLB and its concurrent engines (issue 26, item 5).

- TLB: a GPU caches the translations its MMU walked (per PDB, page and client: GPC for the SMs, HUB for the
  copy engines) until a TLB invalidate drops them. GET_COUNTERS ``tlb_hits``/``tlb_misses``, invalidates per
  scope (``tlb_inval_all``, ``tlb_inval_pdb``, ``tlb_inval_va``) and ``tlb_dropped`` show it working: SM reads
  of a mapped page hit after the first; UVM's unmap (a migration away) invalidates and drops the entry, and the
  next SM access faults and reads what UVM brought back, not the stale page.
- Engines: each GPU has its own engine thread, so copies of different GPUs overlap in time. With the CE
  throttled (``copy_mbps``), two migrations onto two GPUs started together take about as long as one, where a
  single engine thread for every GPU (the former scheduler, ``engine_threads=1``) takes the sum.

The failing half of the TLB (a missing invalidate makes a huvm scenario fail) is in test_huvm_scenarios.py
(``stale-tlb``), where the scenarios are.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sglib
from huvm import softgpu

MIB = sglib.MIB
CHUNK = sglib.CHUNK
PAGE = 4096


def _gpu0_read(s: sglib.Session, va: int, size: int, seed: int) -> softgpu.AccessResult:
    (res,) = s.sg.sm_access(s.channels[0], [softgpu.Access.read(va, size, seed=seed)], timeout_ms=60_000)
    assert res.status == 0, f"GPU0 SM read at 0x{va:x}: {res.status_name}"
    return res


def test_tlb_caches_until_invalidated(session: sglib.Session, managed: Any, kmsg: sglib.Kmsg) -> None:
    """SM reads of a page GPU0 maps hit the TLB after the first; migrating the block to the CPU invalidates
    GPU0's translation (UVM's targeted or per-PDB invalidate drops the entry); GPU0's next read faults (UVM
    brings the block back) and reads the data, not the stale page."""
    s = session
    g0 = s.gpus[0]
    seed = 0x71B_C0DE
    r = managed(CHUNK)
    sglib.fill_pattern(r, seed)
    r.migrate(g0)

    # the first read walks (and fills), the next ones hit: one 4K page, one translation per read
    _gpu0_read(s, r.base, PAGE, seed)
    c0 = s.sg.counters()
    for _ in range(8):
        assert _gpu0_read(s, r.base, PAGE, seed).mismatches == 0
    d = s.sg.counters().minus(c0).gpus[0]
    print(f"tlb: 8 SM reads of a mapped page: hits +{d['tlb_hits']} misses +{d['tlb_misses']}")
    assert d["tlb_hits"] >= 8, f"8 SM reads of a mapped page: {d['tlb_hits']} TLB hits, expected >= 8"

    # UVM unmaps GPU0 before the copy to the CPU and invalidates its TLB: the entry goes
    c1 = s.sg.counters()
    r.migrate("cpu")
    d = s.sg.counters().minus(c1).gpus[0]
    invals = d["tlb_inval_va"] + d["tlb_inval_pdb"] + d["tlb_inval_all"]
    print(f"tlb: migration to the CPU: invalidates va +{d['tlb_inval_va']} pdb +{d['tlb_inval_pdb']} "
          f"all +{d['tlb_inval_all']}, entries dropped +{d['tlb_dropped']}")
    assert invals > 0, "UVM unmapped GPU0 without a TLB invalidate reaching the software GPU"
    assert d["tlb_dropped"] > 0, "the invalidate dropped no TLB entry (the SM's entry of the page was there)"

    # the CPU changes the data; GPU0's next read faults (no stale entry) and sees the CPU's bytes
    seed2 = seed ^ 0x5A5A
    sglib.fill_pattern(r, seed2)
    res = _gpu0_read(s, r.base, PAGE, seed2)
    print(f"tlb: GPU0 read after the CPU wrote: {res.faults} faults, {res.mismatches} mismatches")
    assert res.mismatches == 0, f"GPU0 read {res.mismatches} stale words after the CPU rewrote the page"
    assert res.faults > 0, "GPU0's read did not fault: a stale translation survived UVM's unmap"
    bad = sglib.bad_lines(kmsg.read())
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports, first: " + " | ".join(bad[:6])


def _migrate_timed(r: Any, dest: Any, out: dict[str, float], key: str, errs: list[BaseException]) -> None:
    try:
        t = time.monotonic()
        r.migrate(dest)
        out[key] = time.monotonic() - t
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        errs.append(exc)


#: the CE throttle of the concurrency test (MB/s) and the bytes per GPU: about 2 s of throttled copying
#: per GPU, so the emulator's own copy time (~16 ms per 8 MiB under TCG) is noise
THROTTLE_MBPS = 4
COPY_BYTES = 8 * MIB


def test_engines_of_different_gpus_run_concurrently(session: sglib.Session, managed: Any, kmsg: sglib.Kmsg
                                                    ) -> None:
    """CPU -> GPU0 and CPU -> GPU1 migrations (each copied by its destination GPU's CE, throttled to
    THROTTLE_MBPS): alone each takes T0, T1; started together they take less than 0.75 (T0 + T1), which
    one engine thread for every GPU cannot do (it runs the throttled copies one after the other). A variant
    loaded with engine_threads=1 (run-guest.sh) must show exactly that: together they take the sum."""
    s = session
    if len(s.gpus) < 2:
        pytest.skip("needs >= 2 GPUs")
    g0, g1 = s.gpus[0], s.gpus[1]
    regions = [managed(COPY_BYTES) for _ in range(4)]
    for i, r in enumerate(regions):
        sglib.fill_pattern(r, 0xC0C0 + i)
    try:
        for g in (g0, g1):
            s.sg.set_knob("copy_mbps", g, THROTTLE_MBPS)
        t0: dict[str, float] = {}
        errs: list[BaseException] = []
        _migrate_timed(regions[0], g0, t0, "gpu0", errs)
        _migrate_timed(regions[1], g1, t0, "gpu1", errs)
        assert not errs, f"a migration failed: {errs[0]!r}"
        both: dict[str, float] = {}
        threads = [threading.Thread(target=_migrate_timed, args=(regions[2], g0, both, "gpu0", errs)),
                   threading.Thread(target=_migrate_timed, args=(regions[3], g1, both, "gpu1", errs))]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        assert not errs, f"a concurrent migration failed: {errs[0]!r}"
    finally:
        for g in (g0, g1):
            s.sg.set_knob("copy_mbps", g, 0)
    serial = t0["gpu0"] + t0["gpu1"]
    print(f"engines: alone GPU0 {t0['gpu0']:.2f} s, GPU1 {t0['gpu1']:.2f} s (sum {serial:.2f} s); together "
          f"{wall:.2f} s (GPU0 {both['gpu0']:.2f} s, GPU1 {both['gpu1']:.2f} s), ratio {wall / serial:.2f}")
    sglib.perf("engines_concurrent_ratio", round(wall / serial, 3), "x", alone_s=round(serial, 2),
               together_s=round(wall, 2))
    assert min(t0.values()) >= 0.5 * COPY_BYTES / (THROTTLE_MBPS * 1e6), \
        f"the throttle did not slow the copies: {t0}"
    if sglib.ENGINE_THREADS == 0:
        assert wall < 0.75 * serial, \
            f"two GPUs' throttled copies took {wall:.2f} s together, {serial:.2f} s one after the other: " \
            f"their engines did not run concurrently"
    else:  # engine_threads=1 (run-guest.sh's other variants): one thread runs the copies one after the other
        assert wall >= 0.9 * serial, \
            f"two GPUs' throttled copies took {wall:.2f} s together, {serial:.2f} s one after the other, " \
            f"with one engine thread for all GPUs (engine_threads=1): not the mode the variant loaded?"
    for i, r in enumerate(regions):
        n_bad, first = sglib.pattern_mismatches(r, 0xC0C0 + i)
        assert n_bad == 0, f"region {i}: {n_bad} words differ after the migrations, first at 0x{first:x}"
    bad = sglib.bad_lines(kmsg.read())
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports, first: " + " | ".join(bad[:6])
