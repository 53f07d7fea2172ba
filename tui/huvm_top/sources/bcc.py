"""BccSource: huvm events through bcc, from the kernel tracepoints (``huvm:huvm_<event>``, the patched module)
or the USDT probes (provider ``huvm``) of a process running the simulated node or the policy core.

The BPF program and the tracer are huvm's (:mod:`huvm.bpf`, shared with ``huvmctl trace record``): per event a
count, a log2 histogram of ``bytes`` kept in the kernel, and a perf-buffer record for the event log. This
module adapts the tracer to huvm-top's EventSource (TraceEvent records, SourceError on failure).

bcc is Debian's python3-bpfcc (system site packages); attaching needs root (CAP_BPF/CAP_PERFMON).
"""

from __future__ import annotations

from huvm import bpf
from huvm.bpf import ARGS, TRACEFS, Mode, program, tracepoints_present

from huvm_top.model import SourceError, TraceEvent

__all__ = ["ARGS", "TRACEFS", "BccSource", "Mode", "default_library", "program", "tracepoints_present"]


def default_library() -> str:
    """The shared object with the USDT probes of the in-process core and simulator (huvm._huvm_cffi)."""
    try:
        return bpf.default_library()
    except bpf.TracingUnavailable as exc:
        raise SourceError(str(exc)) from None


class BccSource:
    """An EventSource over bcc. ``mode``: ``tracepoint`` (kernel), ``usdt`` (process ``pid``, default this
    one, and/or library ``path``: every process mapping it), or ``auto`` (tracepoints when the module's are
    there, else USDT)."""

    def __init__(self, mode: Mode = "auto", pid: int | None = None, path: str | None = None,
                 events: tuple[str, ...] | None = None) -> None:
        self._tracer = bpf.Tracer(mode, pid, path, events)
        self.mode = mode
        self.pid = pid
        self.path = path
        self.names = self._tracer.names
        self.description = self._tracer.description

    def start(self) -> None:
        try:
            self._tracer.start()
        except bpf.TracingUnavailable as exc:
            raise SourceError(str(exc)) from None
        self.description = self._tracer.description

    def lost(self) -> int:
        """Records the perf buffer dropped (the log misses them; counts and histograms do not)."""
        return self._tracer.lost()

    def poll(self, timeout_ms: int) -> list[TraceEvent]:
        return [TraceEvent(r.ts_ns, r.name, r.gpu, r.peer, r.reason, r.bytes, r.va)
                for r in self._tracer.poll(timeout_ms)]

    def counts(self) -> dict[str, int]:
        return self._tracer.counts()

    def histograms(self) -> dict[str, list[int]]:
        return self._tracer.histograms()

    def close(self) -> None:
        self._tracer.close()
