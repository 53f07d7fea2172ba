"""Helpers of the software-GPU guest suite (tests/vm/softgpu): environment, the UVM session, data
patterns, and the result tables written at the end of the session.

Everything here runs inside the qemu guest, on NVIDIA's real nvidia-uvm loaded over huvm-softgpu.ko.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import provoked
from huvm import errors, softgpu, uvm

MIB = 1 << 20
CHUNK = 2 * MIB      # UVM's VA block / root chunk
PAGE = uvm.PAGE_SIZE


# ---- environment (set by tests/vm/guest/run-guest.sh) --------------------------------------------------------

# ---- the kernel log ------------------------------------------------------------------------------------------

#: what must not appear in the kernel log during a test (UVM's asserts, kernel reports)
KMSG_BAD = ("Assert failed", "Call Trace", "WARNING:", "BUG:", "Oops", "circular locking", "recursive locking")

PROVOKED_ASSERTS = provoked.PROVOKED_ASSERTS


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


def bad_lines(lines: list[str], provoked: re.Pattern[str] | None = None) -> list[str]:
    """The lines that report an assert or a kernel problem, less those ``provoked`` matches."""
    return [ln for ln in lines if any(p in ln for p in KMSG_BAD) and not (provoked and provoked.search(ln))]


@contextmanager
def kmsg_window() -> Iterator[Kmsg]:
    """A :class:`Kmsg` open for the block's duration."""
    k = Kmsg()
    try:
        yield k
    finally:
        k.close()


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value, 0) if value.strip() else default


# The long suite (make vm-test VM_SOFTGPU_LONG=1): tests whose full modes take minutes under TCG.
LONG = os.environ.get("HUVM_SOFTGPU_LONG", "") == "1"
VARIANT = os.environ.get("HUVM_UVM_VARIANT", "unknown")       # stock-release, patched-release, patched-debug
# The run's name for the variant: VARIANT on the default upstream, <version>-VARIANT on another (result files).
VARIANT_ID = os.environ.get("HUVM_UVM_VARIANT_ID", VARIANT)
# nvidia-uvm's version (its MODULE_VERSION) and branch (the major: 535, 580).
UPSTREAM = os.environ.get("HUVM_UVM_UPSTREAM", "")
# The architecture the software GPU emulates (its arch= parameter; run-guest.sh): ampere (A100s, physical
# peer copies) or volta (V100s, virtual peer copies).
ARCH = os.environ.get("HUVM_SOFTGPU_ARCH", "ampere")
# The engine mode the software GPU was loaded with (its engine_threads= parameter; run-guest.sh): 0 one thread
# per GPU (GPUs run concurrently), 1 one thread for all GPUs.
ENGINE_THREADS = int(os.environ.get("HUVM_SOFTGPU_ENGINE_THREADS", "0"))
BRANCH = int(UPSTREAM.split(".")[0]) if UPSTREAM.split(".")[0].isdigit() else 0


def uvm_gpu_id(nth: int) -> int:
    """nvidia-uvm's processor id of the nth GPU it registered (the CPU is 0). 535 numbers GPUs 1, 2, 3...;
    since 570 every parent GPU has 8 sub-processor (MIG) ids (uvm_types.h UVM_PARENT_ID_MAX_SUB_PROCESSORS),
    so 580 numbers them 1, 9, 17... (its log says "GPU ID 17: ... (softgpu 2)")."""
    return 1 + nth * (8 if BRANCH >= 570 else 1)
GPUS_EXPECTED = env_int("HUVM_SOFTGPU_GPUS", 0)                # 0: take what GET_INFO says
FB_MIB = env_int("HUVM_SOFTGPU_FB_MIB", 0)
OUT = os.environ.get("HUVM_OUT", "")


# ---- the UVM session: GPUs registered, GPU VA spaces and channels --------------------------------------------

@dataclass
class Session:
    """One UVM VA space (an initialised /dev/nvidia-uvm) with every emulated GPU registered and, when
    ``va_spaces``, a GPU VA space (softgpu CREATE_VASPACE -> UVM_REGISTER_GPU_VASPACE) and a registered
    SM channel per GPU; PCIe peer pairs enabled (NVLink pairs are enabled by registration)."""

    sg: softgpu.SoftGpu
    uvm: uvm.Uvm
    gpus: tuple[softgpu.GpuInfo, ...]
    va_spaces: list[softgpu.VaSpace] = field(default_factory=list)
    channels: list[softgpu.Channel] = field(default_factory=list)
    peers_enabled: list[tuple[int, int]] = field(default_factory=list)
    #: GPUs unregistered from the VA space by a test (UVM_UNREGISTER_GPU took their GPU VA space and
    #: channel with them): close_session skips their unregister calls
    gone: set[int] = field(default_factory=set)

    @property
    def client(self) -> int:
        return self.sg.client

    def pairs(self, link: str | None = None) -> list[tuple[softgpu.GpuInfo, softgpu.GpuInfo]]:
        """GPU pairs (i < j) joined by a link (of that type: "pcie", "nvlink2")."""
        out = []
        for a in self.gpus:
            for b in self.gpus[a.index + 1 :]:
                t = a.link_to(b).type
                if t != "none" and (link is None or t == link):
                    out.append((a, b))
        return out


def open_session(sg: softgpu.SoftGpu, *, va_spaces: bool, count: int | None = None) -> Session:
    """Build a Session step by step (with the first ``count`` GPUs, default all); a failing step raises
    naming itself (the GPU, the call)."""
    gpus = sg.gpus if count is None else sg.gpus[:count]
    if not gpus:
        raise errors.UsageError(f"open_session: no GPU to register (count={count}, {len(sg.gpus)} GPUs)")
    u = uvm.Uvm.open()
    s = Session(sg, u, gpus)
    client = sg.client
    try:
        for g in s.gpus:
            _step(f"UVM_REGISTER_GPU {g.name} ({g.uuid_str})", partial(u.register_gpu, g, client))
        for a, b in s.pairs("pcie"):
            _step(f"UVM_ENABLE_PEER_ACCESS {a.name} <-> {b.name} (PCIe)", partial(u.enable_peer_access, a, b))
            s.peers_enabled.append((a.index, b.index))
        if va_spaces:
            for g in s.gpus:
                vas: softgpu.VaSpace = _step(f"SOFTGPU_CREATE_VASPACE {g.name}", partial(sg.create_vaspace, g))
                _step(f"UVM_REGISTER_GPU_VASPACE {g.name}", partial(u.register_gpu_va_space, g, client, vas.handle))
                s.va_spaces.append(vas)
            for g, vas in zip(s.gpus, s.va_spaces, strict=True):
                chan: softgpu.Channel = _step(f"SOFTGPU_CREATE_CHANNEL {g.name}", partial(sg.create_channel, vas))
                _step(f"UVM_REGISTER_CHANNEL {g.name}", partial(u.register_channel, g, client, chan.handle))
                s.channels.append(chan)
    except BaseException:
        u.close()
        raise
    return s


def close_session(s: Session) -> None:
    """Undo open_session with UVM's own unregister calls (each is exercised), then close the fds. Every
    step runs; the failures are raised together at the end."""
    failures: list[str] = []

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except errors.HuvmError as exc:
            failures.append(f"{what}: {exc}")

    u, client = s.uvm, s.client
    for g, chan in zip(s.gpus, s.channels, strict=False):
        if g.index not in s.gone:
            attempt(f"UVM_UNREGISTER_CHANNEL {g.name}", partial(u.unregister_channel, g, client, chan.handle))
    for g in s.gpus[: len(s.va_spaces)]:
        if g.index not in s.gone:
            attempt(f"UVM_UNREGISTER_GPU_VASPACE {g.name}", partial(u.unregister_gpu_va_space, g))
    for a, b in s.peers_enabled:
        if a not in s.gone and b not in s.gone:
            attempt(f"UVM_DISABLE_PEER_ACCESS {a} <-> {b}", partial(u.disable_peer_access, s.gpus[a], s.gpus[b]))
    for g in s.gpus:
        if g.index not in s.gone:
            attempt(f"UVM_UNREGISTER_GPU {g.name}", partial(u.unregister_gpu, g))
    u.close()
    objects: list[softgpu.Channel | softgpu.VaSpace] = [*s.channels, *s.va_spaces]
    for obj in objects:
        attempt(f"SOFTGPU_DESTROY_OBJECT {obj.handle}", partial(s.sg.destroy, obj))
    if failures:
        raise errors.HuvmError("session teardown: " + "; ".join(failures))


def _step(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except errors.HuvmError as exc:
        raise errors.HuvmError(f"session setup: {what}: {exc}", status=exc.status, command=exc.command) from exc


# ---- what the session-scoped fixtures hold open -----------------------------------------------------------

#: name -> close function of what the session-scoped fixtures (conftest.py) opened, in opening order. A test
#: that unloads the modules (test_huvm_lifecycle.py) closes them all first (release_fixtures); the fixtures'
#: own teardown then finds nothing left to close.
_FIXTURE_HANDLES: dict[str, Callable[[], None]] = {}


def hold(name: str, close: Callable[[], None]) -> None:
    """Remember a session-scoped fixture's open handle and how to close it."""
    _FIXTURE_HANDLES[name] = close


def drop(name: str) -> None:
    """Close a fixture's handle if it is still open (a fixture's teardown; closes at most once)."""
    close = _FIXTURE_HANDLES.pop(name, None)
    if close is not None:
        close()


def release_fixtures() -> list[str]:
    """Close everything the session-scoped fixtures hold, newest first (a UVM session before the softgpu
    client its objects belong to), so that nvidia-uvm and huvm-softgpu can be unloaded. Every handle is
    closed; failures are raised together at the end. Returns the names closed. Tests that need those
    fixtures cannot run after this in the same pytest session."""
    names = list(reversed(_FIXTURE_HANDLES))
    failures = []
    for name in names:
        try:
            drop(name)
        except errors.HuvmError as exc:
            failures.append(f"{name}: {exc}")
    if failures:
        raise errors.HuvmError("closing the fixtures' handles: " + "; ".join(failures))
    return names


# ---- data ---------------------------------------------------------------------------------------------------

def pattern(va: int, nbytes: int, seed: int) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The software GPU's pattern: the 8-byte word at VA a is seed ^ a."""
    words = np.arange(nbytes // 8, dtype=np.uint64) * np.uint64(8) + np.uint64(va)
    return words ^ np.uint64(seed)


def words(region: uvm.ManagedRegion, offset: int = 0, nbytes: int | None = None) -> np.ndarray[Any, Any]:
    """region's bytes as uint64 words (a live view: CPU accesses go through UVM's CPU fault path)."""
    return np.frombuffer(region.view(offset, nbytes), dtype=np.uint64)


#: pattern work in slices of this many bytes (bounded temporary memory in a small guest)
SLICE = 16 * MIB


def fill_pattern(region: uvm.ManagedRegion, seed: int, offset: int = 0, nbytes: int | None = None) -> None:
    end = region.size if nbytes is None else offset + nbytes
    for off in range(offset, end, SLICE):
        n = min(SLICE, end - off)
        words(region, off, n)[:] = pattern(region.base + off, n, seed)


def pattern_mismatches(region: uvm.ManagedRegion, seed: int, offset: int = 0,
                       nbytes: int | None = None) -> tuple[int, int]:
    """(words that differ from the pattern, VA of the first one or 0)."""
    end = region.size if nbytes is None else offset + nbytes
    count, first = 0, 0
    for off in range(offset, end, SLICE):
        n = min(SLICE, end - off)
        bad = np.flatnonzero(words(region, off, n) != pattern(region.base + off, n, seed))
        if bad.size and not count:
            first = region.base + off + int(bad[0]) * 8
        count += int(bad.size)
    return count, first


#: the seed a region's CPU pages are first filled with when the data a test checks is written by a GPU
#: (:func:`gpu_fill`): it differs from every test's seed, so a copy that was skipped leaves these words behind
STALE = 0x57A1E_0000_0000


def stale_seed(seed: int) -> int:
    """The CPU-side seed under GPU-written data of seed ``seed`` (never equal to it)."""
    return seed ^ STALE


#: bytes per SM access and accesses per SOFTGPU_SM_ACCESS call of gpu_fill/gpu_mismatches (a kernel touching a
#: few 2 MiB blocks at a time: each call's faults reach UVM together)
GPU_STEP = CHUNK
GPU_BATCH = 4


def _gpu_run(s: Session, gpu: int, accesses: list[softgpu.Access]) -> list[softgpu.AccessResult]:
    if gpu >= len(s.channels):
        raise errors.UsageError(f"GPU{gpu} has no SM channel in this session (open_session(va_spaces=True))")
    out: list[softgpu.AccessResult] = []
    for i in range(0, len(accesses), GPU_BATCH):
        out += s.sg.sm_access(s.channels[gpu], accesses[i : i + GPU_BATCH], timeout_ms=60_000)
    bad = [r for r in out if r.status]
    if bad:
        r = bad[0]
        raise errors.HuvmError(f"GPU{gpu} SM {r.access.type} at 0x{r.access.va:x} (+{r.access.size}): "
                               f"{r.status_name} ({len(bad)} of {len(out)} accesses failed)")
    return out


def gpu_fill(s: Session, gpu: int, region: uvm.ManagedRegion, seed: int, offset: int = 0,
             nbytes: int | None = None) -> None:
    """The pattern of ``seed`` written by GPU ``gpu``'s SMs (SOFTGPU_SM_ACCESS WRITE: through the GPU's MMU,
    faulting as a GPU does) over [offset, offset + nbytes) of region. Only the GPU's copy holds it afterwards:
    pages UVM keeps on the CPU hold what the CPU wrote before, so a later copy that was skipped shows."""
    end = region.size if nbytes is None else offset + nbytes
    _gpu_run(s, gpu, [softgpu.Access.write(region.base + off, min(GPU_STEP, end - off), seed=seed)
                      for off in range(offset, end, GPU_STEP)])


def gpu_mismatches(s: Session, gpu: int, region: uvm.ManagedRegion, seed: int, offset: int = 0,
                   nbytes: int | None = None) -> tuple[int, int]:
    """GPU ``gpu``'s SMs read [offset, offset + nbytes) of region and compare every word with the pattern of
    ``seed`` (a fault brings pages the GPU does not map: a fetch-back for harvested data). Returns (words
    that differ, VA of the first one or 0)."""
    end = region.size if nbytes is None else offset + nbytes
    res = _gpu_run(s, gpu, [softgpu.Access.read(region.base + off, min(GPU_STEP, end - off), seed=seed)
                            for off in range(offset, end, GPU_STEP)])
    count = sum(r.mismatches for r in res)
    first = next((r.first_mismatch_va for r in res if r.mismatches), 0)
    return count, first


def random_bytes(nbytes: int, seed: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def same_bytes(region: uvm.ManagedRegion, expected: np.ndarray[Any, Any]) -> tuple[bool, int]:
    """(region == expected byte for byte, offset of the first difference or -1)."""
    got = np.frombuffer(region.view(), dtype=np.uint8)
    diff = np.flatnonzero(got != expected)
    return (diff.size == 0), (int(diff[0]) if diff.size else -1)


def blocks_by_place(s: Session, base: int, size: int) -> tuple[dict[str, int], list[str]]:
    """Every 2 MiB block of [base, base + size) classified by where its first and last pages are resident:
    'cpu', 'GPU<n>' or 'mixed'/'nowhere'/'GPUa+GPUb' (those also listed, one line each, in the second
    value)."""
    names = {g.uuid: f"GPU{g.index}" for g in s.gpus}
    names[uvm.cpu_uuid()] = "cpu"
    counts: dict[str, int] = {}
    odd: list[str] = []
    for off in range(0, size, CHUNK):
        places = set()
        for page in (off, off + CHUNK - PAGE):
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


def sample_offsets(size: int) -> list[int]:
    """Pages to check residency of: the first and the last page of every 2 MiB block."""
    out: list[int] = []
    for start in range(0, size, CHUNK):
        out.append(start)
        last = min(start + CHUNK, size) - PAGE
        if last != start:
            out.append(last)
    return out


def resident_exactly_on(u: uvm.Uvm, region: uvm.ManagedRegion, proc: uvm.Processor) -> list[str]:
    """Sampled pages of region not resident on proc alone: one line each (empty when all are)."""
    want = uvm.uuid_bytes(proc)
    bad = []
    for off in sample_offsets(region.size):
        r = u.va_residency_info(region.base + off)
        if r.resident_on != (want,):
            bad.append(f"+0x{off:x}: {r.describe()}")
    return bad


# ---- kernel memory (leak checks of the lifecycle scenarios) --------------------------------------------------

def _quiesce() -> None:
    """Drop the page/dentry/inode caches and shrink every slab cache (flushes the per-CPU slabs)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    for cache in os.listdir("/sys/kernel/slab"):
        try:
            with open(f"/sys/kernel/slab/{cache}/shrink", "w") as f:
                f.write("1")
        except OSError:
            pass


def _slab_sample() -> dict[str, tuple[int, int]]:
    _quiesce()
    out: dict[str, tuple[int, int]] = {}
    with open("/proc/slabinfo") as f:
        for line in f.read().splitlines()[2:]:
            fields = line.split()
            out[fields[0]] = (int(fields[1]), int(fields[4]))
    return out


def slabs() -> dict[str, tuple[int, int]]:
    """cache -> (active objects, objects per slab): the least of three samples after dropping caches and
    shrinking every cache (transient references only add objects, so the minimum is the steady state).
    The Debian kernel merges slab caches (SLAB_MERGE_DEFAULT): nvidia-uvm's caches count in the caches
    they are merged into."""
    samples = []
    for _ in range(3):
        samples.append(_slab_sample())
        time.sleep(0.3)
    return {k: (min(sm[k][0] for sm in samples if k in sm), v[1]) for k, v in samples[-1].items()}


def slab_growth(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], floor: int,
                ignore: frozenset[str] = frozenset()) -> dict[str, int]:
    """Caches that grew by more than max(floor, one slab) objects from before to after."""
    grown = {}
    for name, (n, per_slab) in after.items():
        if name in ignore:
            continue
        d = n - before.get(name, (0, 0))[0]
        if d > max(floor, per_slab):
            grown[name] = d
    return grown


def vmalloc_areas() -> int:
    with open("/proc/vmallocinfo") as f:
        return sum(1 for _ in f)


# ---- timing and the result tables ------------------------------------------------------------------------

@contextmanager
def timed() -> Iterator[list[float]]:
    """with timed() as t: ...; t[0] is the elapsed seconds afterwards."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


@dataclass
class BuiltinResult:
    name: str
    stage: int
    group: str
    result: str = "not run"        # passed | failed | not run
    reason: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"UVM_TEST_{self.name}: {self.result}{why}"


#: filled by test_builtin.py at import (its table), updated by conftest's report hook
BUILTIN_RESULTS: dict[str, BuiltinResult] = {}
#: the emulated GPUs as SOFTGPU_GET_INFO described them (filled by the sg fixture), for the JSON files
GPUS: list[dict[str, Any]] = []
#: huvm scenarios (test_huvm_scenarios.py): name -> "passed" | "failed" | "skipped (reason)"
SCENARIOS: dict[str, str] = {}
#: perf figures: name -> {"value": x, "unit": u, ...}
PERF: dict[str, dict[str, Any]] = {}


def perf(name: str, value: float, unit: str, **extra: Any) -> None:
    PERF[name] = {"value": round(value, 3), "unit": unit, **extra}
    print(f"perf: {name} = {value:.1f} {unit} {extra if extra else ''}".rstrip())


def write_json(name: str, payload: dict[str, Any]) -> str | None:
    if not OUT or not os.path.isdir(OUT):
        return None
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=False)
        f.write("\n")
    return path


# ---- huvm's tracepoints (the patched module): a private ftrace instance ---------------------------------------

TRACEFS = "/sys/kernel/tracing"


@dataclass(frozen=True)
class HuvmEvent:
    """One huvm:huvm_<name> record: huvm's GPU indices (gpu, peer) and nvidia-uvm's processor ids."""

    name: str
    gpu: int
    peer: int
    reason: int
    bytes: int
    va: int
    uvm_gpu: int
    uvm_peer: int
    ts_ns: int = 0      # the ftrace record's time stamp (trace_clock "local": per CPU, in step to a µs or so)


class TraceRecorder:
    """Records every huvm tracepoint into its own ftrace instance (instances/<name>), independent of other
    tracers (bcc attaches separately). ``events()`` parses what was recorded so far."""

    def __init__(self, name: str = "sg_huvm", buffer_kb: int = 8192) -> None:
        self.dir = os.path.join(TRACEFS, "instances", name)
        self.buffer_kb = buffer_kb

    def __enter__(self) -> TraceRecorder:
        if not os.path.isdir(os.path.join(TRACEFS, "events", "huvm")):
            raise AssertionError("no huvm tracepoints in tracefs: the patched nvidia-uvm is not loaded")
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "buffer_size_kb"), "w") as f:
            f.write(str(self.buffer_kb))
        with open(os.path.join(self.dir, "events", "huvm", "enable"), "w") as f:
            f.write("1")
        return self

    def events(self) -> list[HuvmEvent]:
        out = []
        with open(os.path.join(self.dir, "trace")) as f:
            for line in f:
                if line.startswith("#") or " huvm_" not in line:
                    continue
                head, _, args = line.partition(": huvm_")
                name, _, rest = args.partition(": ")
                kv = dict(item.split("=", 1) for item in rest.split())
                sec, _, usec = head.split()[-1].partition(".")     # "<task>-<pid> [cpu] flags 12.345678"
                ts_ns = int(sec) * 1_000_000_000 + int(usec.ljust(9, "0")[:9])
                out.append(HuvmEvent(name, int(kv["gpu"]), int(kv["peer"]), int(kv["reason"]), int(kv["bytes"]),
                                     int(kv["va"], 16), int(kv["uvm_gpu"]), int(kv["uvm_peer"]), ts_ns))
        return out

    def lost(self) -> int:
        """Events the ring buffer dropped (per_cpu stats 'overrun'), summed over CPUs."""
        total = 0
        base = os.path.join(self.dir, "per_cpu")
        for cpu in os.listdir(base):
            with open(os.path.join(base, cpu, "stats")) as f:
                for line in f:
                    if line.startswith("overrun:"):
                        total += int(line.split()[1])
        return total

    def __exit__(self, *exc: object) -> None:
        try:
            with open(os.path.join(self.dir, "events", "huvm", "enable"), "w") as f:
                f.write("0")
        finally:
            os.rmdir(self.dir)


def resident_pages(s: Session, base: int, size: int) -> dict[str, int]:
    """Pages of [base, base + size) by where they are resident ('cpu', 'GPU<n>', '+'-joined, 'nowhere')."""
    names = {g.uuid: f"GPU{g.index}" for g in s.gpus}
    names[uvm.cpu_uuid()] = "cpu"
    out: dict[str, int] = {}
    for off in range(0, size, PAGE):
        where = sorted(names.get(u, "?") for u in s.uvm.va_residency_info(base + off).resident_on)
        key = "+".join(where) or "nowhere"
        out[key] = out.get(key, 0) + 1
    return out


def abi_lib() -> Any:
    """huvm's ABI constants (cffi lib of the ioctl header)."""
    from huvm import abi

    return abi.lib
