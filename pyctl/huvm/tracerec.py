"""Record huvm events with bcc into a Parquet event table (``huvmctl trace record``; docs/traces.md).

    from huvm import tracerec
    res = tracerec.record("out/events.parquet", mode="tracepoint", duration_s=10)
    res = tracerec.record("out/sim.parquet", mode="usdt", during=lambda: run_my_simulation())

Sources (:class:`huvm.bpf.Tracer`): the kernel tracepoints ``huvm:huvm_<event>`` of the patched module, the USDT
probes of a process (``pid``), or, with ``during``, the USDT probes of this process while ``during()`` runs (the
in-process simulator). The rows follow :data:`huvm.traces.events.EVENT_SCHEMA`; records the perf buffer
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

from . import abi, bpf
from .errors import InvalidValue, UsageError

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
    return {ev: abi.enum_names(prefix) for ev, prefix in REASON_FAMILY.items()}


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
        names = self.reasons.get(r.name)
        c["reason_name"].append(None if names is None else names.get(r.reason, str(r.reason)))
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
        counts = tracer.counts()
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
