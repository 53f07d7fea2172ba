"""Record huvm events with bcc into a Parquet event table (``huvmctl trace record``; docs/traces.md).

    from huvm import tracerec
    res = tracerec.record("out/events.parquet", mode="tracepoint", duration_s=10)
    res = tracerec.record("out/sim.parquet", mode="usdt", during=lambda: run_my_simulation())

Sources (:class:`huvm.bpf.Tracer`): the kernel tracepoints ``huvm:huvm_<event>`` of the patched module, the USDT
probes of a process (``pid``), or, with ``during``, the USDT probes of this process while ``during()`` runs (the
in-process simulator). The rows follow :data:`huvmlab.traces.events.EVENT_SCHEMA`; records the perf buffer
dropped are counted into the file's metadata (``huvm.events.lost``), next to the exact per-event counts kept
in the kernel. Needs root and bcc: otherwise :class:`huvm.bpf.TracingUnavailable`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from huvm import abi, bpf
from huvm.errors import InvalidValue, UsageError

T = TypeVar("T")
FLUSH_ROWS = 65536
# Which reason names an event's reason code has (docs/counters.md, "Events"); prefetch has none.
REASON_FAMILY = {"evict": "HUVM_REASON_", "preevict": "HUVM_REASON_", "giveback": "HUVM_REASON_",
                 "fetch": "HUVM_FETCHED_", "policy": "HUVM_PRESET_"}


class OutputExists(UsageError):
    """The output file exists and overwriting was not asked for."""


@dataclass
class RecordResult(Generic[T]):
    """What a recording wrote: rows (records in the file), lost (dropped by the perf buffer), counts (per event,
    counted in the kernel: rows + lost, plus what ``count`` cut off), the source, and ``during``'s result."""

    path: Path
    rows: int
    lost: int
    counts: dict[str, int]
    source: str
    seconds: float
    per_event: dict[str, int] = field(default_factory=dict)
    value: T | None = None


def reason_names() -> dict[str, dict[int, str]]:
    """Per event, its reason codes' names: huvm's from the ABI header, uvm_make_resident's UVM's causes."""
    out = {ev: abi.enum_names(prefix) for ev, prefix in REASON_FAMILY.items()}
    out["uvm_make_resident"] = dict(enumerate(bpf.UVM_CAUSES))
    return out


def reason_name(reasons: dict[str, dict[int, str]], event: str, reason: int) -> str | None:
    """The name of an event's reason code (None for an event without reasons: prefetch, uvm_fault)."""
    names = reasons.get(event)
    return None if names is None else names.get(reason, str(reason))


class _Writer:
    """Rows buffered per column, flushed into one Parquet file in row groups."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        from .traces.events import EVENT_SCHEMA

        self.schema = EVENT_SCHEMA
        self.path = path
        self.writer = pq.ParquetWriter(str(path), EVENT_SCHEMA)
        self.cols: dict[str, list[Any]] = {f.name: [] for f in EVENT_SCHEMA}
        self.rows = 0
        self.per_event: dict[str, int] = {}
        self.reasons = reason_names()

    def add(self, r: bpf.Record) -> None:
        c = self.cols
        c["ts_ns"].append(r.ts_ns)
        c["event"].append(r.name)
        c["gpu"].append(r.gpu)
        c["peer"].append(r.peer)
        c["reason"].append(r.reason)
        c["reason_name"].append(self.reason_name(r.name, r.reason))
        c["bytes"].append(r.bytes)
        c["va"].append(r.va)
        c["pid"].append(r.pid)
        c["comm"].append(r.comm)
        c["uvm_gpu"].append(r.uvm_gpu)
        c["uvm_peer"].append(r.uvm_peer)
        self.rows += 1
        self.per_event[r.name] = self.per_event.get(r.name, 0) + 1
        if len(c["ts_ns"]) >= FLUSH_ROWS:
            self.flush()

    def reason_name(self, event: str, reason: int) -> str | None:
        return reason_name(self.reasons, event, reason)

    def flush(self) -> None:
        import pyarrow as pa

        if not self.cols["ts_ns"]:
            return
        self.writer.write_table(pa.Table.from_pydict(self.cols, schema=self.schema))
        self.cols = {f.name: [] for f in self.schema}

    def close(self, metadata: dict[bytes, bytes]) -> None:
        self.flush()
        self.writer.add_key_value_metadata(metadata)
        self.writer.close()

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.path.unlink(missing_ok=True)


def check_output(out: str | Path, force: bool) -> Path:
    path = Path(out)
    if path.exists() and not force:
        raise OutputExists(f"{path} exists (--force overwrites it)")
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a file")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent}: no such directory")
    return path


def record(out: str | Path, *, mode: bpf.Mode = "auto", pid: int | None = None,
           events: tuple[str, ...] | None = None, duration_s: float | None = None, count: int | None = None,
           during: Callable[[], T] | None = None, force: bool = False,
           stop: threading.Event | None = None, page_cnt: int = 1024) -> RecordResult[T]:
    """Record events into ``out`` (Parquet) until ``duration_s`` passed, ``count`` records were written,
    ``during()`` returned (then the records it caused are drained), ``stop`` was set, or Ctrl-C.

    ``mode``/``pid`` pick the source as :class:`huvm.bpf.Tracer` does (``usdt`` without pid: this process).
    The file is written to ``out`` + ``.part`` and renamed at the end, so ``out`` is never half written."""
    path = check_output(out, force)
    if duration_s is not None and duration_s <= 0:
        raise InvalidValue(f"duration {duration_s}: must be > 0", field="duration")
    if count is not None and count <= 0:
        raise InvalidValue(f"count {count}: must be > 0", field="count")
    if pid is not None and not Path(f"/proc/{pid}").is_dir():
        raise InvalidValue(f"no process {pid}", field="pid")
    names = events or bpf.event_names()
    tracer = bpf.Tracer(mode, pid, None, names, page_cnt=page_cnt)
    tracer.start()
    part = path.with_name(path.name + ".part")
    writer = _Writer(part)
    t0 = time.monotonic()
    result: list[T] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def run_during() -> None:
        try:
            assert during is not None
            result.append(during())
        except BaseException as exc:  # noqa: BLE001 - handed to the recording thread, raised there
            failure.append(exc)
        finally:
            done.set()

    def full() -> bool:
        return count is not None and writer.rows >= count

    try:
        worker = None
        if during is not None:
            worker = threading.Thread(target=run_during, name="huvm-trace-during", daemon=True)
            worker.start()
        try:
            while not full():
                if stop is not None and stop.is_set():
                    break
                if duration_s is not None and time.monotonic() - t0 >= duration_s:
                    break
                finished = done.is_set()
                batch = tracer.poll(100)
                for r in batch:
                    if full():
                        break
                    writer.add(r)
                if finished and not batch:  # during() returned before this poll, and nothing is left
                    break
        except KeyboardInterrupt:
            if worker is not None:  # the workload runs on: no complete recording of it
                raise
            # Ctrl-C ends an open-ended recording: what was recorded is written
        if worker is not None:
            worker.join()
        if failure:
            raise failure[0]
        # the counts end the recording: what they count and the buffer still holds is written, nothing later
        snap = tracer.seqs()
        while not full():
            batch = tracer.poll(20)
            if not batch:
                break
            for r in batch:
                if bpf.before(r, snap) and not full():
                    writer.add(r)
        counts = bpf.totals(snap, tracer.names)
        lost = tracer.lost()
        source = tracer.description
    except BaseException:
        tracer.close()
        writer.abort()
        raise
    tracer.close()
    from .traces.events import metadata

    writer.close(metadata(lost, counts, source))
    os.replace(part, path)
    return RecordResult(path, writer.rows, lost, counts, source, time.monotonic() - t0, dict(writer.per_event),
                        result[0] if result else None)


# ---- recording alongside an experiment (``[record] events``) -------------------------------------------------

@dataclass
class Segment:
    """The events of one stretch of a recording (one experiment run): rows as the event schema's columns, the
    records the perf buffer dropped in it, the per-event counts the kernel kept over it, the source."""

    rows: list[dict[str, Any]]
    lost: int
    counts: dict[str, int]
    source: str


def rows_of(records: list[bpf.Record], reasons: dict[str, dict[int, str]] | None = None) -> list[dict[str, Any]]:
    """Records as event-table rows (:data:`huvmlab.traces.events.EVENT_SCHEMA`'s columns)."""
    reasons = reasons if reasons is not None else reason_names()
    return [{"ts_ns": r.ts_ns, "event": r.name, "gpu": r.gpu, "peer": r.peer, "reason": r.reason,
             "reason_name": reason_name(reasons, r.name, r.reason), "bytes": r.bytes, "va": r.va, "pid": r.pid,
             "comm": r.comm, "uvm_gpu": r.uvm_gpu, "uvm_peer": r.uvm_peer} for r in records]


_CUT_WAIT_S = 1.0  # how long a cut waits for records its counts say were submitted (a BPF program's submit
                   # follows its count by microseconds; a dropped record is counted as lost instead)


class RunRecorder:
    """One tracer kept attached over several runs (an experiment's), polled by a thread so the perf buffer
    does not overflow during a run; :meth:`cut` drains it and returns the events since the last cut.

    ``mode``: ``usdt`` (this process: the in-process simulator) or ``tracepoint`` (the kernel's tracepoints,
    and kprobes for UVM's events)."""

    def __init__(self, events: tuple[str, ...], mode: bpf.Mode, page_cnt: int = 1024) -> None:
        self.tracer = bpf.Tracer(mode, None, None, events, page_cnt=page_cnt)
        self.reasons = reason_names()
        self._records: list[bpf.Record] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts: dict[str, int] = {}
        self._lost = 0

    def start(self) -> RunRecorder:
        self.tracer.start()
        self._start_thread()
        return self

    def _start_thread(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="huvm-record", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            batch = self.tracer.poll(50)
            if batch:
                with self._lock:
                    self._records.extend(batch)

    def cut(self) -> Segment:
        """The events since the last cut (or the start). The kernel's per-CPU counts are taken first, then the
        perf buffer is drained until every record they count has arrived (or was dropped): a record counted
        by the snapshot belongs to this segment, a later one to the next, so each segment's counts equal its
        rows plus its dropped records, however busy the node is at the cut."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        snap = self.tracer.seqs()
        expected = sum(bpf.totals(snap, self.tracer.names).values()) - sum(self._counts.values())
        deadline = time.monotonic() + _CUT_WAIT_S
        have = sum(1 for r in self._records if bpf.before(r, snap))
        while have + self.tracer.lost() - self._lost < expected and time.monotonic() < deadline:
            batch = self.tracer.poll(20)  # what the kernel submitted and the thread did not read yet
            self._records.extend(batch)
            have += sum(1 for r in batch if bpf.before(r, snap))
        lost = self.tracer.lost()
        with self._lock:
            records = [r for r in self._records if bpf.before(r, snap)]
            self._records = [r for r in self._records if not bpf.before(r, snap)]
        counts = bpf.totals(snap, self.tracer.names)
        seg = Segment(rows_of(records, self.reasons), lost - self._lost,
                      {k: v - self._counts.get(k, 0) for k, v in counts.items()}, self.tracer.description)
        self._counts, self._lost = counts, lost
        self._start_thread()
        return seg

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.tracer.close()

    def __enter__(self) -> RunRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_segment(path: str | Path, seg: Segment) -> Path:
    """One segment as an event-table file (what ``trace record`` writes; :func:`huvmlab.traces.events.read_events`
    reads it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .traces.events import EVENT_SCHEMA, metadata

    p = Path(path)
    table = pa.Table.from_pylist(seg.rows, schema=EVENT_SCHEMA) if seg.rows else EVENT_SCHEMA.empty_table()
    table = table.replace_schema_metadata(metadata(seg.lost, seg.counts, seg.source))
    pq.write_table(table, p, compression="zstd", write_statistics=False)
    return p
