"""BccSource: huvm events through bcc, from the kernel tracepoints (``huvm:huvm_<event>``, the patched module)
or the USDT probes (provider ``huvm``) of a process running the simulated node or the policy core.

The BPF program is generated from the event list of ``driver/core/huvm_events.h`` (every event has the
arguments gpu, peer, reason, bytes, va): per event a count, a log2 histogram of ``bytes`` kept in the
kernel (bcc's ``bpf_log2l`` slots, as biolatency does), and a perf-buffer record for the event log.

bcc is Debian's python3-bpfcc (system site packages); attaching needs root (CAP_BPF/CAP_PERFMON).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from huvm_top import abi
from huvm_top.model import SourceError, TraceEvent

Mode = Literal["auto", "tracepoint", "usdt"]
TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
ARGS = ("gpu", "peer", "reason", "bytes", "va")  # HUVM_EVENT_ARGS, in order

_PROLOGUE = """\
#include <uapi/linux/ptrace.h>

struct huvm_event_t {
    u64 ts;
    u32 ev;
    u32 gpu;
    u32 peer;
    u32 reason;
    u64 bytes;
    u64 va;
};

struct hist_key_t {
    u32 ev;
    u32 slot;
};

BPF_PERF_OUTPUT(events);
BPF_ARRAY(counts, u64, NEVENTS);
BPF_HASH(hist, struct hist_key_t, u64);

static inline int record(void *ctx, u32 ev, u32 gpu, u32 peer, u32 reason, u64 bytes, u64 va)
{
    struct huvm_event_t e = {};
    struct hist_key_t k = {};

    e.ts = bpf_ktime_get_ns();
    e.ev = ev;
    e.gpu = gpu;
    e.peer = peer;
    e.reason = reason;
    e.bytes = bytes;
    e.va = va;
    counts.increment(ev);
    k.ev = ev;
    k.slot = bpf_log2l(bytes);
    hist.increment(k);
    events.perf_submit(ctx, &e, sizeof(e));
    return 0;
}
"""

_USDT_FN = """
int on_{name}(struct pt_regs *ctx)
{{
    u32 gpu = 0, peer = 0, reason = 0;
    u64 bytes = 0, va = 0;

    bpf_usdt_readarg(1, ctx, &gpu);
    bpf_usdt_readarg(2, ctx, &peer);
    bpf_usdt_readarg(3, ctx, &reason);
    bpf_usdt_readarg(4, ctx, &bytes);
    bpf_usdt_readarg(5, ctx, &va);
    return record(ctx, {index}, gpu, peer, reason, bytes, va);
}}
"""

_TP_FN = """
TRACEPOINT_PROBE(huvm, {probe})
{{
    return record(args, {index}, args->gpu, args->peer, args->reason, args->bytes, args->va);
}}
"""


def program(kind: Literal["tracepoint", "usdt"], events: tuple[str, ...] | None = None) -> str:
    """The BPF C text for the given events (default: all of huvm_events.h). The kernel tracepoints
    (driver/uvm/uvm_huvm_trace.h) and the USDT probes share the names: ``huvm:huvm_evict`` etc."""
    events = events or abi.event_names()
    body = _PROLOGUE.replace("NEVENTS", str(len(events)))
    fn = _USDT_FN if kind == "usdt" else _TP_FN
    return body + "".join(fn.format(name=name, probe=abi.probe_name(name), index=i) for i, name in enumerate(events))


def tracepoints_present() -> bool:
    return any((t / "events" / "huvm").is_dir() for t in TRACEFS)


def default_library() -> str:
    """The shared object with the USDT probes of the in-process core and simulator (huvm._huvm_cffi)."""
    import huvm._huvm_cffi as ext

    path = getattr(ext, "__file__", None)
    if not path:
        raise SourceError("huvm._huvm_cffi has no file")
    return str(path)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """libbcc prints to fd 2 directly; keep that off the terminal the TUI owns.

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


class BccSource:
    """An EventSource over bcc. ``mode``: ``tracepoint`` (kernel), ``usdt`` (process ``pid``, default this
    one, and/or library ``path``: every process mapping it), or ``auto`` (tracepoints when the module's are
    there, else USDT)."""

    def __init__(self, mode: Mode = "auto", pid: int | None = None, path: str | None = None,
                 events: tuple[str, ...] | None = None) -> None:
        self.mode = mode
        self.pid = pid
        self.path = path
        self.names = events or abi.event_names()
        self.description = "bcc (not started)"
        self._bpf: Any = None
        self._batch: list[TraceEvent] = []
        self._lock = threading.Lock()
        self._closed = False
        self._lost = 0

    def _kind(self) -> Literal["tracepoint", "usdt"]:
        if self.mode == "tracepoint":
            return "tracepoint"
        if self.mode == "usdt":
            return "usdt"
        return "tracepoint" if tracepoints_present() else "usdt"

    def start(self) -> None:
        try:
            from bcc import BPF, USDT  # type: ignore[import-untyped]
        except ImportError:
            raise SourceError("bcc is not installed (Debian: apt-get install python3-bpfcc)") from None
        if os.geteuid() != 0:
            raise SourceError("tracing needs root (bcc attaches BPF programs)")
        kind = self._kind()
        text = program(kind, self.names)
        if self._closed:
            return
        try:
            with _quiet_stderr():
                self._attach(BPF, USDT, kind, text)
        except SourceError:
            raise
        except Exception as exc:  # bcc raises plain Exception on attach and compile failures
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise SourceError(f"bcc: {first}") from exc
        # With lost_cb, bcc counts drops instead of printing "Possibly lost" on the terminal; the counts and
        # histograms are kept in the kernel, so they stay exact when the log drops records.
        self._bpf[b"events"].open_perf_buffer(self._on_event, page_cnt=256, lost_cb=self._on_lost)
        if self._closed:  # closed while attaching (the app quit during the compile): undo it now
            self.close()

    def _attach(self, BPF: Any, USDT: Any, kind: str, text: str) -> None:  # noqa: N803 - bcc's class names
        if kind == "tracepoint":
            if not tracepoints_present():
                raise SourceError("no huvm tracepoints: the patched nvidia-uvm is not loaded")
            self._bpf = BPF(text=text.encode())
            self.description = "bcc: tracepoints huvm:*"
            return
        pid, path = self.pid, self.path
        if pid is None and path is None:
            # This process (the in-process simulator): its copy of huvm's extension only, not every process
            # that maps the same library.
            default_library()  # imports the extension, so the probes are mapped
            pid = os.getpid()
        usdt = USDT(pid=pid, path=path) if pid else USDT(path=path)
        for name in self.names:
            usdt.enable_probe(probe=abi.probe_name(name), fn_name=f"on_{name}")
        self._bpf = BPF(text=text.encode(), usdt_contexts=[usdt])
        where = f"pid {pid}" if pid else Path(path or "?").name
        self.description = f"bcc: USDT huvm:* in {where}"

    def _on_lost(self, count: int) -> None:
        self._lost += int(count)

    def lost(self) -> int:
        """Records the perf buffer dropped (the log misses them; counts and histograms do not)."""
        return self._lost

    def _on_event(self, cpu: int, data: Any, size: int) -> None:
        e = self._bpf[b"events"].event(data)
        name = self.names[e.ev] if e.ev < len(self.names) else str(e.ev)
        self._batch.append(TraceEvent(int(e.ts), name, int(e.gpu), int(e.peer), int(e.reason), int(e.bytes),
                                      int(e.va)))

    def poll(self, timeout_ms: int) -> list[TraceEvent]:
        with self._lock:
            if self._bpf is None:
                return []
            self._batch = []
            self._bpf.perf_buffer_poll(timeout=timeout_ms)
            out, self._batch = self._batch, []
        return out

    def counts(self) -> dict[str, int]:
        with self._lock:
            if self._bpf is None:
                return {}
            table = self._bpf[b"counts"]
            return {name: int(table[table.Key(i)].value) for i, name in enumerate(self.names)}

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
        with self._lock, _quiet_stderr():
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
