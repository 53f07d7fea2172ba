"""Stock behaviour under oversubscription: a working set twice GPU0's PMA region, brought onto GPU0 in
pieces, makes UVM evict root chunks to host memory (block_alloc_gpu_chunk -> UVM_PMM_ALLOC_FLAGS_EVICT ->
evict_root_chunk); residency shows CPU pages, and the data survives byte for byte.

HUVM_SOFTGPU_OVERSUB (default 2) scales the working set; HUVM_SOFTGPU_PIECE_MIB (default 16) the migrations.
"""

from __future__ import annotations

from typing import Any

import pytest
import sglib
from huvm import errors

MIB = sglib.MIB


def _working_set(pma_bytes: int) -> int:
    factor = sglib.env_int("HUVM_SOFTGPU_OVERSUB", 2)
    return -(-pma_bytes * factor // sglib.CHUNK) * sglib.CHUNK


def _where(s: sglib.Session, base: int, size: int, gpu: bytes) -> tuple[int, int, int]:
    """(blocks on the GPU, on the CPU, elsewhere) by the first page of every 2 MiB block."""
    on_gpu = on_cpu = other = 0
    for off in range(0, size, sglib.CHUNK):
        r = s.uvm.va_residency_info(base + off)
        if r.resident_on == (gpu,):
            on_gpu += 1
        elif r.on_cpu and gpu not in r.resident_on:
            on_cpu += 1
        else:
            other += 1
    return on_gpu, on_cpu, other


def test_oversubscribed_migrations_evict_to_host(session: sglib.Session, managed: Any) -> None:
    s = session
    g = s.gpus[0]
    size = _working_set(g.pma_bytes)
    piece = sglib.env_int("HUVM_SOFTGPU_PIECE_MIB", 16) * MIB
    r = managed(size)
    seed = 0x0E75B
    sglib.fill_pattern(r, seed)

    with sglib.timed() as t:
        for off in range(0, size, piece):
            n = min(piece, size - off)
            try:
                r.migrate(g, off, n)
            except errors.HuvmError as exc:
                pytest.fail(f"UVM_MIGRATE of [+{off >> 20} MiB, +{(off + n) >> 20} MiB) to {g.name} "
                            f"({size >> 20} MiB working set, PMA {g.pma_bytes >> 20} MiB): {exc}")
    sglib.perf("oversub_migrate_cpu_to_gpu", size / MIB / t[0] if t[0] else 0.0, "MiB/s", bytes=size,
               pma_bytes=g.pma_bytes)

    on_gpu, on_cpu, other = _where(s, r.base, size, g.uuid)
    blocks = size // sglib.CHUNK
    print(f"{g.name}: {blocks} blocks: {on_gpu} on the GPU, {on_cpu} evicted to the CPU, {other} elsewhere")
    assert on_cpu > 0, f"no block was evicted to the host ({on_gpu} of {blocks} on {g.name})"
    assert on_gpu > 0, f"nothing stayed on {g.name}"
    # the last piece was migrated last: it is the least likely to have been evicted
    last = s.uvm.va_residency_info(r.end - sglib.PAGE)
    assert last.is_resident_on(g), f"the last migrated page is not on {g.name}: {last.describe()}"

    with sglib.timed() as t:
        n_bad, first = sglib.pattern_mismatches(r, seed)    # CPU reads: evicted and GPU-resident pages alike
    assert n_bad == 0, f"{n_bad} words differ after oversubscription, first at 0x{first:x}"
    sglib.perf("oversub_cpu_read_back", size / MIB / t[0] if t[0] else 0.0, "MiB/s", bytes=size)


def test_oversubscribed_sm_writes(session: sglib.Session, managed: Any) -> None:
    """The same pressure through GPU faults: SM writes over a working set larger than the PMA region."""
    from huvm import softgpu

    s = session
    g = s.gpus[0]
    size = _working_set(g.pma_bytes)
    r = managed(size)
    seed = 0x5A11
    step = 2 * MIB
    # A kernel sweeping its array: batches of a few 2 MiB writes in flight at a time (each batch's faults
    # reach UVM together), the whole working set in order.
    batch = 4
    with sglib.timed() as t:
        for base in range(0, size, step * batch):
            accesses = [softgpu.Access.write(r.base + off, step, seed=seed)
                        for off in range(base, min(size, base + step * batch), step)]
            s.sg.sm_access(s.channels[g.index], accesses, check=True, timeout_ms=60_000)
    sglib.perf("oversub_sm_write", size / MIB / t[0] if t[0] else 0.0, "MiB/s", bytes=size)
    on_gpu, on_cpu, _ = _where(s, r.base, size, g.uuid)
    assert on_cpu > 0 and on_gpu > 0, f"after SM writes of {size >> 20} MiB: {on_gpu} blocks on GPU, {on_cpu} on CPU"
    n_bad, first = sglib.pattern_mismatches(r, seed)
    assert n_bad == 0, f"{n_bad} words differ after oversubscribed SM writes, first at 0x{first:x}"
