"""huvm events through bcc: the BPF program for the events of ``driver/core/huvm_events.h`` and a tracer that
attaches it to the kernel tracepoints (``huvm:huvm_<event>``, the patched module) or to the USDT probes
(provider ``huvm``) of a process running the simulated node or the policy core.

Every event has the arguments gpu, peer, reason, bytes, va (docs/counters.md, "Events"); the kernel
tracepoints also carry uvm_gpu and uvm_peer (nvidia-uvm's processor ids). The program keeps per event a
count and a log2 histogram of ``bytes`` in the kernel (bcc's ``bpf_log2l`` slots, as biolatency does) and
sends one perf-buffer record per event (with the pid and comm of the task that fired it).

UVM's own fault and migration path (any nvidia-uvm, stock or patched) is traced with kprobes on two of its
exported functions (:data:`UVM_EVENTS`): ``uvm_fault`` on ``uvm_va_block_service_locked()`` (one VA block's
faults serviced for one processor: a GPU's replayable or non-replayable faults, or a CPU fault) and
``uvm_make_resident`` on ``uvm_va_block_make_resident_copy()`` (pages of one VA block made resident on a
processor: the copy step of ``uvm_va_block_make_resident()``, which the fault path calls directly, so every
migration of a fault, a prefetch, an eviction or a migrate call passes there once).
Their records carry nvidia-uvm's processor ids (``uvm_gpu``: the faulting processor, or the destination; 0 is the
CPU), no huvm GPU index (``gpu``/``peer`` -1): UVM's arguments name no source of a migration.

bcc is Debian's python3-bpfcc (system site packages); attaching needs root (CAP_BPF/CAP_PERFMON). huvm-top
(``huvm_top.sources.bcc``) and ``huvmctl trace record`` (:mod:`huvmlab.tracerec`) both use this module.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from .errors import HuvmError

Kind = Literal["tracepoint", "usdt"]
Mode = Literal["auto", "tracepoint", "usdt"]
TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
ARGS = ("gpu", "peer", "reason", "bytes", "va")  # HUVM_EVENT_ARGS, in order
NO_UVM_ID = 0xFFFFFFFF  # uvm_gpu/uvm_peer of a record that has none (USDT probes, or an older module)
PROVIDER = "huvm"  # the tracepoint subsystem and the USDT provider
_FALLBACK_EVENTS = ("evict", "preevict", "fetch", "giveback", "prefetch", "policy")
#: UVM's own events (kprobes on nvidia-uvm's exported functions, stock or patched): name -> kernel symbol.
#: Signatures (nvidia-uvm 5xx, uvm_va_block.h): ``uvm_va_block_service_locked(uvm_processor_id_t processor_id,
#: uvm_va_block_t *, uvm_va_block_retry_t *, uvm_service_block_context_t *)`` and
#: ``uvm_va_block_make_resident_copy(uvm_va_block_t *, uvm_va_block_retry_t *, uvm_va_block_context_t *,
#: uvm_processor_id_t dest_id, uvm_va_block_region_t region, const uvm_page_mask_t *, const uvm_page_mask_t *,
#: uvm_make_resident_cause_t cause)`` (uvm_va_block_make_resident() has the same arguments and calls it; the
#: fault path, uvm_va_block_service_copy(), calls it directly).
UVM_EVENTS = {"uvm_fault": "uvm_va_block_service_locked", "uvm_make_resident": "uvm_va_block_make_resident_copy"}
#: uvm_make_resident_cause_t (uvm_va_block_types.h), in order: the reason of a ``uvm_make_resident`` record
UVM_CAUSES = ("replayable_fault", "non_replayable_fault", "access_counter", "prefetch", "eviction", "api_tools",
              "api_migrate", "api_set_range_group", "api_hint")
UVM_PAGE = 4096  # uvm_va_block_region_t counts PAGE_SIZE pages (x86-64: 4 KiB)
KALLSYMS = Path("/proc/kallsyms")


class TracingUnavailable(HuvmError):
    """Events cannot be traced here: ``reason`` is ``no-bcc``, ``not-root``, ``no-tracepoints`` or ``attach``."""

    def __init__(self, message: str, *, reason: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.reason = reason


# -- the events of driver/core/huvm_events.h ---------------------------------------------------------------

@cache
def _events_header() -> str | None:
    from . import header

    here = header.header_path().parent
    # next to the ABI header in huvm/data/ (a wheel install), else in the source tree's driver/core/
    for path in (here / "huvm_events.h", here.parent.parent / "core" / "huvm_events.h"):
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return None


@cache
def event_names() -> tuple[str, ...]:
    """The events of ``driver/core/huvm_events.h`` (tracepoints and USDT probes), in order."""
    text = _events_header()
    if text is None:
        return _FALLBACK_EVENTS
    block = text.split("#define HUVM_EVENTS(X)", 1)[-1].split("#define HUVM_EVENT_PREFIX", 1)[0]
    return tuple(re.findall(r"X\((\w+)\)", block))


@cache
def event_prefix() -> str:
    """HUVM_EVENT_PREFIX of huvm_events.h: the tracepoint and USDT probe of event ``evict`` are
    ``huvm:huvm_evict``."""
    found = re.search(r'#define HUVM_EVENT_PREFIX "(\w*)"', _events_header() or "")
    return found.group(1) if found else "huvm_"


def probe_name(event: str) -> str:
    """The kernel tracepoint's and the USDT probe's name of ``event`` (provider/subsystem ``huvm``)."""
    return event_prefix() + event


def all_event_names() -> tuple[str, ...]:
    """huvm's events, then UVM's (kprobes): every name ``--events`` and ``[record] events`` take."""
    return event_names() + tuple(UVM_EVENTS)


def is_uvm_event(name: str) -> bool:
    return name in UVM_EVENTS


def check_events(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The names in :func:`all_event_names`'s order ("all": huvm's events); an unknown name is an
    :class:`~huvm.errors.InvalidValue` naming the known ones."""
    from .errors import InvalidValue

    known = all_event_names()
    want = [w.strip() for w in names if w.strip()]
    if not want or want == ["all"]:
        return event_names()
    bad = [w for w in want if w not in known]
    if bad:
        raise InvalidValue(f"unknown event{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
                           f"(events: {', '.join(known)})", field="events")
    return tuple(n for n in known if n in want)


def parse_events(text: str | None) -> tuple[str, ...]:
    """``"evict,fetch"`` -> ("evict", "fetch") in :func:`all_event_names`'s order; None or "" or "all": huvm's
    events (UVM's kprobe events only when named). An unknown name is an :class:`~huvm.errors.InvalidValue`
    naming the known ones."""
    return check_events([] if text is None else text.split(","))


# -- the BPF program -----------------------------------------------------------------------------------------

_PROLOGUE = """\
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>

struct huvm_event_t {
    u64 ts;
    u64 bytes;
    u64 va;
    u64 seq;
    u32 cpu;
    u32 ev;
    u32 gpu;
    u32 peer;
    u32 reason;
    u32 pid;
    u32 uvm_gpu;
    u32 uvm_peer;
    char comm[TASK_COMM_LEN];
};

struct hist_key_t {
    u32 ev;
    u32 slot;
};

BPF_PERF_OUTPUT(events);
/* per CPU: an event's count on its CPU is also its sequence number there, so a reader that takes the counts
   can tell which records it has already counted (RunRecorder.cut: no event lands on both sides of a cut) */
BPF_PERCPU_ARRAY(counts, u64, NEVENTS);
BPF_HASH(hist, struct hist_key_t, u64);

static inline int record(void *ctx, u32 ev, u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va, u32 uvm_gpu,
                         u32 uvm_peer)
{
    struct huvm_event_t e = {};
    struct hist_key_t k = {};
    u64 *n = counts.lookup(&ev);

    e.ts = bpf_ktime_get_ns();
    e.ev = ev;
    e.gpu = gpu;
    e.peer = peer;
    e.reason = reason;
    e.bytes = bytes;
    e.va = va;
    e.pid = bpf_get_current_pid_tgid() >> 32;
    e.uvm_gpu = uvm_gpu;
    e.uvm_peer = uvm_peer;
    bpf_get_current_comm(&e.comm, sizeof(e.comm));
    e.cpu = bpf_get_smp_processor_id();
    if (n) {   /* a BPF program is not re-entered on its CPU (bcc's programs: bpf_prog_active) */
        *n += 1;
        e.seq = *n;
    }
    k.ev = ev;
    k.slot = bpf_log2l(bytes);
    hist.increment(k);
    events.perf_submit(ctx, &e, sizeof(e));
    return 0;
}
"""

# bcc rewrites bpf_usdt_readarg per probe function, so each handler reads its arguments itself. The probes
# pass 8-byte operands (driver/core/huvm_port.h) and bcc stores the operand's size: every argument is read
# into a u64 (a u32 would be overrun into its neighbour).
_USDT_FN = """
int on_{name}(struct pt_regs *ctx)
{{
    u64 gpu = 0, peer = 0, reason = 0, bytes = 0, va = 0;

    bpf_usdt_readarg(1, ctx, &gpu);
    bpf_usdt_readarg(2, ctx, &peer);
    bpf_usdt_readarg(3, ctx, &reason);
    bpf_usdt_readarg(4, ctx, &bytes);
    bpf_usdt_readarg(5, ctx, &va);
    return record(ctx, {index}, gpu, peer, reason, bytes, va, {none}, {none});
}}
"""

_TP_FN = """
TRACEPOINT_PROBE(huvm, {probe})
{{
    return record(args, {index}, args->gpu, args->peer, args->reason, args->bytes, args->va, {uvm});
}}
"""

# UVM's functions (kprobes at entry, x86-64 SysV): uvm_processor_id_t (one u32) and uvm_va_block_region_t
# (two uvm_page_index_t, u16 with 4 KiB pages: first in bits 0-15, outer in 16-31) are passed in registers;
# make_resident's 8th argument (cause) is on the stack, above the return address: sp + 16.
_KPROBE_FN = {
    "uvm_fault": """
int on_uvm_fault(struct pt_regs *ctx)
{{
    u32 proc = (u32)PT_REGS_PARM1(ctx);

    return record(ctx, {index}, {none}, {none}, 0, 0, 0, proc, {none});
}}
""",
    "uvm_make_resident": """
int on_uvm_make_resident(struct pt_regs *ctx)
{{
    u32 dest = (u32)PT_REGS_PARM4(ctx);
    u64 region = PT_REGS_PARM5(ctx);
    u32 first = region & 0xFFFF, outer = (region >> 16) & 0xFFFF;
    u32 cause = 0;

    bpf_probe_read_kernel(&cause, sizeof(cause), (void *)(PT_REGS_SP(ctx) + 16));
    return record(ctx, {index}, {none}, {none}, cause, (u64)(outer > first ? outer - first : 0) * {page}, 0, dest,
                  {none});
}}
""",
}


def program(kind: Kind, events: tuple[str, ...] | None = None, uvm_ids: bool = True) -> str:
    """The BPF C text for the given events (default: all of huvm_events.h). The kernel tracepoints
    (driver/uvm/uvm_huvm_trace.h) and the USDT probes share the names: ``huvm:huvm_evict`` etc.
    ``uvm_ids``: the tracepoints have the uvm_gpu/uvm_peer fields (else the records carry NO_UVM_ID).
    UVM's events (:data:`UVM_EVENTS`) are kprobe functions ``on_<name>``, attached by the tracer."""
    events = events or event_names()
    body = _PROLOGUE.replace("NEVENTS", str(len(events)))
    none = f"0x{NO_UVM_ID:X}"
    uvm = "args->uvm_gpu, args->uvm_peer" if uvm_ids else f"{none}, {none}"
    fn = _USDT_FN if kind == "usdt" else _TP_FN
    out = []
    for i, name in enumerate(events):
        if name in UVM_EVENTS:
            if kind == "usdt":
                raise TracingUnavailable(f"{name} is a kprobe on nvidia-uvm: not in a process's USDT probes",
                                         reason="no-kprobes")
            out.append(_KPROBE_FN[name].format(index=i, none=none, page=UVM_PAGE))
        else:
            out.append(fn.format(name=name, probe=probe_name(name), index=i, none=none, uvm=uvm))
    return body + "".join(out)


def kernel_symbols(names: list[str] | tuple[str, ...]) -> set[str]:
    """Which of names /proc/kallsyms lists (nvidia-uvm's functions appear there while it is loaded)."""
    want = set(names)
    found: set[str] = set()
    try:
        with KALLSYMS.open() as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in want:
                    found.add(parts[2])
    except OSError:
        return found
    return found


def check_kprobes(events: tuple[str, ...]) -> None:
    """Raise :class:`TracingUnavailable` (``no-kprobes``) when a UVM event's function is not in the kernel."""
    syms = [UVM_EVENTS[n] for n in events if n in UVM_EVENTS]
    if not syms:
        return
    missing = sorted(set(syms) - kernel_symbols(syms))
    if missing:
        raise TracingUnavailable(f"no {', '.join(missing)} in {KALLSYMS}: nvidia-uvm is not loaded (UVM's events "
                                 "are kprobes on its functions)", reason="no-kprobes")


def tracefs_event_dir() -> Path | None:
    """tracefs's ``events/huvm`` folder (the patched module's tracepoints), or None when it is not there."""
    for t in TRACEFS:
        if (t / "events" / PROVIDER).is_dir():
            return t / "events" / PROVIDER
    return None


def tracepoints_present() -> bool:
    return tracefs_event_dir() is not None


def tracepoints_have_uvm_ids(events: tuple[str, ...]) -> bool:
    """Whether the loaded module's tracepoints carry uvm_gpu and uvm_peer (their tracefs format says so)."""
    d = tracefs_event_dir()
    if d is None:
        return False
    try:
        fmt = (d / probe_name(events[0]) / "format").read_text()
    except OSError:
        return False
    return "uvm_gpu" in fmt and "uvm_peer" in fmt


def default_library() -> str:
    """The shared object with the USDT probes of the in-process core and simulator (huvm._huvm_cffi)."""
    import huvm._huvm_cffi as ext

    path = getattr(ext, "__file__", None)
    if not path:
        raise TracingUnavailable("huvm._huvm_cffi has no file", reason="attach")
    return str(path)


def bcc_available() -> bool:
    try:
        import bcc  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """libbcc prints to fd 2 directly; keep that off the terminal (huvm-top owns it; huvmctl prints one line).

    The saved descriptors are put above 100: bcc's cleanup closes one low descriptor twice (seen with
    python3-bpfcc 0.26), which must not be ours."""
    saved = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 100)
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    devnull = fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(null)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def totals(seqs: dict[tuple[int, str], int], names: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Per-CPU counts (:meth:`Tracer.seqs`) summed per event name, every name present."""
    out = dict.fromkeys(names, 0)
    for (_cpu, name), v in seqs.items():
        out[name] = out.get(name, 0) + v
    return out


def before(r: Record, seqs: dict[tuple[int, str], int]) -> bool:
    """Whether record ``r`` is counted in the snapshot ``seqs`` (fired before it was taken)."""
    return r.seq <= seqs.get((r.cpu, r.name), 0)


# -- the tracer ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    """One event as the perf buffer delivered it. uvm_gpu/uvm_peer are None where the source has none."""

    ts_ns: int
    name: str
    gpu: int
    peer: int
    reason: int
    bytes: int
    va: int
    pid: int
    comm: str
    uvm_gpu: int | None
    uvm_peer: int | None
    cpu: int = -1   # the CPU it fired on, and its number among that event's records there (1, 2, ...)
    seq: int = 0


def check_can_trace() -> None:
    """Raise :class:`TracingUnavailable` unless bcc imports and this process is root."""
    if not bcc_available():
        raise TracingUnavailable("bcc is not installed (Debian: apt-get install python3-bpfcc)", reason="no-bcc")
    if os.geteuid() != 0:
        raise TracingUnavailable("tracing needs root (bcc attaches BPF programs)", reason="not-root")


class Tracer:
    """bcc attached to the huvm events. ``mode``: ``tracepoint`` (kernel), ``usdt`` (process ``pid``, default
    this one, and/or library ``path``: every process mapping it), or ``auto`` (tracepoints when the module's
    are there, else USDT). ``start()`` attaches; ``poll()`` returns the records since the last poll;
    ``counts()``/``histograms()`` are kept in the kernel (exact even when the perf buffer drops records,
    which ``lost()`` counts)."""

    def __init__(self, mode: Mode = "auto", pid: int | None = None, path: str | None = None,
                 events: tuple[str, ...] | None = None, page_cnt: int = 256) -> None:
        self.mode = mode
        self.pid = pid
        self.path = path
        self.names = events or event_names()
        self.page_cnt = page_cnt
        self.description = "bcc (not started)"
        self.uvm_ids = False
        self._bpf: Any = None
        self._batch: list[Record] = []
        self._lock = threading.Lock()
        self._closed = False
        self._lost = 0

    def kind(self) -> Kind:
        if self.mode == "tracepoint":
            return "tracepoint"
        if self.mode == "usdt":
            return "usdt"
        if all(n in UVM_EVENTS for n in self.names):
            return "tracepoint"  # kprobes only
        return "tracepoint" if tracepoints_present() else "usdt"

    def start(self) -> None:
        check_can_trace()
        from bcc import BPF, USDT

        kind = self.kind()
        huvm_names = tuple(n for n in self.names if n not in UVM_EVENTS)
        if kind == "usdt" and len(huvm_names) < len(self.names):
            raise TracingUnavailable("UVM's events (uvm_*) are kprobes on nvidia-uvm: not with USDT probes",
                                     reason="no-kprobes")
        if kind == "tracepoint":
            if huvm_names and not tracepoints_present():
                raise TracingUnavailable("no huvm tracepoints: the patched nvidia-uvm is not loaded",
                                         reason="no-tracepoints")
            check_kprobes(self.names)
            self.uvm_ids = bool(huvm_names) and tracepoints_have_uvm_ids(huvm_names)
        text = program(kind, self.names, self.uvm_ids)
        if self._closed:
            return
        try:
            with quiet_stderr():
                self._attach(BPF, USDT, kind, text)
        except TracingUnavailable:
            raise
        except Exception as exc:  # bcc raises plain Exception on attach and compile failures
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise TracingUnavailable(f"bcc: {first}", reason="attach") from exc
        # With lost_cb, bcc counts drops instead of printing "Possibly lost" on the terminal; the counts and
        # histograms are kept in the kernel, so they stay exact when the log drops records.
        self._bpf[b"events"].open_perf_buffer(self._on_event, page_cnt=self.page_cnt, lost_cb=self._on_lost)
        if self._closed:  # closed while attaching (e.g. huvm-top quit during the compile): undo it now
            self.close()

    def _attach(self, BPF: Any, USDT: Any, kind: str, text: str) -> None:  # noqa: N803 - bcc's class names
        if kind == "tracepoint":
            self._bpf = BPF(text=text.encode())
            kprobes = [n for n in self.names if n in UVM_EVENTS]
            for name in kprobes:
                self._bpf.attach_kprobe(event=UVM_EVENTS[name].encode(), fn_name=f"on_{name}".encode())
            parts = ([f"tracepoints {PROVIDER}:*"] if len(kprobes) < len(self.names) else []) + \
                ([f"kprobes {', '.join(UVM_EVENTS[n] for n in kprobes)}"] if kprobes else [])
            self.description = "bcc: " + " and ".join(parts)
            return
        pid, path = self.pid, self.path
        if pid is None and path is None:
            # This process (the in-process simulator): its copy of huvm's extension only, not every process
            # that maps the same library.
            default_library()  # imports the extension, so the probes are mapped
            pid = os.getpid()
        usdt = USDT(pid=pid, path=path) if pid else USDT(path=path)
        for name in self.names:
            usdt.enable_probe(probe=probe_name(name), fn_name=f"on_{name}")
        self._bpf = BPF(text=text.encode(), usdt_contexts=[usdt])
        where = f"pid {pid}" if pid else Path(path or "?").name
        self.description = f"bcc: USDT {PROVIDER}:* in {where}"

    def _on_lost(self, count: int) -> None:
        self._lost += int(count)

    def lost(self) -> int:
        """Records the perf buffer dropped (the log misses them; counts and histograms do not)."""
        return self._lost

    def _on_event(self, cpu: int, data: Any, size: int) -> None:
        e = self._bpf[b"events"].event(data)
        name = self.names[e.ev] if e.ev < len(self.names) else str(e.ev)
        ug, up = int(e.uvm_gpu), int(e.uvm_peer)
        gpu, peer = (-1, -1) if name in UVM_EVENTS else (int(e.gpu), int(e.peer))
        self._batch.append(Record(int(e.ts), name, gpu, peer, int(e.reason), int(e.bytes),
                                  int(e.va), int(e.pid), bytes(e.comm).split(b"\0", 1)[0].decode("utf-8", "replace"),
                                  None if ug == NO_UVM_ID else ug, None if up == NO_UVM_ID else up,
                                  int(e.cpu), int(e.seq)))

    def poll(self, timeout_ms: int) -> list[Record]:
        with self._lock:
            if self._bpf is None:
                return []
            self._batch = []
            self._bpf.perf_buffer_poll(timeout=timeout_ms)
            out, self._batch = self._batch, []
        return out

    def seqs(self) -> dict[tuple[int, str], int]:
        """The kernel's per-CPU counts: (cpu, event) -> how many fired there, which is also the sequence
        number of the last of them (:attr:`Record.seq`). A record with ``seq`` above its entry fired after
        this snapshot."""
        with self._lock:
            if self._bpf is None:
                return {}
            table = self._bpf[b"counts"]
            out: dict[tuple[int, str], int] = {}
            for i, name in enumerate(self.names):
                for cpu, v in enumerate(table.getvalue(table.Key(i))):
                    if int(v):
                        out[(cpu, name)] = int(v)
            return out

    def counts(self) -> dict[str, int]:
        """Events fired per name since ``start()`` (all CPUs)."""
        return totals(self.seqs(), self.names) if self._bpf is not None else {}

    def histograms(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        with self._lock:
            if self._bpf is None:
                return {}
            items = list(self._bpf[b"hist"].items())
        for k, v in items:
            if k.ev < len(self.names):
                slots = out.setdefault(self.names[k.ev], [0] * 65)
                slots[min(int(k.slot), 64)] += int(v.value)
        return out

    def close(self) -> None:
        self._closed = True
        with self._lock, quiet_stderr():
            bpf, self._bpf = self._bpf, None
            if bpf is None:
                return
            # Without tracefs mounted, bcc's uprobes are perf-event based and its detach (which also writes
            # uprobe_events) fails after closing the fd: drop those entries so cleanup() finishes the rest.
            for ev_name in list(getattr(bpf, "uprobe_fds", {})):
                try:
                    bpf.detach_uprobe_event(ev_name)
                except Exception:  # noqa: BLE001 - bcc raises plain Exception
                    bpf.uprobe_fds.pop(ev_name, None)
            try:
                bpf.cleanup()
            except Exception:  # noqa: BLE001
                pass
            atexit.unregister(bpf.cleanup)
