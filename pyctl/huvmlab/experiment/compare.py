"""Two runs of an experiment side by side (e.g. the simulated node against the emulated one): per policy
and sweep value, the module's counters and the bytes per link, with each counter's relative error.

    from huvmlab.experiment.compare import compare
    c = compare("out/consolidation-sim", "out/consolidation-emulated")
    for row in c.rows:
        print(row.policy, row.counter, row.a, row.b, row.rel_error)

A is the reference: ``rel_error = (B - A) / A`` (0.0 when both are 0; None when only A is 0). Counts come
from each folder's ``data/counters`` (summed over GPUs, averaged over repetitions) and ``data/traffic``.
When the two runs' scale factors differ (an emulated node scales trace bytes and working sets down,
``data/runs``' ``scale``), every count is divided by its run's factor so both are at full size; ``raw``
compares them as recorded.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import pyarrow.parquet as pq
from huvm.errors import ConfigError

#: (name in the comparison, counter metric summed over GPUs): what the cross-check compares
COUNTERS: tuple[tuple[str, str], ...] = (
    ("evict_to_peer", "evict_to_peer"),
    ("evict_to_host", "evict_to_host"),
    ("preevict_to_peer", "preevict_to_peer"),
    ("preevict_to_host", "preevict_to_host"),
    ("fetch_from_peer", "fetch_from_peer"),  # fetch-backs of harvested chunks
    ("fetch_from_host", "fetch_from_host"),
    ("giveback", "giveback"),
    ("faults", "faults"),
)
#: traffic paths: NVLink/peer (gpu_to_gpu, remote_read) and PCIe/host (host_to_gpu, gpu_to_host)
PEER_PATHS = ("gpu_to_gpu", "remote_read")
HOST_PATHS = ("host_to_gpu", "gpu_to_host")


@dataclass(frozen=True)
class RunInfo:
    """One side: its folder, experiment, node and scale."""

    path: str
    experiment: str
    node: str
    node_kind: str
    module: str
    scale: float


@dataclass(frozen=True)
class CompareRow:
    sweep_value: str | None
    policy: str
    counter: str  # a COUNTERS name, peer_bytes, host_bytes, or bytes PATH SRC->DST
    a: float
    b: float
    rel_error: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Comparison:
    a: RunInfo
    b: RunInfo
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    normalized: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"a": dict(self.a.__dict__), "b": dict(self.b.__dict__), "normalized": self.normalized,
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}


def rel_error(a: float, b: float) -> float | None:
    """(b - a) / a; 0.0 when both are 0, None when only a is."""
    if a == 0:
        return 0.0 if b == 0 else None
    return (b - a) / a


def _read(folder: Path, name: str, required: bool = True) -> list[dict[str, Any]]:
    path = folder / "data" / f"{name}.parquet"
    if not path.is_file() and not required:
        return []  # a table with no rows is not written
    if not path.is_file():
        raise ConfigError(f"{folder}: no data/{name}.parquet: not an experiment output folder "
                          "(huvmctl experiment run FILE --out DIR writes one)")
    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable as Parquet: {exc}") from None
    return rows


def _granularity(folder: Path) -> float:
    """Trace chunks per 2 MiB unit the side's node moved and counted (``data/runs``' ``granularity``: k on the
    emulated node at scale 1/k and on its simulated twin). A folder written before the column existed: an
    emulated node's from its scale, else 1."""
    from .executor import CHUNK_BYTES, scale_bytes

    runs = _read(folder, "runs", required=False)
    if not runs:
        return 1.0
    if runs[0].get("granularity") is not None:
        return float(runs[0]["granularity"])
    scale = float(runs[0].get("scale") or 1.0)
    return CHUNK_BYTES / scale_bytes(CHUNK_BYTES, scale) if runs[0].get("node_kind") == "emulated" else 1.0


def _info(folder: Path) -> tuple[RunInfo, dict[str, float]]:
    """The side's description and each run's scale (run_id -> scale)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: no readable summary.json ({exc}): not an experiment output folder") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"{folder}/summary.json: not an experiment summary")
    scales: dict[str, float] = {}
    kind, module, scale = "sim", "", 1.0
    if (folder / "data" / "runs.parquet").is_file():
        runs = _read(folder, "runs")
        scales = {r["run_id"]: float(r.get("scale") or 1.0) for r in runs}
        if runs:
            kind, module, scale = str(runs[0].get("node_kind")), str(runs[0].get("module") or ""), \
                float(runs[0].get("scale") or 1.0)
    return RunInfo(str(folder), str(summary.get("experiment", "")), str(summary.get("node", "")), kind, module,
                   scale), scales


def _side(folder: Path, raw: bool, scales: dict[str, float]) -> dict[tuple[str | None, str], dict[str, float]]:
    """(sweep value, policy) -> counter name -> value (mean over repetitions)."""
    per_run: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    where: dict[str, tuple[str | None, str]] = {}
    metric_names = {m: n for n, m in COUNTERS}
    for r in _read(folder, "counters"):
        where[r["run_id"]] = (r["sweep_value"], r["policy"])
        if r["scope"] == "gpu" and r["metric"] in metric_names:
            per_run[r["run_id"]][metric_names[r["metric"]]] += r["value"]
    for r in _read(folder, "traffic", required=False):
        where[r["run_id"]] = (r["sweep_value"], r["policy"])
        d = per_run[r["run_id"]]
        if r["path"] in PEER_PATHS:
            d["peer_bytes"] += r["bytes"]
        elif r["path"] in HOST_PATHS:
            d["host_bytes"] += r["bytes"]
        d[f"bytes {r['path']} {r['src']}->{r['dst']}"] += r["bytes"]
    grouped: dict[tuple[str | None, str], list[dict[str, float]]] = defaultdict(list)
    for run_id, values in per_run.items():
        factor = 1.0 if raw else scales.get(run_id, 1.0) or 1.0
        grouped[where[run_id]].append({k: v / factor for k, v in values.items()})
    out: dict[tuple[str | None, str], dict[str, float]] = {}
    for key, runs in grouped.items():
        names = {k for r in runs for k in r}
        out[key] = {k: mean(r.get(k, 0.0) for r in runs) for k in names}
    return out


def _order(name: str) -> tuple[int, str]:
    fixed = [n for n, _ in COUNTERS] + ["peer_bytes", "host_bytes"]
    return (fixed.index(name), "") if name in fixed else (len(fixed), name)


def compare(run_a: str | Path, run_b: str | Path, *, raw: bool = False, links: bool = True) -> Comparison:
    """Runs A and B (two output folders of ``huvmctl experiment run``) side by side; see the module's doc.
    links: add a row per link direction (``bytes PATH SRC->DST``) after the totals."""
    a_dir, b_dir = Path(run_a), Path(run_b)
    a_info, a_scales = _info(a_dir)
    b_info, b_scales = _info(b_dir)
    normalized = not raw and (set(a_scales.values()) | {a_info.scale}) != (set(b_scales.values()) | {b_info.scale})
    a = _side(a_dir, not normalized, a_scales)
    b = _side(b_dir, not normalized, b_scales)
    res = Comparison(a_info, b_info, normalized=normalized)
    if a_info.experiment != b_info.experiment:
        res.notes.append(f"different experiment names: {a_info.experiment!r} (A) and {b_info.experiment!r} (B)")
    if normalized:
        res.notes.append(f"counts divided by each run's scale factor (A {a_info.scale:g}, B {b_info.scale:g}): "
                         "both at full size")
    res.notes += _granularity_notes(_granularity(a_dir), _granularity(b_dir))
    for key in a:
        if key not in b:
            res.notes.append(f"only in A: policy {key[1]!r}" + ("" if key[0] is None else f" at {key[0]}"))
    for key in b:
        if key not in a:
            res.notes.append(f"only in B: policy {key[1]!r}" + ("" if key[0] is None else f" at {key[0]}"))
    for key, av in a.items():
        bv = b.get(key)
        if bv is None:
            continue
        names = sorted({*av, *bv, *(n for n, _ in COUNTERS), "peer_bytes", "host_bytes"}, key=_order)
        for name in names:
            if name.startswith("bytes ") and not links:
                continue
            x, y = av.get(name, 0.0), bv.get(name, 0.0)
            if name.startswith("bytes ") and x == 0 and y == 0:
                continue
            res.rows.append(CompareRow(key[0], key[1], name, x, y, rel_error(x, y)))
    if not res.rows:
        raise ConfigError(f"{a_dir} and {b_dir} have no policy in common: nothing to compare")
    return res


def _granularity_notes(ga: float, gb: float) -> list[str]:
    """What the two sides' granularities (trace chunks per 2 MiB block moved) mean for the comparison."""
    if abs(ga - gb) < 1e-9:
        return [] if ga == 1.0 else [f"A and B at the same granularity: {ga:g} trace chunks per 2 MiB block (an "
                                     "emulated node at scale 1/k and its simulated twin move whole blocks)"]
    return [f"different granularities: {ga:g} (A) and {gb:g} (B) trace chunks per 2 MiB block moved; the coarser "
            "side moves data in larger units, which can add evictions and fetch-backs of data with less locality: "
            "compare an emulated run with its simulated twin (huvmctl experiment run FILE --node sim-twin)"]


def format_rel(x: float | None) -> str:
    return "n/a" if x is None else f"{round(x * 100, 1) + 0.0:+.1f} %"


def format_count(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 or abs(x) >= 100 else f"{x:.2f}"


def markdown(c: Comparison) -> str:
    """The comparison as a Markdown table (for docs/simulator.md's cross-check): one row per policy and
    counter, A and B and the relative error, the two sides and the notes under it."""
    def side(name: str, s: RunInfo) -> str:
        scale = "" if s.scale == 1.0 else f", scale {s.scale:g}"
        return f"{name}: `{s.experiment}` on the {s.node_kind} node `{s.node}`{scale} ({s.module or 'module ?'})"

    sweep = any(r.sweep_value is not None for r in c.rows)
    head = (["sweep"] if sweep else []) + ["policy", "counter", "A", "B", "B vs A"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in c.rows:
        cells = ([str(r.sweep_value)] if sweep else []) + [r.policy, r.counter, format_count(r.a), format_count(r.b),
                                                            format_rel(r.rel_error)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"- {side('A', c.a)}", f"- {side('B', c.b)}"] + [f"- {n}" for n in c.notes]
    return "\n".join(lines) + "\n"
