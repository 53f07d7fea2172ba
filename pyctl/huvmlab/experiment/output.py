"""Write an experiment's data: Parquet (zstd) and CSV per table, deterministic (no timestamps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .results import ExperimentResult, RunKey
from .summary import policy_rows


def _key_cols(k: RunKey) -> dict[str, Any]:
    return {"run_id": k.run_id, "policy": k.policy,
            "sweep_value": None if k.sweep_value is None else str(k.sweep_value), "repetition": k.repetition}


def _node_cols(node: dict[str, Any]) -> dict[str, Any]:
    """A run's node record as columns: node_kind, module, node_preset, scale, node_gpus, granularity."""
    return {"node_kind": node.get("kind", "sim"), "module": node.get("module", ""),
            "node_preset": node.get("preset", ""), "scale": float(node.get("scale", 1.0)),
            "node_gpus": int(node.get("gpus", 0)), "granularity": float(node.get("granularity", 1.0))}


def tables(res: ExperimentResult) -> dict[str, pa.Table]:
    """results (one row per policy and sweep value), runs (one per run: its node), tenants, counters, traffic,
    samples."""
    out: dict[str, list[dict[str, Any]]] = {"results": [], "runs": [], "tenants": [], "counters": [],
                                            "traffic": [], "samples": []}
    for row in policy_rows(res):
        d = row.to_dict()
        d["sweep_value"] = None if d["sweep_value"] is None else str(d["sweep_value"])
        out["results"].append(d)
    for r in res.runs:
        out["runs"].append({**_key_cols(r.key), "time_ns": r.sim_time_ns, **_node_cols(r.node)})
        for t in r.tenants:
            out["tenants"].append({**_key_cols(r.key), "tenant": t.tenant, "gpu": t.gpu, "foreground": t.foreground,
                                   "role": t.role, "runtime_ns": t.runtime_ns, **t.values})
        for c in r.counters:
            out["counters"].append({**_key_cols(r.key), "scope": c.scope, "gpu": c.gpu, "peer": c.peer,
                                    "metric": c.metric, "value": c.value})
        for tr in r.traffic:
            out["traffic"].append({**_key_cols(r.key), "path": tr.path, "src": tr.src, "dst": tr.dst,
                                   "bytes": tr.bytes})
        for s in r.samples:
            out["samples"].append({**_key_cols(r.key), "t_ns": s.t_ns, "gpu": s.gpu, "own_bytes": s.own_bytes,
                                   "guest_bytes": s.guest_bytes, "free_bytes": s.free_bytes,
                                   "peer_bytes": s.peer_bytes, "host_bytes": s.host_bytes})
    for key, t in res.alone.items():  # the baselines: run_id "alone", the tenant alone on the node under stock
        if len(key) == 2:
            out["tenants"].append({**_key_cols(t.run), "tenant": t.tenant, "gpu": t.gpu,
                                   "foreground": t.foreground, "role": t.role, "runtime_ns": t.runtime_ns,
                                   **t.values})
    return {name: pa.Table.from_pylist(rows) if rows else pa.table({}) for name, rows in out.items()}


def write(res: ExperimentResult, outdir: Path) -> list[Path]:
    """Write every table as NAME.parquet and NAME.csv, plus summary.json; returns the paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    data = outdir / "data"
    data.mkdir(exist_ok=True)
    written: list[Path] = []
    for name, table in tables(res).items():
        if table.num_columns == 0:
            continue
        pq_path, csv_path = data / f"{name}.parquet", data / f"{name}.csv"
        pq.write_table(table, pq_path, compression="zstd", write_statistics=False)
        pacsv.write_csv(table, csv_path)
        written += [pq_path, csv_path]
    from .recording import write as write_events

    written += write_events(res, data)
    summary = outdir / "summary.json"
    summary.write_text(json.dumps(summary_dict(res), indent=2, sort_keys=True) + "\n")
    written.append(summary)
    return written


def summary_dict(res: ExperimentResult) -> dict[str, Any]:
    first = res.runs[0].node if res.runs else {}
    return {"experiment": res.name, "node": res.node, "sweep_key": res.sweep_key,
            "node_record": _node_cols(first) if first else None,
            "results": [r.to_dict() for r in policy_rows(res)], "tenants": tenant_dicts(res),
            "notes": list(res.notes)}


def tenant_dicts(res: ExperimentResult) -> list[dict[str, Any]]:
    """Every tenant of every run (repetition 0): role, runtime, throughput, stalls, and its slowdown against
    running alone (``slowdown_vs_alone``; None without a baseline, e.g. idle tenants)."""
    out: list[dict[str, Any]] = []
    for r in res.runs:
        if r.key.repetition:
            continue
        for t in r.tenants:
            alone = res.alone_row(t.tenant, r.key.sweep_value, r.key.run_id)
            out.append({"policy": r.key.policy, "sweep_value": None if r.key.sweep_value is None else
                        str(r.key.sweep_value), "tenant": t.tenant, "gpu": t.gpu, "role": t.role,
                        "foreground": t.foreground, "runtime_ns": t.runtime_ns, "ops_per_s": t.ops_per_s,
                        "stall_ns": t.stall_ns, "alloc_stall_ns": t.values.get("alloc_stall_ns", 0),
                        "slowdown_vs_alone": None if alone is None or r.key.policy == "ideal" else
                        t.slowdown_vs(alone)})
    return out


def read(outdir: Path, name: str) -> pa.Table:
    return pq.read_table(outdir / "data" / f"{name}.parquet")
