"""Versioned on-disk trace format: a directory of zstd Parquet tables, plus its validator.

A trace is a directory ``NAME.trace/`` holding five Parquet files, one per table:

``storages``  one row per allocation (tensor storage, graph array, lender buffer)
``ops``       one row per kernel-like op (DNN op, graph iteration segment, lender phase)
``accesses``  one row per (op, storage byte range) touched, in touch order
``segments``  the allocator emulation's device reservations (cudaMalloc of the caching allocator)
``chunks``    derived: per op, the 2 MiB chunks touched (deduplicated, first-touch order)

Every file carries ``huvm.trace.version`` and ``huvm.trace.table`` in its Parquet key-value metadata;
``ops.parquet`` also carries ``huvm.trace.meta``, a JSON object describing the trace (kind, model,
config, parameter count, ...). Writing is deterministic: fixed writer options, sorted JSON, no
timestamps. See docs/traces.md for the column reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

SCHEMA_VERSION = 1
VERSION_KEY = b"huvm.trace.version"
TABLE_KEY = b"huvm.trace.table"
META_KEY = b"huvm.trace.meta"
CHUNK_SHIFT = 21
CHUNK_BYTES = 1 << CHUNK_SHIFT  # 2 MiB, the UVM VA-block / root-chunk size

TABLES = ("storages", "ops", "accesses", "segments", "chunks")

# Storage kinds. DNN: param/grad/optstate/buffer/input/other (activations and temporaries).
# Graph: graph (CSR/COO edge arrays), vertex (per-vertex state). Lenders: other/workspace.
KINDS = ("param", "grad", "optstate", "buffer", "input", "other", "graph", "vertex", "workspace")
MODE_READ, MODE_WRITE_NEW, MODE_RMW = 0, 1, 2

_DICT = pa.dictionary(pa.int32(), pa.string())

SCHEMAS: dict[str, pa.Schema] = {
    "storages": pa.schema(
        [
            ("sid", pa.int32()),
            ("nbytes", pa.int64()),
            ("alloc_op", pa.int32()),
            ("free_op", pa.int32()),
            ("kind", _DICT),
            ("dtype", _DICT),
            ("shape", pa.string()),
            ("addr", pa.int64()),
        ]
    ),
    "ops": pa.schema(
        [
            ("op", pa.int32()),
            ("name", _DICT),
            ("phase", _DICT),
            ("dtype", _DICT),
            ("flops", pa.int64()),
            ("bytes", pa.int64()),
            ("live_bytes", pa.int64()),
            ("fixed_ns", pa.int64()),
        ]
    ),
    "accesses": pa.schema(
        [
            ("op", pa.int32()),
            ("sid", pa.int32()),
            ("offset", pa.int64()),
            ("nbytes", pa.int64()),
            ("mode", pa.int8()),
        ]
    ),
    "segments": pa.schema(
        [
            ("base", pa.int64()),
            ("nbytes", pa.int64()),
            ("alloc_op", pa.int32()),
            ("free_op", pa.int32()),
        ]
    ),
    "chunks": pa.schema(
        [
            ("op", pa.int32()),
            ("chunk", pa.int32()),
            ("mode", pa.int8()),
        ]
    ),
}

#: segments written before segments could be released (no free_op column: every segment is kept)
LEGACY_SCHEMAS = {"segments": pa.schema([("base", pa.int64()), ("nbytes", pa.int64()), ("alloc_op", pa.int32())])}

ROW_GROUP_ROWS = 65536

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]


class TraceFormatError(ValueError):
    """A trace file is missing, truncated or violates the schema. Names file, table and row."""

    def __init__(self, path: Path | str, table: str, row: int | str, msg: str) -> None:
        self.path = str(path)
        self.table = table
        self.row = row
        self.msg = msg
        parts = [self.path]
        if table != "-":
            parts.append(f"table {table!r}" + (f", row {row}" if row != "-" else ""))
        super().__init__(": ".join([*parts, msg]))


@dataclass
class Tables:
    """Column arrays of the five tables (numpy), plus the trace-level metadata."""

    meta: dict[str, Any]
    # storages
    s_nbytes: I64
    s_alloc_op: I32
    s_free_op: I32
    s_kind: list[str]
    s_dtype: list[str]
    s_shape: list[str]
    s_addr: I64
    # ops
    o_name: list[str]
    o_phase: list[str]
    o_dtype: list[str]
    o_flops: I64
    o_bytes: I64
    o_live_bytes: I64
    o_fixed_ns: I64
    # accesses
    a_op: I32
    a_sid: I32
    a_offset: I64
    a_nbytes: I64
    a_mode: I8
    # segments
    g_base: I64
    g_nbytes: I64
    g_alloc_op: I32
    # chunks
    c_op: I32
    c_chunk: I32
    c_mode: I8
    # segments: the op after which each is released (cudaFree by empty_cache; -1 = kept; empty = all kept)
    g_free_op: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))

    def segment_free_ops(self) -> I32:
        """g_free_op, or -1 for every segment of a trace that releases none."""
        if len(self.g_free_op) == len(self.g_base):
            return self.g_free_op
        return np.full(len(self.g_base), -1, dtype=np.int32)

    @property
    def n_ops(self) -> int:
        return len(self.o_name)

    @property
    def n_storages(self) -> int:
        return int(self.s_nbytes.shape[0])


def _dict_array(values: list[str]) -> pa.Array:
    # Deterministic dictionary: categories in first-appearance order.
    arr = pa.array(values, type=pa.string()).dictionary_encode()
    return arr.cast(_DICT)


def _arrow_tables(t: Tables) -> dict[str, pa.Table]:
    n_sto, n_ops = t.n_storages, t.n_ops
    return {
        "storages": pa.Table.from_arrays(
            [
                pa.array(np.arange(n_sto, dtype=np.int32)),
                pa.array(t.s_nbytes.astype(np.int64)),
                pa.array(t.s_alloc_op.astype(np.int32)),
                pa.array(t.s_free_op.astype(np.int32)),
                _dict_array(t.s_kind),
                _dict_array(t.s_dtype),
                pa.array(t.s_shape, type=pa.string()),
                pa.array(t.s_addr.astype(np.int64)),
            ],
            schema=SCHEMAS["storages"],
        ),
        "ops": pa.Table.from_arrays(
            [
                pa.array(np.arange(n_ops, dtype=np.int32)),
                _dict_array(t.o_name),
                _dict_array(t.o_phase),
                _dict_array(t.o_dtype),
                pa.array(t.o_flops.astype(np.int64)),
                pa.array(t.o_bytes.astype(np.int64)),
                pa.array(t.o_live_bytes.astype(np.int64)),
                pa.array(t.o_fixed_ns.astype(np.int64)),
            ],
            schema=SCHEMAS["ops"],
        ),
        "accesses": pa.Table.from_arrays(
            [
                pa.array(t.a_op.astype(np.int32)),
                pa.array(t.a_sid.astype(np.int32)),
                pa.array(t.a_offset.astype(np.int64)),
                pa.array(t.a_nbytes.astype(np.int64)),
                pa.array(t.a_mode.astype(np.int8)),
            ],
            schema=SCHEMAS["accesses"],
        ),
        "segments": pa.Table.from_arrays(
            [
                pa.array(t.g_base.astype(np.int64)),
                pa.array(t.g_nbytes.astype(np.int64)),
                pa.array(t.g_alloc_op.astype(np.int32)),
                pa.array(t.segment_free_ops().astype(np.int32)),
            ],
            schema=SCHEMAS["segments"],
        ),
        "chunks": pa.Table.from_arrays(
            [
                pa.array(t.c_op.astype(np.int32)),
                pa.array(t.c_chunk.astype(np.int32)),
                pa.array(t.c_mode.astype(np.int8)),
            ],
            schema=SCHEMAS["chunks"],
        ),
    }


def write_tables(t: Tables, out: Path) -> Path:
    """Write ``t`` as the directory ``out`` (created; existing table files are replaced).

    Validates first, so nothing malformed is ever written.
    """
    validate(t, out)
    out.mkdir(parents=True, exist_ok=True)
    meta_json = json.dumps(t.meta, sort_keys=True, separators=(",", ":")).encode()
    for name, table in _arrow_tables(t).items():
        md: dict[bytes, bytes] = {VERSION_KEY: str(SCHEMA_VERSION).encode(), TABLE_KEY: name.encode()}
        if name == "ops":
            md[META_KEY] = meta_json
        table = table.replace_schema_metadata(md)
        tmp = out / f".{name}.parquet.tmp"
        pq.write_table(
            table,
            tmp,
            compression="zstd",
            compression_level=3,
            row_group_size=ROW_GROUP_ROWS,
            use_dictionary=True,
            write_statistics=True,
            version="2.6",
            data_page_version="1.0",
            store_schema=True,
        )
        tmp.replace(out / f"{name}.parquet")
    return out


def _read_table(path: Path, name: str) -> tuple[pa.Table, Mapping[bytes, bytes]]:
    f = path / f"{name}.parquet"
    if not f.is_file():
        raise TraceFormatError(f, name, "-", "file missing")
    try:
        pf = pq.ParquetFile(f)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for bad footers
        raise TraceFormatError(f, name, "footer", f"not a readable Parquet file (truncated?): {e}") from e
    md = pf.schema_arrow.metadata or {}
    if md.get(VERSION_KEY) != str(SCHEMA_VERSION).encode():
        raise TraceFormatError(
            f, name, "metadata", f"schema version {md.get(VERSION_KEY)!r}, expected {SCHEMA_VERSION}"
        )
    if md.get(TABLE_KEY) != name.encode():
        raise TraceFormatError(f, name, "metadata", f"table tag {md.get(TABLE_KEY)!r}")
    want = SCHEMAS[name]
    got = pf.schema_arrow.remove_metadata()
    if name in LEGACY_SCHEMAS and got.equals(LEGACY_SCHEMAS[name]):
        want = got
    if not got.equals(want):
        raise TraceFormatError(f, name, "schema", f"columns {got} do not match {want}")
    parts: list[pa.Table] = []
    row = 0
    for i in range(pf.num_row_groups):
        try:
            parts.append(pf.read_row_group(i))
        except Exception as e:  # noqa: BLE001
            raise TraceFormatError(f, name, row, f"unreadable row group {i}: {e}") from e
        row += pf.metadata.row_group(i).num_rows
    table = pa.concat_tables(parts) if parts else want.empty_table()
    return table, md


def _np(table: pa.Table, col: str, dtype: type[np.generic]) -> Any:
    return table.column(col).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _strs(table: pa.Table, col: str) -> list[str]:
    return [str(x) for x in table.column(col).to_pylist()]


def read_tables(path: Path) -> Tables:
    """Read and validate a trace directory. Raises TraceFormatError on any defect."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "-", "-", "no such file or directory")
    if not path.is_dir():
        raise TraceFormatError(path, "-", "-", "not a trace directory (a trace is a folder of Parquet tables)")
    raw: dict[str, pa.Table] = {}
    meta: dict[str, Any] = {}
    for name in TABLES:
        raw[name], md = _read_table(path, name)
        if name == "ops":
            try:
                meta = json.loads(md.get(META_KEY, b"{}"))
            except ValueError as e:
                raise TraceFormatError(path / "ops.parquet", "ops", "metadata", f"bad meta JSON: {e}") from e
    for name in ("storages", "ops"):
        ids = raw[name].column("sid" if name == "storages" else "op").to_numpy()
        bad = np.flatnonzero(ids != np.arange(len(ids)))
        if bad.size:
            raise TraceFormatError(path / f"{name}.parquet", name, int(bad[0]), "ids must be 0..n-1 in order")
    s, o, a, g, c = (raw[n] for n in TABLES)
    t = Tables(
        meta=meta,
        s_nbytes=_np(s, "nbytes", np.int64),
        s_alloc_op=_np(s, "alloc_op", np.int32),
        s_free_op=_np(s, "free_op", np.int32),
        s_kind=_strs(s, "kind"),
        s_dtype=_strs(s, "dtype"),
        s_shape=_strs(s, "shape"),
        s_addr=_np(s, "addr", np.int64),
        o_name=_strs(o, "name"),
        o_phase=_strs(o, "phase"),
        o_dtype=_strs(o, "dtype"),
        o_flops=_np(o, "flops", np.int64),
        o_bytes=_np(o, "bytes", np.int64),
        o_live_bytes=_np(o, "live_bytes", np.int64),
        o_fixed_ns=_np(o, "fixed_ns", np.int64),
        a_op=_np(a, "op", np.int32),
        a_sid=_np(a, "sid", np.int32),
        a_offset=_np(a, "offset", np.int64),
        a_nbytes=_np(a, "nbytes", np.int64),
        a_mode=_np(a, "mode", np.int8),
        g_base=_np(g, "base", np.int64),
        g_nbytes=_np(g, "nbytes", np.int64),
        g_alloc_op=_np(g, "alloc_op", np.int32),
        c_op=_np(c, "op", np.int32),
        c_chunk=_np(c, "chunk", np.int32),
        c_mode=_np(c, "mode", np.int8),
        g_free_op=(_np(g, "free_op", np.int32) if "free_op" in g.column_names
                   else np.full(g.num_rows, -1, dtype=np.int32)),
    )
    validate(t, path)
    return t


def _first(mask: npt.NDArray[np.bool_]) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def validate(t: Tables, path: Path | str) -> None:
    """Semantic checks across tables; the first violation raises TraceFormatError (file, table, row)."""
    p = Path(path)
    n_ops, n_sto = t.n_ops, t.n_storages

    def check(table: str, mask: npt.NDArray[np.bool_], msg: str) -> None:
        row = _first(mask)
        if row is not None:
            raise TraceFormatError(p / f"{table}.parquet", table, row, msg)

    lens = {
        "storages": [len(t.s_nbytes), len(t.s_alloc_op), len(t.s_free_op), len(t.s_kind), len(t.s_dtype),
                     len(t.s_shape), len(t.s_addr)],
        "ops": [len(t.o_name), len(t.o_phase), len(t.o_dtype), len(t.o_flops), len(t.o_bytes),
                len(t.o_live_bytes), len(t.o_fixed_ns)],
        "accesses": [len(t.a_op), len(t.a_sid), len(t.a_offset), len(t.a_nbytes), len(t.a_mode)],
        "segments": [len(t.g_base), len(t.g_nbytes), len(t.g_alloc_op)],
        "chunks": [len(t.c_op), len(t.c_chunk), len(t.c_mode)],
    }
    for table, ls in lens.items():
        if len(set(ls)) != 1:
            raise TraceFormatError(p / f"{table}.parquet", table, min(ls), "columns have different lengths")

    # storages
    check("storages", t.s_nbytes < 0, "negative nbytes")
    check("storages", (t.s_alloc_op < -1) | (t.s_alloc_op >= n_ops), "alloc_op out of range")
    check("storages", (t.s_free_op < -1) | (t.s_free_op >= n_ops), "free_op out of range")
    check("storages", (t.s_alloc_op >= 0) & (t.s_free_op >= 0) & (t.s_free_op < t.s_alloc_op),
          "freed before allocated")
    kinds = np.array([k not in KINDS for k in t.s_kind], dtype=bool)
    check("storages", kinds, f"kind must be one of {KINDS}")
    check("storages", t.s_addr < -1, "addr must be >= 0 (or -1 when not placed)")
    # ops
    check("ops", t.o_flops < 0, "negative flops")
    check("ops", t.o_bytes < 0, "negative bytes")
    check("ops", t.o_live_bytes < 0, "negative live_bytes")
    check("ops", t.o_fixed_ns < -1, "fixed_ns must be >= 0 or -1 (roofline)")
    check("ops", np.array([not x for x in t.o_phase], dtype=bool), "empty phase")
    # accesses
    check("accesses", (t.a_op < 0) | (t.a_op >= n_ops), "op out of range")
    if len(t.a_op) > 1:
        check("accesses", np.concatenate([[False], np.diff(t.a_op) < 0]), "rows must be sorted by op")
    sid_bad = (t.a_sid < 0) | (t.a_sid >= n_sto)
    check("accesses", sid_bad, "sid out of range")
    check("accesses", (t.a_offset < 0) | (t.a_nbytes < 0), "negative offset or nbytes")
    check("accesses", (t.a_mode < 0) | (t.a_mode > 2), "mode must be 0 (read), 1 (write-new) or 2 (rmw)")
    if len(t.a_sid):
        sid = t.a_sid.astype(np.int64)
        check("accesses", t.a_offset + t.a_nbytes > t.s_nbytes[sid], "range beyond the storage's nbytes")
        al, fr = t.s_alloc_op[sid], t.s_free_op[sid]
        check("accesses", (al >= 0) & (t.a_op < al), "storage accessed before it is allocated")
        check("accesses", (fr >= 0) & (t.a_op > fr), "storage accessed after it is freed")
    # segments
    check("segments", (t.g_base < 0) | (t.g_nbytes <= 0), "bad base or nbytes")
    check("segments", (t.g_base % CHUNK_BYTES) != 0, "segment base not 2 MiB aligned")
    check("segments", (t.g_alloc_op < -1) | (t.g_alloc_op >= n_ops), "alloc_op out of range")
    gfree = t.segment_free_ops()
    check("segments", (gfree < -1) | (gfree >= n_ops), "free_op out of range")
    check("segments", (gfree >= 0) & (t.g_alloc_op >= 0) & (gfree < t.g_alloc_op), "released before allocated")
    if len(t.g_base) > 1:
        ends = t.g_base[:-1] + t.g_nbytes[:-1]
        check("segments", np.concatenate([[False], t.g_base[1:] < ends]), "segments overlap or unsorted")
    # chunks
    check("chunks", (t.c_op < 0) | (t.c_op >= n_ops), "op out of range")
    if len(t.c_op) > 1:
        check("chunks", np.concatenate([[False], np.diff(t.c_op) < 0]), "rows must be sorted by op")
    check("chunks", t.c_chunk < 0, "negative chunk")
    check("chunks", (t.c_mode < 0) | (t.c_mode > 2), "mode must be 0, 1 or 2")
    if len(t.g_base):
        top = int((t.g_base[-1] + t.g_nbytes[-1] + CHUNK_BYTES - 1) >> CHUNK_SHIFT)
        check("chunks", t.c_chunk >= top, "chunk beyond the last segment")
