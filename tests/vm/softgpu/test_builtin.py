"""NVIDIA's built-in UVM tests (UVM_TEST_*, uvm_enable_builtin_tests=1) on the software GPU.

One pytest case per test, in the ordered target list's stage order (each stage proves one layer):
  1 pure CPU (module load, no GPU)           2 RM API (UVM_REGISTER_GPU done: init pushes, PMA)
  3 host / CE / channels                     4 MMU, uvm_mem, PMM (with GPU VA spaces)
  5 peers (>= 2 GPUs)                        6 managed memory, residency, eviction
  7 faults (registered SM channels)
Each case fills the params its test reads (see NVIDIA's uvm_*_test.c) and requires rmStatus == NV_OK,
plus the outputs it can check. Tests declared "not run" are listed with their reason and skipped, never
counted as passed; every other UVM_TEST_* of uvm_test_ioctl.h is listed as not in this suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
import sglib
from huvm import errors, softgpu, uvm

MIB = sglib.MIB
CHUNK = sglib.CHUNK


@dataclass
class Ctx:
    """What a built-in test runs with: the UVM file (a session's, or the CPU-only one), the GPUs."""

    u: uvm.Uvm
    sg: softgpu.SoftGpu | None
    session: sglib.Session | None
    managed: list[uvm.ManagedRegion] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    #: huvm's peer tier is on (test_builtin_tier.py): an eviction may land on a peer GPU instead of the CPU
    tier: bool = False

    @property
    def gpus(self) -> tuple[softgpu.GpuInfo, ...]:
        return self.session.gpus if self.session else ()

    @property
    def client(self) -> int:
        assert self.sg is not None
        return self.sg.client

    def alloc(self, size: int, **kw: Any) -> uvm.ManagedRegion:
        r = self.u.alloc_managed(size, **kw)
        self.managed.append(r)
        return r

    def run(self, name: str, **fields: Any) -> Any:
        return self.u.run_test(name, **fields)


Params = Callable[[Ctx], Iterable[dict[str, Any]]]
Check = Callable[[Ctx, dict[str, Any], Any], None]


@dataclass(frozen=True)
class Builtin:
    name: str
    stage: int
    group: str
    fd: str = "session"                  # uvm_cpu (no GPU), uvm_gpus (GPUs, no VA space), session (all),
                                         # fresh (GPUs registered for this test alone)
    params: Params | None = None         # one run per dict; default one run without fields
    check: Check | None = None           # checks of the outputs of each run
    run: Callable[[Ctx], None] | None = None   # a whole scenario instead of params/check
    min_gpus: int = 0
    not_run: str = ""
    branches: tuple[int, ...] = (535, 580)   # the nvidia-uvm branches whose uvm_test_ioctl.h has the test

    def __repr__(self) -> str:  # the pytest id
        return self.name


# ---- params and checks --------------------------------------------------------------------------------------

def per_gpu(fn: Callable[[Ctx, softgpu.GpuInfo], dict[str, Any]]) -> Params:
    return lambda ctx: [fn(ctx, g) for g in ctx.gpus]


def per_pair(fn: Callable[[Ctx, softgpu.GpuInfo, softgpu.GpuInfo], dict[str, Any]], link: str | None = None
             ) -> Params:
    def gen(ctx: Ctx) -> list[dict[str, Any]]:
        assert ctx.session is not None
        return [fn(ctx, a, b) for a, b in ctx.session.pairs(link)]
    return gen


def each(*runs: dict[str, Any]) -> Params:
    return lambda ctx: list(runs)


def gpu_uuid(ctx: Ctx, g: softgpu.GpuInfo) -> dict[str, Any]:
    return {"gpu_uuid": g}


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def check_ref_count(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
    expect(p.ref_count >= 1, f"GPU {uvm.uuid_str(uvm.uuid_bytes(f['gpu_uuid']))}: ref_count {p.ref_count} < 1")


def check_gpu_time(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
    first = int(p.timestamp_ns)
    again = int(ctx.run("GET_GPU_TIME", **f).timestamp_ns)
    expect(first > 0 and again >= first, f"GPU time not monotonic: {first} then {again}")


def check_pmm_query(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
    # gpu->pmm.chunk_sizes[USER]: a mask of chunk sizes; 2 MiB root chunks and 4 KiB are always in it
    expect(bool(p.value & (2 * MIB)) and bool(p.value & 4096), f"user chunk sizes 0x{p.value:x}")


def check_pma_stats(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
    g = f["gpu_uuid"]
    free64k, free2m = int(p.pma_stats.numFreePages64k), int(p.pma_stats.numFreePages2m)
    expect(0 < free64k * 65536 <= g.pma_bytes, f"{g.name}: PMA free 64K pages {free64k} vs {g.pma_bytes} bytes")
    expect(free2m * 2 * MIB <= free64k * 65536, f"{g.name}: free 2M pages {free2m} > free 64K pages allow")
    ctx.details[g.name] = {"free_64k_pages": free64k, "free_2m_pages": free2m}


def check_positive(field_name: str) -> Check:
    def check(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
        expect(int(getattr(p, field_name)) > 0, f"{field_name} = {getattr(p, field_name)}")
    return check


def check_leak(ctx: Ctx, f: dict[str, Any], p: Any) -> None:
    g = f["gpu_uuid"]
    n = int(p.allocated)
    expect(n > 0, f"{g.name}: no 2 MiB chunk could be allocated")
    ctx.details[g.name] = {"allocated_2m_chunks": n}


# ---- scenarios ----------------------------------------------------------------------------------------------

def run_perf_module_sanity(ctx: Ctx) -> None:
    # Two VA blocks must exist (uvm_perf_module_test.c: test_module_replace looks both up).
    r = ctx.alloc(4 * MIB)
    r.write(0, b"\1")
    r.write(2 * MIB, b"\1")
    ctx.run("PERF_MODULE_SANITY", range_address=r.base, range_size=r.size)


def run_range_group_tree(ctx: Ctx) -> None:
    groups = [ctx.u.create_range_group() for _ in range(4)]
    try:
        ctx.run("RANGE_GROUP_TREE", rangeGroupIds=groups)
    finally:
        for grp in groups:
            ctx.u.destroy_range_group(grp)


def _tlb_fill(ctx: Ctx, g: softgpu.GpuInfo, va: int) -> None:
    """GPU g's SMs read the 4 KiB page at va (mapped on g): a TLB entry of g's user VA space (GPC client)."""
    assert ctx.sg is not None and ctx.session is not None
    assert len(ctx.session.channels) > g.index, f"{g.name} has no SM channel"
    (res,) = ctx.sg.sm_access(ctx.session.channels[g.index], [softgpu.Access.read(va, 4096)], timeout_ms=60_000)
    expect(res.status == 0, f"{g.name}: SM read at 0x{va:x}: {res.status_name}")


def _tlb_delta(ctx: Ctx, g: softgpu.GpuInfo, before: softgpu.Counters) -> softgpu.GpuCounters:
    assert ctx.sg is not None
    return ctx.sg.counters().minus(before).gpus[g.index]


def run_invalidate_tlb(ctx: Ctx) -> None:
    """NVIDIA's invalidates (every target mode, page-table level and membar) at a fixed VA, then at a page each
    GPU's SMs have just read, so that the software GPU's TLB holds its entry: a targeted invalidate (GPC
    enabled) and a whole-PDB one drop it and count by scope; one with GPC invalidation disabled leaves it (the
    SMs' uTLBs are not reached)."""
    lib = uvm.lib()
    combos = [
        (lib.UvmTargetVaModeAll, lib.UvmInvalidatePageTableLevelAll, lib.UvmInvalidateTlbMemBarSys),
        (lib.UvmTargetVaModeAll, lib.UvmInvalidatePageTableLevelPde3, lib.UvmInvalidateTlbMemBarLocal),
        (lib.UvmTargetVaModeTargeted, lib.UvmInvalidatePageTableLevelPte, lib.UvmInvalidateTlbMemBarNone),
        (lib.UvmTargetVaModeTargeted, lib.UvmInvalidatePageTableLevelPde0, lib.UvmInvalidateTlbMemBarSys),
    ]
    for g in ctx.gpus:
        for mode, level, membar in combos:
            ctx.run("INVALIDATE_TLB", gpu_uuid=g, va=0x7F0000200000, target_va_mode=mode, page_table_level=level,
                    membar=membar, disable_gpc_invalidate=0)
    assert ctx.sg is not None
    r = ctx.alloc(2 * MIB)
    r.write(0, b"\x5a" * 4096)
    for g in ctx.gpus:
        r.migrate(g)
        seen: dict[str, int] = {}
        for what, mode, gpc_off, scope in (
                ("targeted", lib.UvmTargetVaModeTargeted, 0, "tlb_inval_va"),
                ("targeted, GPC disabled", lib.UvmTargetVaModeTargeted, 1, "tlb_inval_va"),
                ("whole PDB", lib.UvmTargetVaModeAll, 0, "tlb_inval_pdb")):
            _tlb_fill(ctx, g, r.base)
            c0 = ctx.sg.counters()
            ctx.run("INVALIDATE_TLB", gpu_uuid=g, va=r.base, target_va_mode=mode,
                    page_table_level=lib.UvmInvalidatePageTableLevelAll, membar=lib.UvmInvalidateTlbMemBarSys,
                    disable_gpc_invalidate=gpc_off)
            d = _tlb_delta(ctx, g, c0)
            expect(d[scope] >= 1, f"{g.name}: {what} invalidate: {scope} +{d[scope]}")
            if gpc_off:
                # only the SMs' entry is in this PDB, and GPC invalidation is off: nothing of it goes
                expect(d["tlb_dropped"] == 0, f"{g.name}: {what} invalidate dropped {d['tlb_dropped']} entries")
            else:
                expect(d["tlb_dropped"] >= 1, f"{g.name}: {what} invalidate dropped no TLB entry")
            seen[what] = d["tlb_dropped"]
        ctx.details[g.name] = {"dropped": seen}


def run_pmm_sanity(ctx: Ctx) -> None:
    lib = uvm.lib()
    ctx.run("PMM_SANITY", mode=lib.UvmTestPmmSanityModeBasic)
    if sglib.LONG:
        # every memory type and free pattern: about 11 minutes for 4 GPUs under TCG
        ctx.run("PMM_SANITY", mode=lib.UvmTestPmmSanityModeFull)
    ctx.details["modes"] = "basic, full" if sglib.LONG else "basic (full: VM_SOFTGPU_LONG=1)"


def run_channel_stress(ctx: Ctx) -> None:
    lib = uvm.lib()
    ctx.run("CHANNEL_STRESS", mode=lib.UVM_TEST_CHANNEL_STRESS_MODE_NOOP_PUSH, iterations=200, seed=1)
    ctx.run("CHANNEL_STRESS", mode=lib.UVM_TEST_CHANNEL_STRESS_MODE_UPDATE_CHANNELS, iterations=200, seed=2)
    ctx.run("CHANNEL_STRESS", mode=lib.UVM_TEST_CHANNEL_STRESS_MODE_STREAM, iterations=8, num_streams=2, seed=3)


def run_pmm_sysmem(ctx: Ctx) -> None:
    # uvm_pmm_sysmem_test.c: range_address1 is a whole 2 MiB VA block; range_address2 starts a 2 MiB
    # stretch of four 512 KiB VA ranges (one VA block each). The blocks must exist: touch them.
    r1 = ctx.alloc(2 * MIB)
    r2 = ctx.alloc(2 * MIB, pieces=[512 << 10] * 4)
    for off in range(0, r1.size, sglib.PAGE):
        r1.write(off, b"\1")
    for off in range(0, r2.size, 512 << 10):
        r2.write(off, b"\1")
    ctx.run("PMM_SYSMEM", range_address1=r1.base, range_address2=r2.base)


def run_evict_chunk(ctx: Ctx) -> None:
    """A managed 2 MiB block migrated to each GPU, evicted by VA to the CPU (or, with huvm's tier on, to the
    CPU or a peer GPU): evicted, now resident there, data intact."""
    for g in ctx.gpus:
        r = ctx.alloc(2 * MIB)
        sglib.fill_pattern(r, seed=0xE71C7 + g.index)
        r.migrate(g)
        bad = sglib.resident_exactly_on(ctx.u, r, g)
        expect(not bad, f"{g.name}: after UVM_MIGRATE: " + "; ".join(bad))
        res = ctx.u.evict_chunk(g, r.base, "virtual")
        expect(res.evicted, f"{g.name}: EVICT_CHUNK reported no eviction")
        expect(res.chunk_size_backing_virtual > 0, f"{g.name}: chunk_size_backing_virtual 0")
        after = ctx.u.va_residency_info(r.base)
        elsewhere = after.on_cpu or (ctx.tier and any(after.is_resident_on(p) for p in ctx.gpus if p.index != g.index))
        expect(elsewhere and not after.is_resident_on(g), f"{g.name}: after eviction: {after.describe()}")
        n, first = sglib.pattern_mismatches(r, seed=0xE71C7 + g.index)
        expect(n == 0, f"{g.name}: {n} words differ after eviction, first at 0x{first:x}")
        ctx.details[g.name] = {"evicted_pa": res.evicted_physical_address,
                               "chunk_size": res.chunk_size_backing_virtual}


def run_pma_alloc_free(ctx: Ctx) -> None:
    for g in ctx.gpus:
        ctx.run("PMA_ALLOC_FREE", gpu_uuid=g, page_size=64 << 10, contiguous=0, num_pages=16)
        ctx.run("PMA_ALLOC_FREE", gpu_uuid=g, page_size=2 * MIB, contiguous=1, num_pages=2)


def run_pmm_reverse_map(ctx: Ctx) -> None:
    # uvm_pmm_test.c: range_address1 is a 2 MiB VA block resident on the GPU in one 2 MiB chunk;
    # [range_address2, + range_size2) holds VA ranges of different sizes populated on the GPU in order.
    g = ctx.gpus[0]
    r1 = ctx.alloc(2 * MIB)
    r1.migrate(g)
    sizes = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 * MIB]
    r2 = ctx.alloc(sum(sizes), pieces=sizes)
    off = 0
    for size in sizes:
        r2.migrate(g, off, size)
        off += size
    ctx.run("PMM_REVERSE_MAP", gpu_uuid=g, range_address1=r1.base, range_address2=r2.base, range_size2=2 * MIB)


def _touched(ctx: Ctx) -> uvm.ManagedRegion:
    """4 MiB of managed memory (one VA range, two VA blocks) with one page written by the CPU at +3 MiB."""
    r = ctx.alloc(4 * MIB)
    r.write(3 * MIB, b"x")
    return r


def run_va_range_info(ctx: Ctx) -> None:
    r = _touched(ctx)
    rng = ctx.run("VA_RANGE_INFO", lookup_address=r.base + 3 * MIB)
    expect(rng.type == uvm.lib().UVM_TEST_VA_RANGE_TYPE_MANAGED, f"range type {rng.type}")
    expect((rng.va_range_start, rng.va_range_end) == (r.base, r.end - 1),
           f"range [0x{rng.va_range_start:x}, 0x{rng.va_range_end:x}] vs the mapping [0x{r.base:x}, 0x{r.end:x})")
    expect(bool(rng.managed.owned_by_calling_process) and not rng.managed.is_zombie, "managed range ownership")


def run_va_block_info(ctx: Ctx) -> None:
    r = _touched(ctx)
    blk = ctx.run("VA_BLOCK_INFO", lookup_address=r.base + 3 * MIB)
    expect((blk.va_block_start, blk.va_block_end) == (r.base + 2 * MIB, r.base + 4 * MIB - 1),
           f"block [0x{blk.va_block_start:x}, 0x{blk.va_block_end:x}]")


def run_va_residency_info(ctx: Ctx) -> None:
    r = _touched(ctx)
    res = ctx.u.va_residency_info(r.base + 3 * MIB)
    expect(res.resident_on == (uvm.CPU_UUID,), f"CPU-touched page: {res.describe()}")
    expect(uvm.CPU_UUID in res.mapped_on, f"CPU-touched page not mapped on the CPU: {res.describe()}")
    g = ctx.gpus[0]
    r.migrate(g, 2 * MIB, 2 * MIB)
    res = ctx.u.va_residency_info(r.base + 3 * MIB)
    expect(res.resident_on == (g.uuid,), f"after UVM_MIGRATE to {g.name}: {res.describe()}")


def _status_name(status: int) -> str:
    return uvm.nv_status_name(status) if status else "NV_OK"


def _gpu_written(ctx: Ctx, size: int, seed: int, gpu: int = 0) -> uvm.ManagedRegion:
    """size bytes of managed memory written by GPU gpu's SMs only (first touch on the GPU: no CPU page)."""
    assert ctx.session is not None
    r = ctx.alloc(size)
    sglib.gpu_fill(ctx.session, gpu, r, seed)
    return r


def _expect_data(ctx: Ctx, r: uvm.ManagedRegion, seed: int, what: str, gpu: int = 0) -> None:
    """r holds the pattern of seed, read by GPU gpu's SMs and by the CPU."""
    assert ctx.session is not None
    n, first = sglib.gpu_mismatches(ctx.session, gpu, r, seed)
    expect(n == 0, f"{what}: GPU{gpu} reads {n} words that differ, first at 0x{first:x}")
    n, first = sglib.pattern_mismatches(r, seed)
    expect(n == 0, f"{what}: the CPU reads {n} words that differ, first at 0x{first:x}")


def _range_of(ctx: Ctx, address: int) -> tuple[int, int]:
    rng = ctx.run("VA_RANGE_INFO", lookup_address=address)
    return int(rng.va_range_start), int(rng.va_range_end)


def run_va_range_split(ctx: Ctx) -> None:
    """A 4 MiB range written by GPU0 (its first block GPU-resident) split inside that block: two ranges, the
    block split with them, the data intact on the GPU and the CPU."""
    seed = 0x5_9117
    r = _gpu_written(ctx, 4 * MIB, seed)
    ctx.run("VA_RANGE_SPLIT", split_address=r.base + MIB - 1)
    expect(_range_of(ctx, r.base) == (r.base, r.base + MIB - 1),
           f"first range after the split: {_range_of(ctx, r.base)}")
    expect(_range_of(ctx, r.base + MIB) == (r.base + MIB, r.end - 1),
           f"second range after the split: {_range_of(ctx, r.base + MIB)}")
    _expect_data(ctx, r, seed, "after VA_RANGE_SPLIT")


def run_va_range_inject_split_error(ctx: Ctx) -> None:
    """A split with an injected error fails with NV_ERR_NO_MEMORY and leaves the range whole and its data
    intact; the injection is one-shot (the next split goes through)."""
    seed = 0x5_9118
    r = _gpu_written(ctx, 4 * MIB, seed)
    ctx.run("VA_RANGE_INJECT_SPLIT_ERROR", lookup_address=r.base)
    status, _ = ctx.u.test_status("VA_RANGE_SPLIT", split_address=r.base + MIB - 1)
    expect(_status_name(status) == "NV_ERR_NO_MEMORY", f"injected split: {_status_name(status)}")
    expect(_range_of(ctx, r.base) == (r.base, r.end - 1), f"range after the failed split: {_range_of(ctx, r.base)}")
    _expect_data(ctx, r, seed, "after the failed split")
    ctx.run("VA_RANGE_SPLIT", split_address=r.base + MIB - 1)
    expect(_range_of(ctx, r.base) == (r.base, r.base + MIB - 1),
           f"range after the second split: {_range_of(ctx, r.base)}")
    _expect_data(ctx, r, seed, "after the second split")


def run_va_block_inject_error(ctx: Ctx) -> None:
    """An injected eviction error: UVM_TEST_EVICT_CHUNK of a GPU-resident block fails with NV_ERR_NO_MEMORY and
    the block stays on the GPU with its data; the next eviction goes through (to the host, or to a peer under
    huvm's tier) with the data."""
    g = ctx.gpus[0]
    seed = 0xB10C_E770
    r = _gpu_written(ctx, 2 * MIB, seed)
    ctx.run("VA_BLOCK_INJECT_ERROR", lookup_address=r.base, eviction_error=1)
    status, p = ctx.u.test_status("EVICT_CHUNK", gpu_uuid=g, eviction_mode=uvm.constant(uvm.EVICT_MODES["virtual"]),
                                  address=r.base)
    expect(_status_name(status) == "NV_ERR_NO_MEMORY" and not p.chunk_was_evicted,
           f"EVICT_CHUNK with an injected eviction error: {_status_name(status)}, evicted={bool(p.chunk_was_evicted)}")
    expect(not sglib.resident_exactly_on(ctx.u, r, g), f"{g.name}: the block left after a failed eviction")
    _expect_data(ctx, r, seed, "after the failed eviction")
    r2 = _gpu_written(ctx, 2 * MIB, seed ^ 1)
    res = ctx.u.evict_chunk(g, r2.base)
    expect(res.evicted, f"{g.name}: the eviction after the injected one did not evict")
    expect(not ctx.u.va_residency_info(r2.base).is_resident_on(g), "the evicted block is still on the GPU")
    _expect_data(ctx, r2, seed ^ 1, "after the eviction")


def run_pmm_inject_pma_evict_error(ctx: Ctx) -> None:
    """GPU1's memory mostly held by UVM (unpinned), then another process's allocation that needs PMA to evict
    (softgpu FOREIGN_ALLOC) with an eviction error injected after one chunk: the allocation gets less than it
    asked, UVM's data stays intact; the injection is one-shot (the same allocation then succeeds)."""
    assert ctx.sg is not None
    g = ctx.gpus[1] if len(ctx.gpus) > 1 else ctx.gpus[0]
    seed = 0x9_3A_E77
    size = max(4, g.pma_bytes // (2 * MIB) * 3 // 4) * 2 * MIB
    r = ctx.alloc(size)
    sglib.fill_pattern(r, seed)
    r.migrate(g)
    free2m = int(ctx.run("PMM_QUERY_PMA_STATS", gpu_uuid=g).pma_stats.numFreePages2m) * 2 * MIB
    want = free2m + 8 * MIB
    ctx.run("PMM_INJECT_PMA_EVICT_ERROR", gpu_uuid=g, error_after_num_chunks=1)
    got = 0
    try:
        fa = ctx.sg.foreign_alloc(g, want)
        got = fa.allocated
        ctx.sg.foreign_free(fa)
    except errors.HuvmError as exc:   # refused outright: as good as short
        ctx.details["injected"] = f"refused: {exc}"
    expect(got < want, f"{g.name}: the allocation needing eviction got all {want >> 20} MiB despite the injection")
    n, first = sglib.pattern_mismatches(r, seed)
    expect(n == 0, f"after the failed PMA eviction: the CPU reads {n} words that differ, first at 0x{first:x}")
    r.migrate(g)
    fa = ctx.sg.foreign_alloc(g, want)
    try:
        expect(fa.allocated == want, f"{g.name}: after the injection: got {fa.allocated >> 20} of {want >> 20} MiB")
    finally:
        ctx.sg.foreign_free(fa)
    n, first = sglib.pattern_mismatches(r, seed)
    expect(n == 0, f"after the PMA eviction: the CPU reads {n} words that differ, first at 0x{first:x}")
    ctx.details[g.name] = {"asked_mib": want >> 20, "got_with_injection_mib": got >> 20}


def run_page_thrashing_policy(ctx: Ctx) -> None:
    """The VA space's thrashing policy set and read back (disable, enable with another pin time, restored);
    then a page written by GPU0 and read by GPU1 back and forth with the detection on: data intact."""
    lib = uvm.lib()
    orig = ctx.run("GET_PAGE_THRASHING_POLICY")
    ctx.run("SET_PAGE_THRASHING_POLICY", policy=lib.UVM_TEST_PAGE_THRASHING_POLICY_DISABLE, pin_ns=0)
    now = ctx.run("GET_PAGE_THRASHING_POLICY")
    expect(int(now.policy) == lib.UVM_TEST_PAGE_THRASHING_POLICY_DISABLE, f"policy {now.policy} after DISABLE")
    pin = int(orig.pin_ns) + 1000
    ctx.run("SET_PAGE_THRASHING_POLICY", policy=lib.UVM_TEST_PAGE_THRASHING_POLICY_ENABLE, pin_ns=pin)
    now = ctx.run("GET_PAGE_THRASHING_POLICY")
    expect(int(now.policy) == lib.UVM_TEST_PAGE_THRASHING_POLICY_ENABLE and int(now.pin_ns) == pin,
           f"policy {now.policy} pin_ns {now.pin_ns} after ENABLE with pin_ns {pin}")
    if len(ctx.gpus) > 1:
        assert ctx.session is not None
        r = ctx.alloc(64 << 10)
        for i in range(4):
            sglib.gpu_fill(ctx.session, 0, r, 0x7A5 + i)
            n, first = sglib.gpu_mismatches(ctx.session, 1, r, 0x7A5 + i)
            expect(n == 0, f"round {i}: GPU1 reads {n} words that differ from GPU0's, first at 0x{first:x}")
    ctx.run("SET_PAGE_THRASHING_POLICY", policy=int(orig.policy), pin_ns=int(orig.pin_ns))
    ctx.details["pin_ns"] = int(orig.pin_ns)


def run_page_prefetch_policy(ctx: Ctx) -> None:
    """Prefetch off for the VA space: GPU0's SMs write the first quarter of a fresh 2 MiB block, one access per
    page: exactly those pages become resident (nothing prefetched); prefetch back on, the same on another
    block is reported (UVM's threshold decides); the data intact."""
    lib = uvm.lib()
    assert ctx.session is not None
    s = ctx.session
    pages = (2 * MIB) // sglib.PAGE // 4
    counts = {}
    for policy, seed in ((lib.UVM_TEST_PAGE_PREFETCH_POLICY_DISABLE, 0x9F0),
                         (lib.UVM_TEST_PAGE_PREFETCH_POLICY_ENABLE, 0x9F1)):
        ctx.run("SET_PAGE_PREFETCH_POLICY", policy=policy)
        r = ctx.alloc(2 * MIB)
        s.sg.sm_access(s.channels[0], [softgpu.Access.write(r.base + i * sglib.PAGE, sglib.PAGE, seed=seed)
                                       for i in range(pages)], check=True, timeout_ms=60_000)
        counts[int(policy)] = sglib.resident_pages(s, r.base, r.size).get(f"GPU{ctx.gpus[0].index}", 0)
        n, first = sglib.gpu_mismatches(s, 0, r, seed, 0, pages * sglib.PAGE)
        expect(n == 0, f"GPU0 reads {n} words that differ, first at 0x{first:x}")
    ctx.details["resident_pages"] = {"prefetch_off": counts[lib.UVM_TEST_PAGE_PREFETCH_POLICY_DISABLE],
                                     "prefetch_on": counts[lib.UVM_TEST_PAGE_PREFETCH_POLICY_ENABLE],
                                     "written": pages}
    expect(counts[lib.UVM_TEST_PAGE_PREFETCH_POLICY_DISABLE] == pages,
           f"prefetch off: {counts[lib.UVM_TEST_PAGE_PREFETCH_POLICY_DISABLE]} pages resident on GPU0 for {pages} "
           "written")


def run_change_pte_mapping(ctx: Ctx) -> None:
    """GPU faults from a built-in's downgrades: a page on GPU0 mapped by UVM_MIGRATE, its PTE downgraded to
    read-only (an SM write then faults and is serviced) and then invalidated (an SM read faults); the data
    follows."""
    assert ctx.session is not None
    s = ctx.session
    lib = uvm.lib()
    g = ctx.gpus[0]
    r = ctx.alloc(64 << 10)
    sglib.fill_pattern(r, 0xC4A)
    r.migrate(g)
    faults = {}
    ctx.run("CHANGE_PTE_MAPPING", uuid=g, va=r.base, mapping=lib.UVM_TEST_PTE_MAPPING_READ_ONLY)
    res = s.sg.sm_access(s.channels[0], [softgpu.Access.write(r.base, sglib.PAGE, seed=0xC4B)], check=True,
                         timeout_ms=60_000)
    faults["write_after_read_only"] = res[0].faults
    ctx.run("CHANGE_PTE_MAPPING", uuid=g, va=r.base, mapping=lib.UVM_TEST_PTE_MAPPING_INVALID)
    res = s.sg.sm_access(s.channels[0], [softgpu.Access.read(r.base, sglib.PAGE, seed=0xC4B)], check=True,
                         timeout_ms=60_000)
    faults["read_after_invalid"] = res[0].faults
    ctx.details["faults"] = faults
    expect(faults["write_after_read_only"] > 0, "an SM write to a read-only PTE raised no fault")
    expect(faults["read_after_invalid"] > 0, "an SM read of an invalidated PTE raised no fault")
    n, first = sglib.pattern_mismatches(r, 0xC4B, 0, sglib.PAGE)
    expect(n == 0, f"the CPU reads {n} words that differ from GPU0's write, first at 0x{first:x}")
    n, first = sglib.pattern_mismatches(r, 0xC4A, sglib.PAGE, r.size - sglib.PAGE)
    expect(n == 0, f"the CPU reads {n} words that differ in the untouched pages, first at 0x{first:x}")


def run_get_reenable_lapse(ctx: Ctx) -> None:
    ctx.details["reenable_lapse_ms"] = int(ctx.run("GET_PREFETCH_FAULTS_REENABLE_LAPSE").reenable_lapse)


def run_set_reenable_lapse(ctx: Ctx) -> None:
    lapse = int(ctx.run("GET_PREFETCH_FAULTS_REENABLE_LAPSE").reenable_lapse)
    ctx.run("SET_PREFETCH_FAULTS_REENABLE_LAPSE", reenable_lapse=lapse + 1)
    now = int(ctx.run("GET_PREFETCH_FAULTS_REENABLE_LAPSE").reenable_lapse)
    ctx.run("SET_PREFETCH_FAULTS_REENABLE_LAPSE", reenable_lapse=lapse)
    expect(now == lapse + 1, f"reenable lapse set to {lapse + 1}, read back {now}")


def run_check_channel_va_space(ctx: Ctx) -> None:
    assert ctx.session is not None
    for g, chan in zip(ctx.gpus, ctx.session.channels, strict=True):
        ctx.run("CHECK_CHANNEL_VA_SPACE", gpu_uuid=g, rm_ctrl_fd=-1, client=ctx.client, channel=chan.handle,
                ve_id=0, va_space_fd=ctx.u.fd)


def run_peer_identity_mappings(ctx: Ctx) -> None:
    """Volta copies between peers virtually, through identity mappings of each peer's memory, which the test
    writes and reads. Ampere copies physically by default (uvm_peer_copy=phys: PEERMEM), makes no identity
    mappings, and the test answers NV_WARN_NOTHING_TO_DO (uvm_peer_identity_mappings_test.c)."""
    assert ctx.session is not None
    ok = uvm.status_code("NV_WARN_NOTHING_TO_DO") if sglib.ARCH == "ampere" else uvm.NV_OK
    for a, b in ctx.session.pairs():
        ctx.run("PEER_IDENTITY_MAPPINGS", ok=(ok,), gpuA=a, gpuB=b)
    ctx.details["expected_status"] = "NV_WARN_NOTHING_TO_DO (physical peer copies)" if ok else "NV_OK"


def run_nvlink_toggle(name: str) -> Callable[[Ctx], None]:
    def run(ctx: Ctx) -> None:
        assert ctx.session is not None
        pairs = ctx.session.pairs("nvlink2")
        if not pairs:
            pytest.skip("no NVLink pair among the emulated GPUs")
        for a, b in pairs:
            ctx.run(name, gpuUuidA=a, gpuUuidB=b)
    return run


# ---- the table, in stage order ----------------------------------------------------------------------------

def run_inject_tools_event(version: int) -> Callable[[Ctx], None]:
    """INJECT_TOOLS_EVENT (V1 queues) / INJECT_TOOLS_EVENT_V2 (570+): the test writes ``count`` copies of the
    entry it is given into the VA space's queues of that version (uvm_tools.c uvm_test_inject_tools_event*) and
    nothing else; a tools event queue on /dev/nvidia-uvm-tools reads them back. Checked: every copy arrives
    byte for byte; an event type the queue has not enabled arrives nowhere; a queue of 8 entries keeps 7 (one
    is always left free) and counts the rest in its control area's ``dropped[type]``; a queue of the other
    version sees none of them."""
    def run(ctx: Ctx) -> None:
        f = uvm.ffi()
        evict_t, migrate_t = uvm.constant("UvmEventTypeEviction"), uvm.constant("UvmEventTypeMigration")
        name = "INJECT_TOOLS_EVENT_V2" if version == 2 else "INJECT_TOOLS_EVENT"
        field_name, info_t = ("entry_v2", "UvmEventEvictionInfo_V2 *") if version == 2 \
            else ("entry", "UvmEventEvictionInfo *")
        magic = 0x7E57_0000_0000 + version * CHUNK     # an address no real eviction of this suite reports

        def inject(event_type: int, count: int, src: int = 3, dst: int = 0) -> None:
            p = uvm.new_params(f"UVM_TEST_{name}", count=count)
            info = f.cast(info_t, f.addressof(p, field_name))
            info.eventType, info.srcIndex, info.dstIndex = event_type, src, dst
            info.addressOut, info.addressIn, info.size, info.timeStamp = magic, magic + 4096, CHUNK, 12345
            ctx.u.call(f"UVM_TEST_{name}", p)

        def ours(q: uvm.ToolsEventQueue) -> list[uvm.ToolsEvent]:
            # the tier variant may evict for real meanwhile: only the injected entries count
            return [e for e in q.read() if e.type != evict_t or q.eviction(e).address == magic]

        other = 1 if version == 2 else (2 if sglib.BRANCH >= 570 else 0)
        with uvm.ToolsEventQueue(ctx.u, 64, version=version) as q, \
                (uvm.ToolsEventQueue(ctx.u, 64, version=other) if other else _nothing()) as q_other:
            q.enable(evict_t)
            if q_other is not None:
                q_other.enable(evict_t)
            inject(evict_t, 5, src=7, dst=1)
            got = ours(q)
            expect(len(got) == 5, f"{len(got)} of 5 injected eviction events read back")
            ev = q.eviction(got[0])
            expect((ev.src, ev.dst, ev.address, ev.address_in, ev.size, ev.timestamp)
                   == (7, 1, magic, magic + 4096, CHUNK, 12345), f"injected entry read back as {ev}")
            expect(all(e.raw == got[0].raw for e in got), "the 5 injected copies differ")
            if q_other is not None:
                expect(not ours(q_other), f"a V{other} queue received V{version} injected events")
            inject(migrate_t, 3)
            got = ours(q)
            expect(not got, f"{len(got)} events of a type the queue did not enable arrived")
            ctx.details["read_back"] = 5
        if ctx.tier:
            return
        with uvm.ToolsEventQueue(ctx.u, 8, version=version) as small:
            small.enable(evict_t)
            inject(evict_t, 10)
            got = ours(small)
            expect(len(got) == 7 and small.dropped(evict_t) == 3,
                   f"a queue of 8 entries took {len(got)} of 10 and dropped {small.dropped(evict_t)} (7 and 3)")
            ctx.details["full_queue"] = {"kept": len(got), "dropped": small.dropped(evict_t)}
    return run


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NO_CC = "needs Confidential Computing (SEC2, CSL): the software GPU runs with CC off"
NO_NUMA = "needs GPU memory onlined as a NUMA node: the software GPU reports numaEnabled=0"
NO_ACCESS_COUNTERS = "needs access-counter notifications, which the software GPU does not raise"
NO_HMM = "HMM/ATS only: the Debian 6.1 guest kernel has no CONFIG_DEVICE_PRIVATE, x86 has no ATS"

BUILTINS: list[Builtin] = [
    # 1. pure CPU: module load, UVM_INITIALIZE, no GPU
    Builtin("RNG_SANITY", 1, "pure CPU", "uvm_cpu"),
    Builtin("RANGE_TREE_DIRECTED", 1, "pure CPU", "uvm_cpu"),
    Builtin("RANGE_TREE_RANDOM", 1, "pure CPU", "uvm_cpu", each(dict(
        seed=1, main_iterations=300, verbose=0, high_probability=80, add_remove_shrink_group_probability=50,
        shrink_probability=20, collision_checks=8, iterator_checks=8, max_end=(1 << 20) - 1, max_ranges=64,
        max_batch_count=8, max_attempts=16))),
    Builtin("LOCK_SANITY", 1, "pure CPU", "uvm_cpu"),
    Builtin("PERF_UTILS_SANITY", 1, "pure CPU", "uvm_cpu"),
    Builtin("KVMALLOC", 1, "pure CPU", "uvm_cpu"),
    Builtin("PERF_EVENTS_SANITY", 1, "pure CPU", "uvm_cpu"),
    Builtin("PERF_MODULE_SANITY", 1, "pure CPU", "uvm_cpu", run=run_perf_module_sanity),
    Builtin("RANGE_ALLOCATOR_SANITY", 1, "pure CPU", "uvm_cpu", each(dict(verbose=0, seed=1, iters=200))),
    Builtin("NV_KTHREAD_Q", 1, "pure CPU", "uvm_cpu"),
    Builtin("RANGE_GROUP_TREE", 1, "pure CPU", "uvm_cpu", run=run_range_group_tree),
    Builtin("THREAD_CONTEXT_SANITY", 1, "pure CPU", "uvm_cpu", each(dict(iterations=100))),
    Builtin("THREAD_CONTEXT_PERF", 1, "pure CPU", "uvm_cpu", each(dict(iterations=100, delay_us=0))),
    Builtin("RB_TREE_DIRECTED", 1, "pure CPU", "uvm_cpu"),
    Builtin("RB_TREE_RANDOM", 1, "pure CPU", "uvm_cpu",
            each(dict(iterations=2000, range_max=(1 << 20) - 1, node_limit=64, seed=1))),
    Builtin("PAGE_TREE", 1, "pure CPU", "uvm_cpu"),
    Builtin("GET_USER_SPACE_END_ADDRESS", 1, "pure CPU", "uvm_cpu", check=check_positive("user_space_end_address")),
    Builtin("GET_CPU_CHUNK_ALLOC_SIZES", 1, "pure CPU", "uvm_cpu", check=check_positive("alloc_size_mask")),
    # 2. RM API only: UVM_REGISTER_GPU (init pushes, semaphores, page-tree memset, PMA) is the fixture
    # CHANNEL_SANITY ends with test_rc, which destroys and re-creates each GPU's channel manager: work
    # tracked by the old channels (e.g. in PMM's free chunks) would then name channels that no longer
    # exist, so it runs first, on GPUs registered for it alone (as NVIDIA's test runner does), and the GPUs
    # are torn down after it.
    # (listed in stage 2 because it must come before the stage-2 tests open their shared session)
    Builtin("CHANNEL_SANITY", 2, "host/CE/channels", "fresh"),
    # (swizz_id, a MIG partition, is gone from the params on 580)
    Builtin("GET_GPU_REF_COUNT", 2, "RM API", "uvm_gpus",
            per_gpu(lambda c, g: {"gpu_uuid": g, **({"swizz_id": 0} if sglib.BRANCH != 580 else {})}),
            check_ref_count),
    Builtin("RM_MEM_SANITY", 2, "RM API", "uvm_gpus"),
    Builtin("GPU_SEMAPHORE_SANITY", 2, "RM API", "uvm_gpus"),
    Builtin("GET_GPU_TIME", 2, "RM API", "uvm_gpus", per_gpu(gpu_uuid), check_gpu_time),
    Builtin("PMM_QUERY", 2, "RM API", "uvm_gpus",
            per_gpu(lambda c, g: {"gpu_uuid": g, "key": uvm.lib().UVM_TEST_CHUNK_SIZE_GET_USER_SIZE}),
            check_pmm_query),
    Builtin("PMM_QUERY_PMA_STATS", 2, "RM API", "uvm_gpus", per_gpu(gpu_uuid), check_pma_stats),
    Builtin("PMA_GET_BATCH_SIZE", 2, "RM API", "uvm_gpus", per_gpu(gpu_uuid), check_positive("pma_batch_size")),
    Builtin("NUMA_GET_CLOSEST_CPU_NODE_TO_GPU", 2, "RM API", "uvm_gpus",
            per_gpu(lambda c, g: {"gpu_uuid": g, "client": c.client, "smc_part_ref": 0}), branches=(535,)),
    # 3. host, CE and channels
    Builtin("HOST_SANITY", 3, "host/CE/channels", "uvm_gpus"),
    Builtin("CE_SANITY", 3, "host/CE/channels", "uvm_gpus", each(dict(skipTimestampTest=0))),
    Builtin("TRACKER_SANITY", 3, "host/CE/channels", "uvm_gpus"),
    Builtin("PUSH_SANITY", 3, "host/CE/channels", "uvm_gpus", each(dict(skipTimestampTest=0))),
    Builtin("CHANNEL_STRESS", 3, "host/CE/channels", "uvm_gpus", run=run_channel_stress),
    # 4. GPU VA spaces registered: MMU, uvm_mem, PMM
    Builtin("MEM_SANITY", 4, "MMU/uvm_mem"),
    Builtin("INVALIDATE_TLB", 4, "MMU/uvm_mem", run=run_invalidate_tlb),
    Builtin("PMM_SANITY", 4, "PMM/PMA", run=run_pmm_sanity),
    Builtin("PMM_CHECK_LEAK", 4, "PMM/PMA", "session",
            per_gpu(lambda c, g: {"gpu_uuid": g, "chunk_size": 2 * MIB, "alloc_limit": -1}), check_leak),
    Builtin("PMM_ASYNC_ALLOC", 4, "PMM/PMA", "session",
            per_gpu(lambda c, g: {"gpu_uuid": g, "num_chunks": 8, "num_work_iterations": 4})),
    Builtin("PMM_ALLOC_FREE_ROOT", 4, "PMM/PMA", "session",
            per_gpu(lambda c, g: {"gpu_uuid": g, "nap_us_before_free": 0})),
    Builtin("PMM_RELEASE_FREE_ROOT_CHUNKS", 4, "PMM/PMA", "session", per_gpu(gpu_uuid)),
    Builtin("PMM_SYSMEM", 4, "PMM/PMA", run=run_pmm_sysmem, branches=(535,)),
    Builtin("CPU_CHUNK_API", 4, "PMM/PMA"),
    Builtin("VA_BLOCK", 4, "MMU/uvm_mem"),
    Builtin("GET_KERNEL_VIRTUAL_ADDRESS", 4, "MMU/uvm_mem", check=check_positive("addr")),
    # 5. peers (>= 2 GPUs)
    Builtin("PEER_IDENTITY_MAPPINGS", 5, "peers", run=run_peer_identity_mappings, min_gpus=2),
    Builtin("PEER_REF_COUNT", 5, "peers", params=per_pair(lambda c, a, b: {"gpu_uuid_1": a, "gpu_uuid_2": b}),
            min_gpus=2),
    Builtin("DISABLE_NVLINK_PEER_ACCESS", 5, "peers", run=run_nvlink_toggle("DISABLE_NVLINK_PEER_ACCESS"),
            min_gpus=2),
    Builtin("ENABLE_NVLINK_PEER_ACCESS", 5, "peers", run=run_nvlink_toggle("ENABLE_NVLINK_PEER_ACCESS"),
            min_gpus=2),
    # 6. managed memory: residency, eviction, PMA with eviction
    Builtin("VA_RANGE_INFO", 6, "residency/VA", run=run_va_range_info),
    Builtin("VA_BLOCK_INFO", 6, "residency/VA", run=run_va_block_info),
    Builtin("VA_RESIDENCY_INFO", 6, "residency/VA", run=run_va_residency_info),
    Builtin("EVICT_CHUNK", 6, "PMM/PMA", run=run_evict_chunk),
    Builtin("PMA_ALLOC_FREE", 6, "PMM/PMA", run=run_pma_alloc_free),
    Builtin("PMM_REVERSE_MAP", 6, "PMM/PMA", run=run_pmm_reverse_map),
    Builtin("FLUSH_DEFERRED_WORK", 6, "residency/VA", "session",
            each(dict(work_type=1))),  # UvmTestDeferredWorkTypeAcessedByMappings
    Builtin("GET_PAGE_THRASHING_POLICY", 6, "residency/VA"),
    # managed memory with NVIDIA's error injection and policy knobs (issue 26: paths huvm's glue hooks)
    Builtin("VA_RANGE_SPLIT", 6, "residency/VA", run=run_va_range_split),
    Builtin("VA_RANGE_INJECT_SPLIT_ERROR", 6, "residency/VA", run=run_va_range_inject_split_error),
    Builtin("VA_BLOCK_INJECT_ERROR", 6, "PMM/PMA", run=run_va_block_inject_error),
    Builtin("PMM_INJECT_PMA_EVICT_ERROR", 6, "PMM/PMA", run=run_pmm_inject_pma_evict_error),
    Builtin("SET_PAGE_THRASHING_POLICY", 6, "residency/VA", run=run_page_thrashing_policy),
    Builtin("SET_PAGE_PREFETCH_POLICY", 6, "residency/VA", run=run_page_prefetch_policy),
    # tools events: a queue on /dev/nvidia-uvm-tools reads back what the tests inject (V2 queues since 570)
    Builtin("INJECT_TOOLS_EVENT", 6, "tools events", run=run_inject_tools_event(1)),
    Builtin("INJECT_TOOLS_EVENT_V2", 6, "tools events", run=run_inject_tools_event(2), branches=(580,)),
    Builtin("CHANGE_PTE_MAPPING", 7, "faults", run=run_change_pte_mapping),
    # 7. faults
    Builtin("FAULT_BUFFER_FLUSH", 7, "faults", "session", each(dict(iterations=10))),
    Builtin("CHECK_CHANNEL_VA_SPACE", 7, "faults", run=run_check_channel_va_space),
    Builtin("DRAIN_REPLAYABLE_FAULTS", 7, "faults", "session",
            per_gpu(lambda c, g: {"gpu_uuid": g, "timeout_ns": 10**9})),
    Builtin("TOOLS_FLUSH_REPLAY_EVENTS", 7, "faults", "session", per_gpu(lambda c, g: {"gpuUuid": g})),
    Builtin("GET_PREFETCH_FAULTS_REENABLE_LAPSE", 7, "faults", run=run_get_reenable_lapse),
    Builtin("SET_PREFETCH_FAULTS_REENABLE_LAPSE", 7, "faults", run=run_set_reenable_lapse),
    # declared not run
    Builtin("SEC2_SANITY", 8, "out of scope", not_run=NO_CC),
    Builtin("SEC2_CPU_GPU_ROUNDTRIP", 8, "out of scope", not_run=NO_CC),
    Builtin("GET_RM_PTES", 8, "out of scope",
            not_run="needs RM external allocations (nvUvmInterfaceGetExternalAllocPtes is not emulated)"),
    Builtin("PMM_INDIRECT_PEERS", 8, "out of scope", not_run=NO_NUMA, branches=(535,)),
    Builtin("NUMA_CHECK_AFFINITY", 8, "out of scope", not_run=NO_NUMA),
    Builtin("PMM_CHUNK_WITH_ELEVATED_PAGE", 8, "out of scope", not_run=NO_NUMA),
    Builtin("RECONFIGURE_ACCESS_COUNTERS", 8, "out of scope", not_run=NO_ACCESS_COUNTERS),
    Builtin("RESET_ACCESS_COUNTERS", 8, "out of scope", not_run=NO_ACCESS_COUNTERS),
    Builtin("SET_IGNORE_ACCESS_COUNTERS", 8, "out of scope", not_run=NO_ACCESS_COUNTERS),
    Builtin("ACCESS_COUNTERS_ENABLED_BY_DEFAULT", 8, "out of scope", not_run=NO_ACCESS_COUNTERS),
    Builtin("SKIP_MIGRATE_VMA", 8, "out of scope", not_run=NO_HMM),
    Builtin("GET_PAGEABLE_MEM_ACCESS_TYPE", 8, "out of scope", not_run=NO_HMM),
    Builtin("REGISTER_UNLOAD_STATE_BUFFER", 8, "out of scope",
            not_run="reports at module unload, which this suite does not do"),
    Builtin("INCREMENT_TOOLS_COUNTER", 8, "out of scope", not_run="tools counters are not part of this suite"),
    Builtin("DESTROY_GPU_VA_SPACE_DELAY", 8, "out of scope", not_run="a race-window knob for other tests"),
    Builtin("SPLIT_INVALIDATE_DELAY", 8, "out of scope", not_run="a race-window knob for other tests"),
    Builtin("CGROUP_ACCOUNTING_SUPPORTED", 8, "out of scope", not_run="cgroup accounting is not emulated here"),
]

NOT_IN_SUITE = "not in this suite: needs a dedicated scenario"


# The tests of the loaded nvidia-uvm's branch (580 dropped PMM_SYSMEM, PMM_INDIRECT_PEERS and
# NUMA_GET_CLOSEST_CPU_NODE_TO_GPU; its new tests are listed as not in the suite). An unknown branch runs
# the whole table: a missing test then fails by name.
SUITE: list[Builtin] = [b for b in BUILTINS if sglib.BRANCH not in (535, 580) or sglib.BRANCH in b.branches]


def _register_table() -> None:
    names = [b.name for b in BUILTINS]
    assert len(names) == len(set(names)), "a built-in test is listed twice"
    for b in SUITE:
        sglib.BUILTIN_RESULTS[b.name] = sglib.BuiltinResult(b.name, b.stage, b.group,
                                                            reason=b.not_run or "not reached: deselected or stopped")
    # Every other UVM_TEST_* the binding knows is listed too (never passed).
    try:
        known = uvm.test_names()
    except Exception:  # the binding is missing: the tests themselves will say so
        return
    for name in known:
        if name not in sglib.BUILTIN_RESULTS:
            sglib.BUILTIN_RESULTS[name] = sglib.BuiltinResult(name, 9, "not in suite", reason=NOT_IN_SUITE)


_register_table()


def run_builtin(builtin: Builtin, ctx: Ctx) -> list[str]:
    """Run one built-in (its own runner, or the ioctl with each parameter set and its check) in ctx; the kernel
    log lines it produced. ctx's managed regions are closed after it."""
    with sglib.kmsg_window() as kmsg:
        try:
            if builtin.run is not None:
                builtin.run(ctx)
            else:
                for fields in list(builtin.params(ctx)) if builtin.params else [{}]:
                    params = ctx.run(builtin.name, **fields)
                    if builtin.check is not None:
                        builtin.check(ctx, fields, params)
            return kmsg.read()
        finally:
            for r in ctx.managed:
                r.close()


# Tests declared "not run" are listed in the table with their reason but are not test cases: a skip of a qemu
# test is a failure in CI, and these are not skipped by chance but out of the emulator's scope.
@pytest.mark.parametrize("builtin", [b for b in SUITE if not b.not_run], ids=repr)
def test_builtin(builtin: Builtin, request: pytest.FixtureRequest) -> None:
    if builtin.fd == "uvm_cpu":
        ctx = Ctx(request.getfixturevalue("uvm_cpu"), None, None)
    elif builtin.fd == "fresh":
        s = sglib.open_session(request.getfixturevalue("sg"), va_spaces=False)
        request.addfinalizer(lambda: sglib.close_session(s))
        ctx = Ctx(s.uvm, s.sg, s)
    else:
        s = request.getfixturevalue(builtin.fd)
        ctx = Ctx(s.uvm, s.sg, s)
        if len(s.gpus) < builtin.min_gpus:
            pytest.skip(f"needs >= {builtin.min_gpus} GPUs, the software GPU has {len(s.gpus)}")
    try:
        log = run_builtin(builtin, ctx)
    finally:
        if ctx.details:
            sglib.BUILTIN_RESULTS[builtin.name].details = ctx.details
    # No UVM assert or kernel report during a built-in test, except the asserts NVIDIA's test provokes on
    # purpose (sglib.PROVOKED_ASSERTS), which must then be there: a provoked assert that no longer shows means
    # the list is stale.
    provoked = sglib.PROVOKED_ASSERTS.get(builtin.name)
    bad = sglib.bad_lines(log, provoked)
    assert not bad, f"{builtin.name}: {len(bad)} kernel log lines of asserts/reports: " + " | ".join(bad[:4])
    if provoked is not None:
        assert any(provoked.search(ln) for ln in log), \
            f"{builtin.name}: the asserts it provokes on purpose did not show ({provoked.pattern[:60]}...)"
