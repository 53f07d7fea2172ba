"""Byte-exact round trips through NVIDIA's real nvidia-uvm on the software GPU.

* UVM_MIGRATE: CPU -> GPU0 -> GPU1 (a peer copy over the emulated NVLink) -> CPU, residency checked after
  every hop with UVM_TEST_VA_RESIDENCY_INFO, bytes compared at the end;
* the emulated SM (softgpu SM_ACCESS on a registered channel): GPU writes to unpopulated managed memory
  (replayable faults serviced by UVM), then CPU reads; GPU reads of CPU-resident pages (migrate on
  fault) verified against the pattern; faults counted through GET_COUNTERS;
* migration throughput and fault service rate, measured and printed (not asserted).
"""

from __future__ import annotations

from typing import Any

import pytest
import sglib
from huvm import softgpu, uvm

MIB = sglib.MIB
#: bytes per round trip (env HUVM_SOFTGPU_RT_MIB): big enough to span several VA blocks
RT_BYTES = sglib.env_int("HUVM_SOFTGPU_RT_MIB", 8) * MIB
#: SM access granularity: one access per 64 KiB, so a batch holds many faults
SM_STEP = 64 << 10


def _mib_per_s(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds if seconds > 0 else 0.0


def _hop(s: sglib.Session, r: uvm.ManagedRegion, dest: Any, label: str) -> float:
    with sglib.timed() as t:
        r.migrate(dest)
    bad = sglib.resident_exactly_on(s.uvm, r, dest)
    assert not bad, f"after UVM_MIGRATE to {label}: not resident there alone: " + "; ".join(bad[:8])
    return t[0]


def test_migrate_round_trip_cpu_gpus_cpu(session: sglib.Session, managed: Any) -> None:
    s = session
    r = managed(RT_BYTES)
    data = sglib.random_bytes(r.size, seed=1)
    r.view()[:] = data.tobytes()
    bad = sglib.resident_exactly_on(s.uvm, r, "cpu")
    assert not bad, "CPU-written pages not on the CPU: " + "; ".join(bad[:8])

    g0 = s.gpus[0]
    t_in = _hop(s, r, g0, g0.name)
    sglib.perf("migrate_cpu_to_gpu", _mib_per_s(r.size, t_in), "MiB/s", bytes=r.size, gpu=g0.name)
    last: softgpu.GpuInfo = g0
    if len(s.gpus) >= 2:
        # a GPU joined to GPU0 by NVLink when there is one (a peer copy over the link), else the next one
        nvlink = [b for a, b in s.pairs("nvlink2") if a.index == 0]
        g1 = nvlink[0] if nvlink else s.gpus[1]
        t_peer = _hop(s, r, g1, g1.name)
        sglib.perf("migrate_gpu_to_gpu", _mib_per_s(r.size, t_peer), "MiB/s", bytes=r.size,
                   link=g0.link_to(g1).type, src=g0.name, dst=g1.name)
        last = g1
    t_out = _hop(s, r, "cpu", "the CPU")
    sglib.perf("migrate_gpu_to_cpu", _mib_per_s(r.size, t_out), "MiB/s", bytes=r.size, gpu=last.name)

    same, at = sglib.same_bytes(r, data)
    assert same, f"round trip CPU -> {g0.name} -> {last.name} -> CPU changed the data: first at +0x{at:x}"


def test_migrate_round_trip_every_gpu(session: sglib.Session, managed: Any) -> None:
    """CPU -> GPU0 -> GPU1 -> ... -> GPUn-1 -> GPU0 -> CPU: every peer hop of a ring of the emulated GPUs."""
    s = session
    if len(s.gpus) < 2:
        pytest.skip("needs >= 2 GPUs")
    r = managed(4 * MIB)
    data = sglib.random_bytes(r.size, seed=2)
    r.view()[:] = data.tobytes()
    for g in [*s.gpus, s.gpus[0]]:
        _hop(s, r, g, g.name)
    _hop(s, r, "cpu", "the CPU")
    same, at = sglib.same_bytes(r, data)
    assert same, f"ring of peer migrations changed the data: first at +0x{at:x}"


def _sm_write(s: sglib.Session, gpu: int, r: uvm.ManagedRegion, seed: int) -> list[softgpu.AccessResult]:
    accesses = [softgpu.Access.write(r.base + off, SM_STEP, seed=seed) for off in range(0, r.size, SM_STEP)]
    return s.sg.sm_access(s.channels[gpu], accesses, check=True)


def test_sm_writes_then_cpu_reads(session: sglib.Session, managed: Any) -> None:
    s = session
    for g in s.gpus:
        r = managed(2 * MIB)
        seed = 0x5EED0000 + g.index
        before = s.sg.counters()
        results = _sm_write(s, g.index, r, seed)
        delta = s.sg.counters().minus(before)
        faults = sum(x.faults for x in results)
        assert faults > 0, f"{g.name}: SM writes to unpopulated managed memory raised no fault"
        assert delta.gpus[g.index]["faults"] >= faults, \
            f"{g.name}: GET_COUNTERS faults +{delta.gpus[g.index]['faults']} < {faults} reported by the accesses"
        assert delta.gpus[g.index]["sm_accesses"] >= len(results)
        res = s.uvm.va_residency_info(r.base)
        assert res.is_resident_on(g), f"{g.name}: after SM writes: {res.describe()}"
        n, first = sglib.pattern_mismatches(r, seed)   # CPU reads: CPU faults bring the pages back
        assert n == 0, f"{g.name}: CPU reads {n} words that differ from what the SM wrote, first at 0x{first:x}"
        assert s.uvm.va_residency_info(r.base).on_cpu


def test_sm_reads_cpu_resident_pages(session: sglib.Session, managed: Any) -> None:
    """GPU reads of pages the CPU wrote: replayable faults, UVM migrates (or maps) them for the GPU, the SM
    verifies every word against the pattern."""
    s = session
    for g in s.gpus:
        r = managed(2 * MIB)
        seed = 0xC0FFEE00 + g.index
        sglib.fill_pattern(r, seed)
        assert s.uvm.va_residency_info(r.base).on_cpu
        before = s.sg.counters()
        accesses = [softgpu.Access.read(r.base + off, SM_STEP, seed=seed) for off in range(0, r.size, SM_STEP)]
        results = s.sg.sm_access(s.channels[g.index], accesses, check=True)
        delta = s.sg.counters().minus(before)
        assert all(x.mismatches == 0 for x in results)
        assert sum(x.faults for x in results) > 0, f"{g.name}: reads of CPU-resident pages raised no fault"
        assert delta.gpus[g.index]["faults"] > 0
        res = s.uvm.va_residency_info(r.base)
        assert res.is_resident_on(g) or res.is_mapped_on(g), f"{g.name}: after SM reads: {res.describe()}"


def test_sm_read_back_into_buffer(session: sglib.Session, managed: Any) -> None:
    """SM READ with a destination buffer returns the bytes the CPU wrote, byte for byte."""
    s = session
    r = managed(256 << 10)
    data = sglib.random_bytes(r.size, seed=3)
    r.view()[:] = data.tobytes()
    out = bytearray(r.size)
    s.sg.sm_access(s.channels[0], [softgpu.Access.read(r.base, r.size, into=out)], check=True)
    assert bytes(out) == data.tobytes(), "SM read returned other bytes than the CPU wrote"


def test_sm_atomic_inc(session: sglib.Session, managed: Any) -> None:
    s = session
    r = managed(64 << 10)
    r.write(0, (41).to_bytes(4, "little"))
    results = s.sg.sm_access(s.channels[0], [softgpu.Access.atomic_inc(r.base)] * 3, check=True)
    assert [x.value for x in results] == [41, 42, 43]
    assert int.from_bytes(r.read(0, 4), "little") == 44


def test_sm_write_on_one_gpu_read_on_another(session: sglib.Session, managed: Any) -> None:
    s = session
    if len(s.gpus) < 2:
        pytest.skip("needs >= 2 GPUs")
    r = managed(2 * MIB)
    _sm_write(s, 0, r, seed=77)
    accesses = [softgpu.Access.read(r.base + off, SM_STEP, seed=77) for off in range(0, r.size, SM_STEP)]
    results = s.sg.sm_access(s.channels[1], accesses, check=True)
    assert all(x.mismatches == 0 for x in results)
    n, first = sglib.pattern_mismatches(r, 77)
    assert n == 0, f"{n} words differ after GPU0 wrote and GPU1 read, first at 0x{first:x}"


def test_fault_service_rate(session: sglib.Session, managed: Any) -> None:
    """Measured, not asserted: replayable faults serviced per second for SM writes of one word per page."""
    s = session
    size = sglib.env_int("HUVM_SOFTGPU_FAULT_MIB", 8) * MIB
    r = managed(size)
    accesses = [softgpu.Access.write(r.base + off, 8, seed=1) for off in range(0, size, sglib.PAGE)]
    before = s.sg.counters()
    with sglib.timed() as t:
        s.sg.sm_access(s.channels[0], accesses, check=True)
    faults = s.sg.counters().minus(before).gpus[0]["faults"]
    assert faults > 0
    sglib.perf("faults_serviced_per_s", faults / t[0] if t[0] else 0.0, "faults/s", faults=faults,
               pages=len(accesses), seconds=round(t[0], 3))
