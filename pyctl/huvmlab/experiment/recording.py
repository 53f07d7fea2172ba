"""Events recorded alongside an experiment (``[record] events = [...]``, docs/experiments.md "Recording events").

Every run of the experiment records the listed events through the tracer of ``huvmctl trace record``
(:class:`huvmlab.tracerec.RunRecorder`, bcc, root): on the simulated node the simulator's USDT probes in this
process, on the emulated node (inside its guest) and on a local node the patched module's kernel tracepoints and,
for UVM's own events (``uvm_fault``, ``uvm_make_resident``), kprobes on nvidia-uvm. Each run's events are kept in
its :class:`~huvmlab.experiment.results.RunEvents` and written as the trace schema's event table, one file per run
(``data/events/RUN.parquet``, read by :func:`huvmlab.traces.events.read_events`), and all runs together with the run
columns (``data/events.parquet`` and ``.csv``). :func:`counters_vs_events` checks a run's counters against its
events; the report notes the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from huvm import abi, bpf

from .results import ExperimentResult, RunEvents, RunResult

CHUNK_BYTES = 2 << 20
#: huvm events -> the per-GPU counters they mirror (docs/counters.md, "Events"), checked by counters_vs_events
CHECKED_METRICS = {"evict": ("evict_to_peer", "evict_to_host"),
                   "preevict": ("evict_to_peer", "evict_to_host", "preevict_to_peer", "preevict_to_host"),
                   "fetch": ("fetch_from_peer", "fetch_from_host", "remote_map"),
                   "giveback": ("giveback",),
                   "prefetch": ("prefetch_local", "prefetch_to_peer")}


def chunks_of(nbytes: int) -> int:
    """huvm_chunks_of() (driver/core/huvm_internal.h): 2 MiB chunks, rounded up."""
    return (nbytes + CHUNK_BYTES - 1) // CHUNK_BYTES


def expected_counters(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], int]:
    """The per-GPU counters the huvm events imply, (GPU, metric) -> value, as huvm_account_*() count them
    (driver/core/huvm_account.c): ``evict`` and ``preevict`` add the owner's (``gpu``) chunks to
    ``evict_to_peer``/``evict_to_host`` (a pre-eviction also to ``preevict_to_*``); ``fetch`` from the host adds
    ``fetch_from_host`` (pages copied: whole 2 MiB only), from a peer ``fetch_from_peer`` unless it is a page run
    (reason pages: the release counts the chunk), remote_map ``remote_map``; ``giveback`` the lender's (``gpu``)
    ``giveback``; ``prefetch`` ``prefetch_local`` (to the owner) or ``prefetch_to_peer``. Chunks are the event's
    bytes rounded up to 2 MiB."""
    lib = abi.lib
    host = int(lib.HUVM_DEST_HOST)
    out: dict[tuple[int, str], int] = {}

    def add(g: int, metric: str, n: int) -> None:
        out[(g, metric)] = out.get((g, metric), 0) + n

    for r in rows:
        name, g, peer, reason = str(r["event"]), int(r["gpu"]), int(r["peer"]), int(r["reason"])
        nbytes = int(r["bytes"])
        if name in ("evict", "preevict"):
            where = "host" if peer == host else "peer"
            add(g, f"evict_to_{where}", chunks_of(nbytes))
            if name == "preevict":
                add(g, f"preevict_to_{where}", chunks_of(nbytes))
        elif name == "fetch":
            if peer == host:
                add(g, "fetch_from_host", nbytes // CHUNK_BYTES if reason == lib.HUVM_FETCHED_PAGES
                    else chunks_of(nbytes))
            elif reason == lib.HUVM_FETCHED_REMOTE_MAP:
                add(g, "remote_map", chunks_of(nbytes))
            elif reason != lib.HUVM_FETCHED_PAGES:
                add(g, "fetch_from_peer", chunks_of(nbytes))
        elif name == "giveback":
            add(g, "giveback", chunks_of(nbytes))
        elif name == "prefetch":
            add(g, "prefetch_local" if peer == g else "prefetch_to_peer", chunks_of(nbytes))
    return out


def in_window(events: RunEvents) -> list[dict[str, Any]]:
    """The rows inside the counters' window (all rows where there is none)."""
    if events.window_ns is None:
        return list(events.rows)
    lo, hi = events.window_ns
    return [r for r in events.rows if lo <= int(r["ts_ns"]) <= hi]


def counters_vs_events(run: RunResult, rows: Iterable[Mapping[str, Any]] | None = None) -> list[str]:
    """A run's per-GPU counters against its recorded huvm events (``rows``; default: the run's own, inside the
    counters' window): for every recorded event name, every counter it mirrors (:data:`CHECKED_METRICS`) on
    every GPU. One line per disagreement (empty: they agree). GPU indices are the experiment's on both sides."""
    if rows is None:
        if run.events is None:
            return []
        rows = in_window(run.events)
    rows = list(rows)
    # the events recorded (without the run's record: every huvm event, the rows are the whole recording)
    recorded = set(run.events.counts) if run.events is not None and run.events.counts else set(CHECKED_METRICS)
    want = expected_counters(rows)
    have: dict[tuple[int, str], int] = {}
    gpus: set[int] = set()
    for c in run.counters:
        if c.scope == "gpu":
            have[(c.gpu, c.metric)] = c.value
            gpus.add(c.gpu)
    gpus |= {g for g, _ in want}
    # a metric is checked only when every event that counts into it was recorded
    metrics = [m for m in dict.fromkeys(m for ms in CHECKED_METRICS.values() for m in ms)
               if all(name in recorded for name, ms in CHECKED_METRICS.items() if m in ms)]
    out = []
    for g in sorted(gpus):
        for m in metrics:
            if have.get((g, m), 0) != want.get((g, m), 0):
                out.append(f"{run.key.run_id}: GPU{g} {m}: counter {have.get((g, m), 0)}, events "
                           f"{want.get((g, m), 0)}")
    return out


def file_name(run_id: str) -> str:
    """A run's event file name (run ids carry '#' and sweep values)."""
    return re.sub(r"[^A-Za-z0-9._@#=+-]", "_", run_id) + ".parquet"


def write(res: ExperimentResult, data: Path) -> list[Path]:
    """The recorded events of every run: ``data/events/RUN.parquet`` (the event table) and ``data/events.parquet``
    and ``.csv`` (every run's, with the run columns). Nothing without recorded events."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from ..tracerec import Segment, write_segment
    from ..traces.events import EVENT_SCHEMA

    runs = [r for r in res.runs if r.events is not None]
    if not runs:
        return []
    folder = data / "events"
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tables = []
    for r in runs:
        assert r.events is not None
        written.append(write_segment(folder / file_name(r.key.run_id),
                                     Segment(r.events.rows, r.events.lost, r.events.counts, r.events.source)))
        t = pa.Table.from_pylist(r.events.rows, schema=EVENT_SCHEMA) if r.events.rows else \
            EVENT_SCHEMA.empty_table()
        n = t.num_rows
        sweep = None if r.key.sweep_value is None else str(r.key.sweep_value)
        keys = pa.table({"run_id": pa.array([r.key.run_id] * n, pa.string()),
                         "policy": pa.array([r.key.policy] * n, pa.string()),
                         "sweep_value": pa.array([sweep] * n, pa.string()),
                         "repetition": pa.array([r.key.repetition] * n, pa.int64())})
        tables.append(pa.Table.from_arrays(keys.columns + t.columns, names=keys.column_names + t.column_names))
    allt = pa.concat_tables(tables)
    pq_path, csv_path = data / "events.parquet", data / "events.csv"
    pq.write_table(allt, pq_path, compression="zstd", write_statistics=False)
    pacsv.write_csv(allt, csv_path)
    return [*written, pq_path, csv_path]


def notes(res: ExperimentResult, names: tuple[str, ...]) -> list[str]:
    """What the report says about the recording: which events, from where, where they are, what was lost, and
    whether the counters agree with them."""
    runs = [r for r in res.runs if r.events is not None]
    if not runs:
        return []
    source = runs[0].events.source if runs[0].events is not None else ""
    rows = sum(len(r.events.rows) for r in runs if r.events is not None)
    lost = sum(r.events.lost for r in runs if r.events is not None)
    out = [f"recorded events ({', '.join(names)}; {source}): {rows} in {len(runs)} runs, {lost} lost; per run in "
           "data/events/RUN.parquet (the trace schema's event table, docs/traces.md), all runs in data/events.*"]
    if any(n in CHECKED_METRICS for n in names) and any(c.scope == "gpu" for r in runs for c in r.counters):
        bad = [line for r in runs for line in counters_vs_events(r)]
        if lost:
            out.append(f"counters vs events not checked: the perf buffer dropped {lost} records")
        elif bad:
            out += [f"counters vs events: {line}" for line in bad]
        else:
            out.append("counters vs events: every run's counters equal its recorded events")
    return out


def check_names(names: Iterable[str]) -> tuple[str, ...]:
    """[record] events as known names (huvm.bpf.check_events: an InvalidValue for an unknown one)."""
    return bpf.check_events(list(names))
