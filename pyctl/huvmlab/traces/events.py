"""The event table: huvm events recorded by ``huvmctl trace record`` (:mod:`huvmlab.tracerec`), one Parquet file.

One row per tracepoint / USDT probe hit (docs/counters.md, "Events"; docs/traces.md, "Recorded events"):

========== ============== ===============================================================================
column     type           meaning
========== ============== ===============================================================================
ts_ns      int64          bpf_ktime_get_ns() when the event fired (CLOCK_MONOTONIC, ns)
event      string         event name of driver/core/huvm_events.h: evict, preevict, fetch, giveback, ...;
                          or UVM's own (kprobes, huvm.bpf.UVM_EVENTS): uvm_fault, uvm_make_resident
gpu        int32          huvm GPU index (16 = the host; -1 for UVM's events, which name no huvm GPU)
peer       int32          huvm GPU index of the other side (16 = the host; -1 for UVM's events)
reason     int32          the event's reason code (HUVM_REASON_*, HUVM_FETCHED_*, HUVM_PRESET_*; for
                          uvm_make_resident UVM's uvm_make_resident_cause_t)
reason_name string        its name (null where the event has no reason: prefetch, uvm_fault)
bytes      int64          bytes the event moved (policy: the new generation; uvm_make_resident: the pages of
                          the block region asked for; uvm_fault: 0)
va         uint64         virtual address of the chunk (0 where none)
pid        int32          process (thread group) that fired it; for kernel tracepoints, the current task
comm       string         that task's command name
uvm_gpu    int32, null    nvidia-uvm's processor id of gpu (kernel tracepoints only); for uvm_fault the faulting
                          processor, for uvm_make_resident the destination (0 = the CPU)
uvm_peer   int32, null    nvidia-uvm's processor id of peer (kernel tracepoints only)
========== ============== ===============================================================================

File metadata: ``huvm.trace.table`` = ``events``, ``huvm.events.version``, ``huvm.events.lost`` (records the
perf buffer dropped), ``huvm.events.counts`` (JSON: per event, the count kept in the kernel, which includes
dropped records) and ``huvm.events.source`` (tracepoints or USDT, and where).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import TABLE_KEY, TraceFormatError

EVENTS_VERSION = 1
EVENTS_TABLE = b"events"
VERSION_KEY = b"huvm.events.version"
LOST_KEY = b"huvm.events.lost"
COUNTS_KEY = b"huvm.events.counts"
SOURCE_KEY = b"huvm.events.source"

EVENT_SCHEMA = pa.schema([
    pa.field("ts_ns", pa.int64(), nullable=False),
    pa.field("event", pa.string(), nullable=False),
    pa.field("gpu", pa.int32(), nullable=False),
    pa.field("peer", pa.int32(), nullable=False),
    pa.field("reason", pa.int32(), nullable=False),
    pa.field("reason_name", pa.string()),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("va", pa.uint64(), nullable=False),
    pa.field("pid", pa.int32(), nullable=False),
    pa.field("comm", pa.string(), nullable=False),
    pa.field("uvm_gpu", pa.int32()),
    pa.field("uvm_peer", pa.int32()),
])


def metadata(lost: int, counts: Mapping[str, int], source: str) -> dict[bytes, bytes]:
    return {TABLE_KEY: EVENTS_TABLE, VERSION_KEY: str(EVENTS_VERSION).encode(), LOST_KEY: str(lost).encode(),
            COUNTS_KEY: json.dumps(dict(counts), sort_keys=True).encode(), SOURCE_KEY: source.encode()}


@dataclass(frozen=True)
class EventFile:
    """A recorded event file: the table and its metadata."""

    table: pa.Table
    lost: int
    counts: dict[str, int]
    source: str

    def per_event(self) -> dict[str, int]:
        """Rows per event name."""
        col = self.table.column("event").to_pylist()
        out: dict[str, int] = {}
        for name in col:
            out[name] = out.get(name, 0) + 1
        return out


def read_events(path: str | Path) -> EventFile:
    """Read and check a file written by :mod:`huvmlab.tracerec` (a :class:`TraceFormatError` when it is not one)."""
    p = Path(path)
    try:
        pf = pq.ParquetFile(p)
        table = pf.read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(p, "-", "-", f"not a Parquet file ({exc})") from None
    meta = pf.metadata.metadata or {}   # the file's key-value metadata (written after the rows)
    if meta.get(TABLE_KEY) != EVENTS_TABLE:
        raise TraceFormatError(p, "-", "-", f"not a huvm event table (no {TABLE_KEY.decode()} = events)")
    version = int(meta.get(VERSION_KEY, b"0"))
    if version != EVENTS_VERSION:
        raise TraceFormatError(p, "events", "-", f"version {version}, this huvm reads {EVENTS_VERSION}")
    if not table.schema.remove_metadata().equals(EVENT_SCHEMA):
        raise TraceFormatError(p, "events", "-", "columns differ from the event schema")
    counts = {str(k): int(v) for k, v in json.loads(meta.get(COUNTS_KEY, b"{}")).items()}
    return EventFile(table, int(meta.get(LOST_KEY, b"0")), counts, meta.get(SOURCE_KEY, b"").decode())
