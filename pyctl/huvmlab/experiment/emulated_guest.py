"""The emulated node's guest side: experiment tenants replayed through NVIDIA's real nvidia-uvm.

This runs INSIDE the qemu test bed's guest, with huvm-softgpu.ko (the software GPUs, docs/softgpu.md) and one
nvidia-uvm.ko loaded. Each tenant of a run is a guest process (forked from the runner) with its own UVM VA
space: every emulated GPU of the experiment registered in it (so the peer tier can use them: docs/driver.md,
"What the tier needs from CUDA"), PCIe peers enabled, a GPU VA space and an SM channel on its own GPU, and
its trace's address space as managed memory mapped through the UVM fd. Then, op by op:

- the op's chunk touches become emulated-SM accesses on its channel, one 4 KiB page each (reads translate
  the page; writes and read-modify-writes write it), issued as one batch per op so UVM services real fault
  batches (faults go through UVM's replayable-fault path: migration, eviction, the huvm hooks);
- ops whose phase is ``cpu`` or ``cpu.*`` touch their pages from the CPU instead (CPU faults into UVM);
- the op's compute time (scaled by ``time_scale``) is slept;
- chunks the trace frees after the op are unmapped (munmap) and mapped again at once, unpopulated: UVM
  frees their memory (a free segment of the caching allocator, ``empty_cache``).

A tenant's ``static`` bytes (scaled, in whole 2 MiB pieces) are a foreign allocation on its GPU (the
software GPU's FOREIGN_ALLOC: pinned PMA memory, allocated like another process's cudaMalloc, so UVM may
have to evict for it); a tenant with ``managed = false`` holds its whole scaled footprint that way and
issues no accesses (cudaMalloc'd memory is resident and never faults).

Byte sizes are scaled: a trace's 2 MiB chunk is ``chunk_bytes`` here (``huvmlab.experiment.executor.scale_bytes``
of 2 MiB: whole pages). The replay plan (:func:`build_plan`) is pure numpy and is tested on the host.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from huvm import errors

PAGE = 4096
#: UVM's VA block and root chunk: the unit of residency and of huvm's counters
BLOCK = 2 << 20

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


# ---- the replay plan (pure: no device) --------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayPlan:
    """One tenant's trace in the form the guest replays: per op, runs of consecutive pages to touch (a run
    is one access type), the pages freed after it, its compute time in ns (already scaled), and whether the
    CPU runs it. Pages are relative to the tenant's managed region (page p is at base + p * 4096); trace
    chunk c is pages [c * pages_per_chunk, (c + 1) * pages_per_chunk)."""

    name: str
    chunk_bytes: int
    n_chunks: int
    op_time_ns: I64
    run_first: I64  # [n_ops + 1]: op i's runs are run_page[run_first[i]:run_first[i + 1]]
    run_page: I64
    run_pages: I64
    run_write: BoolArray
    free_first: I64  # [n_ops + 1]
    free_page: I64
    free_pages: I64
    cpu_op: BoolArray
    touches: I64  # trace chunk touches per op
    touched_chunks: I64  # every chunk the trace touches, ascending (the residency census samples them)

    @property
    def n_ops(self) -> int:
        return int(self.op_time_ns.shape[0])

    @property
    def pages_per_chunk(self) -> int:
        return self.chunk_bytes // PAGE

    @property
    def region_bytes(self) -> int:
        """The managed region: every chunk, rounded up to whole 2 MiB VA blocks."""
        n = self.n_chunks * self.chunk_bytes
        return max(BLOCK, -(-n // BLOCK) * BLOCK)

    @property
    def footprint_bytes(self) -> int:
        return self.n_chunks * self.chunk_bytes

    @property
    def compute_ns(self) -> int:
        return int(self.op_time_ns.sum())

    def op_pages(self, op: int) -> tuple[I64, BoolArray]:
        """(pages, write flags) op touches, in trace order: one entry per page."""
        a, b = int(self.run_first[op]), int(self.run_first[op + 1])
        counts = self.run_pages[a:b]
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
        starts = np.repeat(self.run_page[a:b], counts)
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return starts + offsets, np.repeat(self.run_write[a:b], counts)

    def all_pages(self) -> tuple[I64, BoolArray, I64]:
        """Every op's pages at once: (pages, write flags, op_first) where op i's pages are
        pages[op_first[i]:op_first[i + 1]] (the concatenation of :meth:`op_pages` over the ops)."""
        counts = self.run_pages
        total = int(counts.sum())
        cum = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        cum[1:] = np.cumsum(counts)
        op_first = cum[self.run_first]
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_), op_first
        starts = np.repeat(self.run_page, counts)
        offsets = np.arange(total, dtype=np.int64) - np.repeat(cum[:-1], counts)
        return starts + offsets, np.repeat(self.run_write, counts), op_first

    def op_frees(self, op: int) -> list[tuple[int, int]]:
        """(first page, pages) runs freed after op."""
        a, b = int(self.free_first[op]), int(self.free_first[op + 1])
        return [(int(p), int(n)) for p, n in zip(self.free_page[a:b], self.free_pages[a:b], strict=True)]


def _runs(op_of: I64, chunk: I64, flag: BoolArray, n_ops: int, ppc: int) -> tuple[I64, I64, I64, BoolArray]:
    """Coalesce consecutive entries of the same op, the same flag and consecutive chunks into runs:
    (run_first per op, first page, pages, flag)."""
    n = chunk.shape[0]
    if n == 0:
        return np.zeros(n_ops + 1, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), \
            np.zeros(0, np.bool_)
    brk = np.ones(n, dtype=np.bool_)
    brk[1:] = (op_of[1:] != op_of[:-1]) | (chunk[1:] != chunk[:-1] + 1) | (flag[1:] != flag[:-1])
    starts = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts, n))
    run_op = op_of[starts]
    first = np.zeros(n_ops + 1, dtype=np.int64)
    first[1:] = np.cumsum(np.bincount(run_op, minlength=n_ops))
    return first, chunk[starts].astype(np.int64) * ppc, lengths.astype(np.int64) * ppc, flag[starts]


def build_plan(sim: Any, chunk_bytes: int, time_scale: float = 1.0,
               cpu_ops: npt.NDArray[np.bool_] | None = None) -> ReplayPlan:
    """The replay plan of a :class:`huvmlab.traces.trace.SimTrace` with each 2 MiB trace chunk scaled to
    ``chunk_bytes`` (whole pages) and every op's compute time multiplied by ``time_scale``.

    Touch modes: 0 (read) is a read; 1 (write of new data) and 2 (read-modify-write) are writes.
    ``cpu_ops``: ops the CPU runs (default none)."""
    if chunk_bytes <= 0 or chunk_bytes % PAGE:
        raise errors.UsageError(f"a scaled chunk must be whole 4 KiB pages, not {chunk_bytes} bytes")
    if not 0 < time_scale <= 1:
        raise errors.UsageError(f"time_scale {time_scale} is not in (0, 1]")
    n_ops = int(sim.op_time_ns.shape[0])
    ppc = chunk_bytes // PAGE
    first = np.asarray(sim.op_first_touch, dtype=np.int64)
    counts = np.diff(first)
    op_of = np.repeat(np.arange(n_ops, dtype=np.int64), counts)
    chunk = np.asarray(sim.touch_chunk, dtype=np.int64)
    write = np.asarray(sim.touch_mode) != 0
    run_first, run_page, run_pages, run_write = _runs(op_of, chunk, write, n_ops, ppc)
    free_op = np.asarray(sim.chunk_free_op, dtype=np.int64)
    freed = np.flatnonzero(free_op >= 0)
    order = np.lexsort((freed, free_op[freed]))  # by op, then chunk
    fchunks = freed[order].astype(np.int64)
    fops = free_op[fchunks]
    free_first, free_page, free_pages, _ = _runs(fops, fchunks, np.zeros(fchunks.shape[0], np.bool_), n_ops, ppc)
    op_time = np.asarray(sim.op_time_ns, dtype=np.float64) * time_scale
    if cpu_ops is None:
        cpu = np.zeros(n_ops, dtype=np.bool_)
    else:
        cpu = np.asarray(cpu_ops, dtype=np.bool_)
        if cpu.shape != (n_ops,):
            raise errors.UsageError(f"cpu_ops has {cpu.shape[0]} entries for {n_ops} ops")
    return ReplayPlan(str(sim.name), chunk_bytes, int(sim.chunk_alloc_op.shape[0]),
                      np.rint(op_time).astype(np.int64), run_first, run_page, run_pages, run_write,
                      free_first, free_page, free_pages, cpu, counts.astype(np.int64),
                      np.unique(chunk) if chunk.size else np.zeros(0, np.int64))


def cpu_phase_ops(phases: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Ops a CPU runs: phase ``cpu`` or ``cpu.<anything>`` (the trace format's op phase)."""
    return np.array([p == "cpu" or p.startswith("cpu.") for p in phases], dtype=np.bool_)


def whole_blocks(nbytes: int) -> int:
    """nbytes rounded up to whole 2 MiB pieces (foreign allocations are made of 2 MiB PMA pages)."""
    return -(-nbytes // BLOCK) * BLOCK if nbytes > 0 else 0


# ---- the SM access array (numpy, the layout of softgpu_access_t) -----------------------------------------

def access_dtype() -> np.dtype[Any]:
    """softgpu_access_t as a numpy structured dtype (offsets from the compiled header)."""
    from huvm import abi

    f = abi.ffi
    fields = {"va": "<u8", "size": "<u8", "data": "<u8", "seed": "<u8", "type": "<u4", "flags": "<u4",
              "status": "<u4", "faults": "<u4", "mismatches": "<u8", "first_mismatch_va": "<u8", "value": "<u8"}
    return np.dtype({"names": list(fields), "formats": list(fields.values()),
                     "offsets": [f.offsetof("softgpu_access_t", n) for n in fields],
                     "itemsize": f.sizeof("softgpu_access_t")})


@dataclass
class AccessTotals:
    accesses: int = 0
    faulted: int = 0      # accesses that raised at least one fault entry
    fault_entries: int = 0
    ioctls: int = 0
    stall_ns: int = 0     # wall time inside SM_ACCESS


#: softgpu_access_t as 9 little-endian 64-bit words: va, size, data, seed, type | flags << 32,
#: status | faults << 32, mismatches, first_mismatch_va, value (checked against the header by access_array)
_WORDS = 9
_OFFSETS = {"va": 0, "size": 8, "data": 16, "seed": 24, "type": 32, "flags": 36, "status": 40, "faults": 44,
            "mismatches": 48, "first_mismatch_va": 56, "value": 64}


def access_array(base: int, pages: I64, write: BoolArray, seed: int = 0) -> npt.NDArray[Any]:
    """One SM access per page (8 bytes at the page's start: a read translates the page, a write stores the
    seed pattern there), as softgpu_access_t entries."""
    from huvm import abi

    lib = abi.lib
    dt = access_dtype()
    n = int(pages.shape[0])
    fields: Any = dt.fields or {}
    if dt.itemsize == _WORDS * 8 and all(fields[k][1] == off for k, off in _OFFSETS.items()) \
            and int(lib.SOFTGPU_ACCESS_READ) == 0 and int(lib.SOFTGPU_ACCESS_WRITE) == 1:
        words = np.zeros((n, _WORDS), dtype=np.uint64)  # whole columns at once: fast for millions of pages
        np.multiply(pages, PAGE, out=words[:, 0], casting="unsafe")
        words[:, 0] += np.uint64(base)
        words[:, 1] = 8
        words[:, 3] = seed
        words[:, 4] = write
        return words.reshape(-1).view(dt)
    arr = np.zeros(n, dtype=dt)
    arr["va"] = np.uint64(base) + pages.astype(np.uint64) * np.uint64(PAGE)
    arr["size"] = 8
    arr["seed"] = seed
    arr["type"] = np.where(write, int(lib.SOFTGPU_ACCESS_WRITE), int(lib.SOFTGPU_ACCESS_READ))
    return arr


@dataclass(frozen=True)
class Accesses:
    """A plan's SM accesses for its region at REGION_BASE, built once (the runner builds them before it
    forks the tenants, which share them copy-on-write)."""

    pages: I64
    write: BoolArray
    op_first: list[int]
    arr: npt.NDArray[Any]


#: every tenant maps its managed region here (each tenant is its own process): the access arrays are
#: built once, not per run. 16 TiB: above the heap, far below the mmap area and the 47-bit user limit.
REGION_BASE = 1 << 44


def plan_accesses(plan: ReplayPlan, seed: int) -> Accesses:
    pages, write, first = plan.all_pages()
    return Accesses(pages, write, first.tolist(), access_array(REGION_BASE, pages, write, seed))


class SmIssuer:
    """Issues slices of an access array on one channel (one params struct, reused; SOFTGPU_MAX_ACCESSES per
    ioctl) and accounts them: :meth:`collect` checks statuses and counts faults of what ran since the last
    collect (the kernel resets an entry's outputs when it runs it, so an array can be issued again)."""

    def __init__(self, sg: Any, channel: int, timeout_ms: int = 0) -> None:
        from huvm import abi

        self.sg = sg
        self.cmd = int(abi.lib.SOFTGPU_IOCTL_SM_ACCESS)
        self.limit = int(abi.lib.SOFTGPU_MAX_ACCESSES)
        self.params = sg.new("SOFTGPU_SM_ACCESS_PARAMS")
        self.params.channel = channel
        self.params.timeout_ms = timeout_ms
        self.totals = AccessTotals()

    def issue(self, arr: npt.NDArray[Any], a: int, b: int) -> None:
        """Run arr[a:b] (one batch per SOFTGPU_MAX_ACCESSES: UVM sees the faults of a batch together)."""
        t0 = time.perf_counter_ns()
        p = self.params
        addr = int(arr.ctypes.data)
        size = arr.dtype.itemsize
        for start in range(a, b, self.limit):
            p.count = min(self.limit, b - start)
            p.accesses = addr + start * size
            self.sg.call(self.cmd, p, "SOFTGPU_SM_ACCESS")
            self.totals.ioctls += 1
        self.totals.stall_ns += time.perf_counter_ns() - t0

    def collect(self, arr: npt.NDArray[Any], a: int, b: int) -> None:
        """Account arr[a:b] after it ran: a failed access raises naming its address and status."""
        from huvm import uvm

        part = arr[a:b]
        bad = np.flatnonzero(part["status"] != 0)
        if bad.size:
            i = int(bad[0])
            status = int(part["status"][i])
            raise errors.from_nv_status(status, f"SOFTGPU_SM_ACCESS at 0x{int(part['va'][i]):x} ({bad.size} of "
                                        f"{b - a} accesses failed)", uvm.nv_status_name(status))
        f = part["faults"]
        self.totals.accesses += b - a
        self.totals.faulted += int(np.count_nonzero(f))
        self.totals.fault_entries += int(f.sum())


def cpu_touch_pages(view: memoryview, pages: I64, write: BoolArray) -> None:
    """Touch pages from the CPU through the managed mapping (CPU faults into UVM): a byte of every page."""
    mem = np.frombuffer(view, dtype=np.uint8)
    idx = np.asarray(pages, dtype=np.int64) * PAGE
    wr = idx[write]
    rd = idx[~write]
    if rd.size:
        int(mem[rd].sum())
    if wr.size:
        mem[wr] = 1


# ---- a tenant, in its own process ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TenantJob:
    """What one tenant process runs (sizes already scaled)."""

    name: str
    gpu: int
    steps: int  # >= 1: foreground, that many passes over the trace; 0: background, until told to stop
    start_ns: int  # after the common start (already scaled by time_scale)
    static_bytes: int  # whole 2 MiB pieces, a foreign allocation held for the run
    managed: bool
    plan: ReplayPlan | None
    n_gpus: int  # the experiment's emulated GPUs 0..n-1 (all registered in the tenant's VA space)
    seed: int = 0
    accesses: Accesses | None = None  # plan_accesses(plan, seed), built by the runner (else by the tenant)


@dataclass
class TenantOutcome:
    """What a tenant process reports when its work is done (the simulator's names where they mean the same;
    times in wall ns; ``faults``: SM accesses that faulted, ``fault_entries``: fault packets they raised)."""

    start_ns: int = 0
    end_ns: int = 0
    runtime_ns: int = 0
    steps_done: int = 0
    ops_done: int = 0
    touches: int = 0
    compute_ns: int = 0
    fault_stall_ns: int = 0
    faults: int = 0
    fault_entries: int = 0
    page_accesses: int = 0
    sm_ioctls: int = 0
    cpu_ops: int = 0
    alloc_stall_ns: int = 0
    free_ns: int = 0
    setup_ns: int = 0
    done: int = 0

    def values(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.__dict__.items() if k != "runtime_ns"}


@dataclass
class Census:
    """Where a tenant's data is at the end of a run: VA blocks (2 MiB) by the processors holding any of the
    sampled pages (the first page of every chunk the trace touched)."""

    blocks: dict[str, int] = field(default_factory=dict)  # "gpu0", "cpu", "gpu0+gpu2" -> blocks
    on: dict[str, int] = field(default_factory=dict)      # "gpuN" / "cpu" -> blocks with any sampled page there
    sampled_pages: int = 0


def _proc_name(uuid: bytes, names: dict[bytes, str]) -> str:
    return names.get(uuid, "other")


#: residency samples per 2 MiB VA block at most (the census asks UVM page by page: under TCG each query
#: costs milliseconds); evictions and fetch-backs move whole blocks' chunks, so a few pages tell where it is
CENSUS_PER_BLOCK = 16
#: The core remembers a GPU's own peak use for this long (HUVM_OWN_PEAK_WINDOW_MS, driver/core/huvm_internal.h;
#: a test checks the two agree) and lends nothing of it (LEND_ABOVE_PEAK). The GPUs stay registered from one
#: run to the next, so a run starts only this long after the previous one ended: otherwise a lender that
#: filled its memory in run n would lend nothing at the start of run n+1, and the later policies of a file
#: would run on a node the earlier ones left behind.
OWN_PEAK_WINDOW_S = 10.0


def census_pages(plan: ReplayPlan, per_block: int = CENSUS_PER_BLOCK) -> I64:
    """The pages the census samples: the first page of every chunk the trace touched, at most per_block of
    them per 2 MiB VA block, spread evenly over the block's touched chunks (always its first and last)."""
    pages = plan.touched_chunks * plan.pages_per_chunk
    if pages.size == 0:
        return pages
    block = pages // (BLOCK // PAGE)
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    counts = np.diff(np.r_[starts, pages.size])
    keep: list[I64] = []
    for s0, n in zip(starts.tolist(), counts.tolist(), strict=True):
        if n <= per_block:
            keep.append(pages[s0 : s0 + n])
        else:
            idx = np.unique(np.rint(np.linspace(0, n - 1, per_block)).astype(np.int64))
            keep.append(pages[s0 + idx])
    return np.concatenate(keep)


def census(u: Any, base: int, plan: ReplayPlan, gpus: Sequence[Any]) -> Census:
    """Residency (UVM_TEST_VA_RESIDENCY_INFO) of the census pages (:func:`census_pages`), per VA block."""
    from huvm import uvm

    names = {g.uuid: f"gpu{g.index}" for g in gpus}
    names[uvm.cpu_uuid()] = "cpu"
    per_block: dict[int, set[str]] = {}
    pages = census_pages(plan)
    for p in pages.tolist():
        addr = base + p * PAGE
        r = u.va_residency_info(addr)
        per_block.setdefault(addr // BLOCK, set()).update(_proc_name(x, names) for x in r.resident_on)
    c = Census(sampled_pages=int(pages.shape[0]))
    for places in per_block.values():
        key = "+".join(sorted(places)) or "nowhere"
        c.blocks[key] = c.blocks.get(key, 0) + 1
        for p in places:
            c.on[p] = c.on.get(p, 0) + 1
    return c


class _Sleeper:
    """Sleeps an op's compute time; owed time below 1 ms accumulates (and oversleeping is paid back)."""

    def __init__(self) -> None:
        self.owed = 0

    def compute(self, ns: int) -> None:
        self.owed += ns
        if self.owed >= 1_000_000:
            t0 = time.perf_counter_ns()
            time.sleep(self.owed / 1e9)
            self.owed -= time.perf_counter_ns() - t0


@dataclass
class TenantContext:
    """A tenant's open objects in its process (closed by :meth:`close`)."""

    sg: Any
    u: Any
    gpus: tuple[Any, ...]
    own: Any
    vas: Any = None
    chan: Any = None
    region: Any = None
    foreign: list[Any] = field(default_factory=list)

    def close(self) -> None:
        failures: list[str] = []

        def attempt(fn: Callable[[], object]) -> None:
            try:
                fn()
            except errors.HuvmError as exc:
                failures.append(str(exc))

        if self.region is not None:
            attempt(self.region.close)
        for fa in self.foreign:
            attempt(partial(self.sg.foreign_free, fa))
        self.foreign.clear()
        self.u.close()  # the VA space goes with the file: its GPU VA space, channel registration, peers
        for obj in (self.chan, self.vas):
            if obj is not None:
                attempt(partial(self.sg.destroy, obj))
        self.sg.close()
        if failures:
            raise errors.HuvmError("tenant teardown: " + "; ".join(failures))


def open_tenant(job: TenantJob) -> TenantContext:
    """The tenant's UVM VA space: every emulated GPU of the experiment registered, PCIe peers enabled, a GPU
    VA space and a registered SM channel on its own GPU, its managed region mapped (not populated)."""
    from huvm import softgpu, uvm

    sg = softgpu.SoftGpu.open()
    try:
        all_gpus = sg.info().gpus
        if len(all_gpus) < job.n_gpus:
            raise errors.DeviceUnavailable(f"the software GPU has {len(all_gpus)} GPUs, the experiment needs "
                                           f"{job.n_gpus}", reason="gpus")
        gpus = all_gpus[: job.n_gpus]
        u = uvm.Uvm.open()
    except BaseException:
        sg.close()
        raise
    ctx = TenantContext(sg, u, gpus, gpus[job.gpu])
    try:
        client = sg.client
        for g in gpus:
            u.register_gpu(g, client)
        for a in gpus:
            for b in gpus[a.index + 1 :]:
                if a.link_to(b).type == "pcie":
                    u.enable_peer_access(a, b)
        ctx.vas = sg.create_vaspace(ctx.own)
        u.register_gpu_va_space(ctx.own, client, ctx.vas.handle)
        ctx.chan = sg.create_channel(ctx.vas)
        u.register_channel(ctx.own, client, ctx.chan.handle)
        if job.plan is not None and job.managed:
            ctx.region = map_managed_at(u, REGION_BASE, job.plan.region_bytes)
    except BaseException:
        try:
            ctx.close()
        except errors.HuvmError:
            pass
        raise
    return ctx


#: mmap's MAP_FIXED_NOREPLACE (Linux 4.17+): fail rather than replace a mapping already there
MAP_FIXED_NOREPLACE = 0x100000


def map_managed_at(u: Any, base: int, size: int) -> Any:
    """Managed memory of size bytes at exactly base (the UVM fd mapped with offset == address, as uvm.c's
    uvm_mmap requires); a huvm.uvm.ManagedRegion, unmapped with the Uvm file."""
    from huvm import uvm

    f, lb = uvm.ffi(), uvm.lib()
    ptr = lb.mmap(f.cast("void *", base), size, lb.PROT_READ | lb.PROT_WRITE, lb.MAP_SHARED | MAP_FIXED_NOREPLACE,
                  u.fd, base)
    got = int(f.cast("intptr_t", ptr))
    if got == -1 or got != base:
        err = f.errno
        if got not in (-1, base):
            lb.munmap(ptr, size)
        raise errors.HuvmError(f"mmap of {u.path} at 0x{base:x} ({size} bytes): "
                               f"{os.strerror(err) if got == -1 else f'placed at 0x{got:x}'}")
    region = uvm.ManagedRegion(u, base, size)
    u.regions.append(region)
    return region


def replay(job: TenantJob, ctx: TenantContext, t0_ns: int, stop: Callable[[], bool],
           out: TenantOutcome) -> None:
    """Run the job from the common start t0_ns (perf_counter_ns): its static allocation, its start delay,
    then its trace, step after step (a background job until stop() says so)."""
    sleeper = _Sleeper()
    out.start_ns = max(0, time.perf_counter_ns() - t0_ns)
    a0 = time.perf_counter_ns()
    pinned = job.static_bytes + (whole_blocks(job.plan.footprint_bytes) if job.plan and not job.managed else 0)
    if pinned:
        fa = ctx.sg.foreign_alloc(ctx.own, pinned)
        ctx.foreign.append(fa)
        if fa.allocated < pinned:
            raise errors.NoMemory(f"tenant {job.name}: GPU{job.gpu} gave {fa.allocated >> 20} of the "
                                  f"{pinned >> 20} MiB it pins")
    out.alloc_stall_ns = time.perf_counter_ns() - a0
    wait = t0_ns + job.start_ns - time.perf_counter_ns()
    if wait > 0:
        time.sleep(wait / 1e9)
    begin = time.perf_counter_ns()
    plan = job.plan
    if plan is None or plan.n_ops == 0 or not job.managed:
        if plan is not None and job.managed is False and job.steps > 0:
            for _ in range(job.steps):  # resident memory: only the compute
                for op in range(plan.n_ops):
                    sleeper.compute(int(plan.op_time_ns[op]))
                    out.compute_ns += int(plan.op_time_ns[op])
                    out.ops_done += 1
                out.steps_done += 1
        out.runtime_ns = time.perf_counter_ns() - begin
        out.end_ns = time.perf_counter_ns() - t0_ns
        out.done = 1
        return
    region = ctx.region
    base = int(region.base)
    view = region.view() if plan.cpu_op.any() else None
    acc = job.accesses if job.accesses is not None else plan_accesses(plan, job.seed)
    if base != REGION_BASE:
        raise errors.HuvmError(f"tenant {job.name}: region at 0x{base:x}, not 0x{REGION_BASE:x}")
    pages, write, first, arr = acc.pages, acc.write, acc.op_first, acc.arr
    issuer = SmIssuer(ctx.sg, int(ctx.chan.handle))
    cpu_op = plan.cpu_op.tolist()
    op_time = plan.op_time_ns.tolist()
    touches = plan.touches.tolist()
    has_frees = plan.free_page.shape[0] > 0
    step = 0
    while job.steps == 0 or step < job.steps:
        ran = 0  # accesses issued this pass: [0, first[ran_ops])
        stopped = False
        for op in range(plan.n_ops):
            if job.steps == 0 and stop():
                stopped = True
                break
            a, b = first[op], first[op + 1]
            if cpu_op[op]:
                assert view is not None
                c0 = time.perf_counter_ns()
                cpu_touch_pages(view, pages[a:b], write[a:b])
                out.fault_stall_ns += time.perf_counter_ns() - c0
                out.cpu_ops += 1
            elif b > a:
                issuer.issue(arr, a, b)
            ran = b
            out.touches += touches[op]
            sleeper.compute(op_time[op])
            out.compute_ns += op_time[op]
            if has_frees:
                frees = plan.op_frees(op)
                if frees:
                    f0 = time.perf_counter_ns()
                    _refresh(ctx, base, frees)
                    out.free_ns += time.perf_counter_ns() - f0
            out.ops_done += 1
        _collect_sm(issuer, arr, cpu_op, first, ran)
        if stopped:
            break
        step += 1
        out.steps_done += 1
    out.runtime_ns = time.perf_counter_ns() - begin
    out.end_ns = time.perf_counter_ns() - t0_ns
    totals = issuer.totals
    out.fault_stall_ns += totals.stall_ns
    out.faults = totals.faulted
    out.fault_entries = totals.fault_entries
    out.page_accesses = totals.accesses
    out.sm_ioctls = totals.ioctls
    out.done = 1


def _collect_sm(issuer: SmIssuer, arr: npt.NDArray[Any], cpu_op: list[bool], first: list[int], end: int) -> None:
    """Account the SM accesses of a pass that ran up to access index end (CPU ops' entries never ran)."""
    if not any(cpu_op):
        issuer.collect(arr, 0, end)
        return
    for op, is_cpu in enumerate(cpu_op):
        a, b = first[op], min(first[op + 1], end)
        if a >= end:
            break
        if not is_cpu and b > a:
            issuer.collect(arr, a, b)


def _refresh(ctx: TenantContext, base: int, frees: list[tuple[int, int]]) -> None:
    """Free page runs: munmap (UVM frees their memory; a run inside a block splits it) and map them again
    at once, unpopulated, at the same address (uvm.c: the file offset is the address)."""
    from huvm import uvm

    f, lb = uvm.ffi(), uvm.lib()
    for page, n in frees:
        addr, size = base + page * PAGE, n * PAGE
        if lb.munmap(f.cast("void *", addr), size) != 0:
            raise errors.HuvmError(f"munmap(0x{addr:x}, {size}): {os.strerror(f.errno)}")
        ptr = lb.mmap(f.cast("void *", addr), size, lb.PROT_READ | lb.PROT_WRITE, lb.MAP_SHARED | lb.MAP_FIXED,
                      ctx.u.fd, addr)
        if int(f.cast("intptr_t", ptr)) == -1:
            raise errors.HuvmError(f"mmap of {ctx.u.path} at 0x{addr:x} ({size} bytes): {os.strerror(f.errno)}")


def tenant_main(job: TenantJob, conn: Any, start: Any, stop: Any, timeout_s: float) -> None:
    """A tenant process: set up, say "ready", wait for start, replay, say "done", then answer "census" and
    "exit" requests. Any failure is sent as ("error", one line) and ends the process with status 1."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    out = TenantOutcome()
    ctx: TenantContext | None = None
    try:
        s0 = time.perf_counter_ns()
        ctx = open_tenant(job)
        out.setup_ns = time.perf_counter_ns() - s0
        conn.send(("ready", job.name))
        if not start.wait(timeout_s):
            raise errors.HuvmError(f"tenant {job.name}: no start signal within {timeout_s:.0f} s")
        t0 = conn.recv()
        replay(job, ctx, int(t0), stop.is_set, out)
        conn.send(("done", out.values(), out.runtime_ns))
        while True:
            if not conn.poll(timeout_s):
                raise errors.HuvmError(f"tenant {job.name}: no request within {timeout_s:.0f} s")
            req = conn.recv()
            if req == "census":
                c = census(ctx.u, int(ctx.region.base), job.plan, ctx.gpus) if ctx.region is not None and \
                    job.plan is not None else Census()
                conn.send(("census", c.blocks, c.on, c.sampled_pages))
            elif req == "exit":
                break
        ctx.close()
        ctx = None
        conn.send(("bye", job.name))
    except BaseException as exc:  # noqa: BLE001 - reported to the runner, then the process ends
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" ({os.path.basename(where.filename)}:{where.lineno})" if where else ""
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        try:
            conn.send(("error", f"tenant {job.name}: {type(exc).__name__}: {msg}{at}"))
        except OSError:
            pass
        if ctx is not None:
            try:
                ctx.close()
            except errors.HuvmError:
                pass
        os._exit(1)
    os._exit(0)


# ---- the runner's side in the guest: the node, one run ---------------------------------------------------------

def in_guest() -> bool:
    """True inside the qemu test bed's softgpu phase (run-guest.sh sets HUVM_UVM_VARIANT; the software GPU's
    control device exists)."""
    return bool(os.environ.get("HUVM_UVM_VARIANT")) and os.path.exists("/dev/huvm-softgpu")


def loaded_variant() -> str:
    """The nvidia-uvm build the test bed loaded (stock-release, patched-release, ...)."""
    return os.environ.get("HUVM_UVM_VARIANT", "")


def _sysfs_version() -> str:
    try:
        with open("/sys/module/nvidia_uvm/version") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class RunOutcome:
    """One run on the emulated node, as measured in the guest."""

    wall_ns: int
    tenants: dict[str, tuple[int, dict[str, int]]]  # name -> (runtime_ns, values)
    census: dict[str, Census]
    before: Any  # StatsSnapshot (GPU indices = emulated GPU indices), or None on the stock module
    after: Any
    after_census: Any
    samples: list[tuple[int, int, dict[str, int]]]  # (t_ns, gpu, own/guest/free/peer/host bytes)
    softgpu: dict[int, dict[str, int]]  # per GPU: the software GPU's counter deltas over the run
    #: wall seconds: quiesce (after the first run), setup, run, settle, census, teardown
    phases: dict[str, float] = field(default_factory=dict)
    #: CLOCK_MONOTONIC ns of the settled counters before and after the run (recorded events inside it are the
    #: ones the counters' delta counts)
    window_ns: tuple[int, int] | None = None

    def phase_line(self) -> str:
        return ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items())


class GuestNode:
    """The emulated node seen from the guest's runner: the software GPUs, a UVM file that keeps the
    experiment's GPUs registered (so they and their huvm slots stay between runs), and the patched module's
    huvm control surface (None on the stock module)."""

    def __init__(self, n_gpus: int, module: str) -> None:
        from huvm import softgpu, uvm

        variant = loaded_variant()
        want = "patched" if module == "patched" else "stock"
        if variant and not variant.startswith(want):
            raise errors.DeviceUnavailable(f"node.module = {module!r} but the test bed loaded nvidia-uvm "
                                           f"{variant!r}", reason="module")
        self.module = module
        self.variant = variant
        self.sg = softgpu.SoftGpu.open()
        self.keeper: Any = None
        self.node: Any = None
        try:
            gpus = self.sg.info().gpus
            if len(gpus) < n_gpus:
                raise errors.DeviceUnavailable(f"the software GPU has {len(gpus)} GPUs, node.gpus = {n_gpus}",
                                               reason="gpus")
            self.gpus = gpus[:n_gpus]
            self.keeper = uvm.Uvm.open()
            for g in self.gpus:
                self.keeper.register_gpu(g, self.sg.client)
            self.slots: dict[int, int] = {g.index: g.index for g in self.gpus}
            self.last_run_end: float | None = None   # time.monotonic() when the previous run's tenants exited
            if module == "patched":
                import huvm

                self.node = huvm.open(backend="kernel", device=uvm.DEFAULT_DEVICE)
                by_uuid = {g.uuid.lower(): g.index for g in self.node.info().gpus}
                missing = [g.name for g in self.gpus if g.uuid_str.lower() not in by_uuid]
                if missing:
                    raise errors.DeviceUnavailable(f"huvm has no slot for {', '.join(missing)} (GET_INFO lists "
                                                   f"{len(by_uuid)} GPUs)", reason="slots")
                self.slots = {g.index: by_uuid[g.uuid_str.lower()] for g in self.gpus}
        except BaseException:
            self.close()
            raise

    @property
    def pma_bytes(self) -> int:
        return min(g.pma_bytes for g in self.gpus)

    def version(self) -> str:
        """The module as GET_INFO reports it (the stock module: its sysfs version), with the build loaded."""
        build = f" [{self.variant}]" if self.variant else ""
        if self.node is not None:
            from .executor import module_version

            return module_version(self.node.info()) + build
        ver = _sysfs_version()
        return f"nvidia-uvm {ver or 'unknown'} (stock){build}"

    # -- policy
    def info(self) -> Any:
        """huvm's GET_INFO with the GPUs re-indexed as the emulated GPUs (slot i -> emulated GPU i)."""
        from dataclasses import replace

        assert self.node is not None
        info = self.node.info()
        back = {s: i for i, s in self.slots.items()}
        gpus = tuple(replace(g, index=back[g.index]) for g in info.gpus if g.index in back)
        links = tuple(replace(ln, a=back[ln.a], b=back[ln.b]) for ln in info.links if ln.a in back and ln.b in back)
        return replace(info, gpus=tuple(sorted(gpus, key=lambda g: g.index)), links=links)

    def apply(self, preset: str, settings: Sequence[Any]) -> dict[str, str]:
        """Apply a run's policy (settings name emulated GPU indices; sent with huvm's slots); returns the
        policy's settings as `policy show` prints them."""
        from dataclasses import replace

        if self.node is None:
            if preset != "stock" or settings:
                raise errors.UsageError(f"policy {preset!r} needs the patched module")
            return {}
        moved = [replace(s, gpu=self.slots[s.gpu], key=f"gpu.{self.slots[s.gpu]}." + s.key.split(".", 2)[2])
                 if s.gpu is not None else s for s in settings]
        self.node.apply(moved, preset=preset)
        return dict(self.node.get_policy().settings(self.node.info()))

    # -- counters
    def stats(self) -> Any:
        """GET_STATS with GPU indices = emulated GPU indices (only the experiment's GPUs)."""
        from huvm.stats import GpuCounters, PairCounters, StatsSnapshot

        if self.node is None:
            return None
        s = self.node.stats()
        back = {sl: i for i, sl in self.slots.items()}
        gpus = tuple(sorted((GpuCounters(back[g.gpu], g.values) for g in s.gpus if g.gpu in back),
                            key=lambda g: g.gpu))
        pairs = tuple(PairCounters(back[p.owner], back[p.holder], p.values) for p in s.pairs
                      if p.owner in back and p.holder in back)
        return StatsSnapshot(s.timestamp_ns, s.generation, gpus, pairs)

    def settled_stats(self, quiet_s: float = 1.0, limit_s: float = 30.0) -> Any:
        """GET_STATS once nothing has moved for quiet_s (pre-eviction and give-back run in workers)."""
        if self.node is None:
            return None
        last = self.stats()
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            cur = self.stats()
            if cur.to_dict()["gpus"] == last.to_dict()["gpus"] and cur.pairs == last.pairs:
                return cur
            last = cur
        return last

    def sample(self, t_ns: int, before: Any, base_sg: Any, out: list[tuple[int, int, dict[str, int]]]) -> None:
        """Memory per GPU now: free (on the patched module huvm's GET_INFO free bytes: PMA's free pages and the
        root chunks UVM holds free, since UVM takes PMA memory in batches of up to 64 root chunks and keeps
        what it does not use; on the stock module PMA's free bytes only), own (the rest of the PMA region, less
        what was pinned before the run began and less what it holds for others), guest (lent), peer (its
        data held on peers), host (bytes it evicted to the host less bytes it fetched from there since the
        run began: an estimate)."""
        sgc = self.sg.counters()
        st = self.stats()
        free_by_slot = {g.index: g.free_bytes for g in self.node.info().gpus} if self.node is not None else {}
        for g in self.gpus:
            c = sgc.gpus[g.index]
            free = free_by_slot.get(self.slots[g.index], c.pma_free_bytes)
            pinned0 = base_sg.gpus[g.index].pma_pinned_bytes if base_sg is not None else 0
            used = max(0, g.pma_bytes - free - pinned0)
            lent = harvested = host = 0
            if st is not None:
                now = st.gpus[g.index]
                then = before.gpus[g.index]
                lent, harvested = now.scalar("lent_bytes"), now.scalar("harvested_bytes")
                host = max(0, (now.scalar("bytes_to_host") - then.scalar("bytes_to_host"))
                           - (now.scalar("bytes_from_host") - then.scalar("bytes_from_host")))
            out.append((t_ns, g.index, {"own_bytes": max(0, used - lent), "guest_bytes": lent, "free_bytes": free,
                                        "peer_bytes": harvested, "host_bytes": host}))

    # -- one run
    def run(self, jobs: Sequence[TenantJob], *, sample_ms: int = 500, timeout_s: float = 900.0) -> RunOutcome:
        """Run the tenants together (one process each) from a common start; foreground ones to the end of
        their steps, background ones until the foreground is done. Then the counters (once settled), each
        tenant's residency census, and the counters again."""
        import multiprocessing

        mp = multiprocessing.get_context("fork")
        start, stop = mp.Event(), mp.Event()
        procs: list[Any] = []
        conns: dict[str, Any] = {}
        fg = {j.name for j in jobs if j.steps > 0}
        deadline = time.monotonic() + timeout_s

        def fail(msg: str) -> None:
            raise errors.HuvmError(msg)

        def expect(name: str, kind: str, wait_s: float) -> tuple[Any, ...]:
            conn = conns[name]
            if not conn.poll(max(0.0, wait_s)):
                fail(f"tenant {name}: no {kind!r} within {wait_s:.0f} s")
            msg = conn.recv()
            if msg[0] == "error":
                fail(msg[1])
            if msg[0] != kind:
                fail(f"tenant {name}: {msg[0]!r} instead of {kind!r}")
            return tuple(msg)

        phases: dict[str, float] = {}
        mark = time.monotonic()
        if self.node is not None and self.last_run_end is not None:
            time.sleep(max(0.0, self.last_run_end + OWN_PEAK_WINDOW_S - mark))
            phases["quiesce"] = time.monotonic() - mark
            mark = time.monotonic()
        base_sg = self.sg.counters()

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            phases[name] = now - mark
            mark = now

        try:
            for job in jobs:
                parent, child = mp.Pipe()
                p = mp.Process(target=tenant_main, args=(job, child, start, stop, timeout_s), name=f"tenant-{job.name}",
                               daemon=True)
                p.start()
                child.close()
                procs.append(p)
                conns[job.name] = parent
            for job in jobs:
                expect(job.name, "ready", deadline - time.monotonic())
            before = self.settled_stats(quiet_s=0.5, limit_s=10.0)
            win_lo = time.monotonic_ns()
            sg_before = self.sg.counters()
            phase("setup")
            t0 = time.perf_counter_ns() + 50_000_000
            for job in jobs:
                conns[job.name].send(t0)
            start.set()
            results: dict[str, tuple[int, dict[str, int]]] = {}
            samples: list[tuple[int, int, dict[str, int]]] = []
            next_sample = 0.0
            while len(results) < len(jobs):
                if time.monotonic() > deadline:
                    fail(f"the run took longer than {timeout_s:.0f} s (tenants not done: "
                         f"{', '.join(sorted(set(conns) - set(results)))})")
                now = time.monotonic()
                if sample_ms and now >= next_sample:
                    self.sample(max(0, time.perf_counter_ns() - t0), before, base_sg, samples)
                    next_sample = now + sample_ms / 1000
                for name, conn in conns.items():
                    if name in results or not conn.poll(0):
                        continue
                    msg = conn.recv()
                    if msg[0] == "error":
                        fail(msg[1])
                    if msg[0] != "done":
                        fail(f"tenant {name}: {msg[0]!r} instead of 'done'")
                    results[name] = (int(msg[2]), dict(msg[1]))
                if fg <= set(results) and not stop.is_set():
                    stop.set()
                time.sleep(0.05)
            wall = time.perf_counter_ns() - t0
            phase("run")
            after = self.settled_stats()
            win_hi = time.monotonic_ns()
            phase("settle")
            cen: dict[str, Census] = {}
            for job in jobs:
                conns[job.name].send("census")
            for job in jobs:
                msg = expect(job.name, "census", deadline - time.monotonic())
                cen[job.name] = Census(dict(msg[1]), dict(msg[2]), int(msg[3]))
            phase("census")
            after_census = self.stats()
            sg_after = self.sg.counters()
            self.sample(max(0, time.perf_counter_ns() - t0), before, base_sg, samples)
            for job in jobs:
                conns[job.name].send("exit")
            for job in jobs:
                expect(job.name, "bye", 60.0)
            for p in procs:
                p.join(30)
            phase("teardown")
            sgd = sg_after.minus(sg_before)
            return RunOutcome(wall, results, cen, before, after, after_census, samples,
                              {g.gpu: dict(g.values) for g in sgd.gpus[: len(self.gpus)]}, phases,
                              (win_lo, win_hi))
        finally:
            stop.set()
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(10)
            if procs:
                self.last_run_end = time.monotonic()   # the next run's quiesce counts from here
            for c in conns.values():
                c.close()

    def close(self) -> None:
        """Put the preset back to stock (later users of the module see upstream behaviour), close all."""
        try:
            if self.node is not None:
                try:
                    self.node.apply_preset("stock")
                finally:
                    self.node.close()
                    self.node = None
        finally:
            if self.keeper is not None:
                self.keeper.close()
                self.keeper = None
            self.sg.close()
