"""An experiment's results as one JSON document and back, lossless: every run's rows, the alone baselines,
the notes. It carries results across a boundary (the emulated node's guest writes it, the host reads it)."""

from __future__ import annotations

import json
from typing import Any

from huvm.errors import ConfigError

from .results import (
    CounterRow,
    ExperimentResult,
    RunEvents,
    RunKey,
    RunResult,
    SampleRow,
    TenantRow,
    TrafficRow,
)

FORMAT = "huvm-experiment-result/1"


def _key(k: RunKey) -> list[Any]:
    return [k.policy, k.sweep_value, k.repetition]


def _tenant(t: TenantRow) -> dict[str, Any]:
    return {"run": _key(t.run), "tenant": t.tenant, "gpu": t.gpu, "foreground": t.foreground,
            "runtime_ns": t.runtime_ns, "values": t.values, "role": t.role}


def to_dict(res: ExperimentResult) -> dict[str, Any]:
    runs = []
    for r in res.runs:
        runs.append({"key": _key(r.key), "sim_time_ns": r.sim_time_ns, "policy_settings": r.policy_settings,
                     "node": r.node, "tenants": [_tenant(t) for t in r.tenants],
                     "traffic": [[t.path, t.src, t.dst, t.bytes] for t in r.traffic],
                     "samples": [[s.t_ns, s.gpu, s.own_bytes, s.guest_bytes, s.free_bytes, s.peer_bytes, s.host_bytes]
                                 for s in r.samples],
                     "counters": [[c.scope, c.gpu, c.peer, c.metric, c.value] for c in r.counters],
                     "events": None if r.events is None else _events(r.events)})
    return {"format": FORMAT, "name": res.name, "description": res.description, "node": res.node,
            "sweep_key": res.sweep_key, "notes": list(res.notes), "runs": runs,
            "alone": [{"key": list(k), "row": _tenant(t)} for k, t in res.alone.items()]}


def _events(e: RunEvents) -> dict[str, Any]:
    cols = list(e.rows[0]) if e.rows else []
    return {"columns": cols, "rows": [[row[c] for c in cols] for row in e.rows], "lost": e.lost,
            "counts": e.counts, "source": e.source, "window_ns": None if e.window_ns is None else list(e.window_ns)}


def _run_events(d: Any) -> RunEvents | None:
    if d is None:
        return None
    cols = [str(c) for c in d["columns"]]
    win = d["window_ns"]
    return RunEvents([dict(zip(cols, row, strict=True)) for row in d["rows"]], int(d["lost"]),
                     {str(k): int(v) for k, v in d["counts"].items()}, str(d["source"]),
                     None if win is None else (int(win[0]), int(win[1])))


def dumps(res: ExperimentResult) -> str:
    return json.dumps(to_dict(res), sort_keys=True)


def _run_key(v: Any) -> RunKey:
    return RunKey(str(v[0]), v[1], int(v[2]))


def _tenant_row(d: dict[str, Any]) -> TenantRow:
    return TenantRow(_run_key(d["run"]), d["tenant"], int(d["gpu"]), bool(d["foreground"]), int(d["runtime_ns"]),
                     {str(k): int(v) for k, v in d["values"].items()}, d["role"])


def from_dict(d: Any) -> ExperimentResult:
    """The result of :func:`to_dict`; ConfigError for anything else."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ConfigError(f"not an experiment result (expected format {FORMAT!r})")
    try:
        res = ExperimentResult(d["name"], d["description"], d["node"], d["sweep_key"], notes=list(d["notes"]))
        for r in d["runs"]:
            key = _run_key(r["key"])
            run = RunResult(key, int(r["sim_time_ns"]), policy_settings=dict(r["policy_settings"]),
                            node=dict(r["node"]))
            run.tenants = [_tenant_row(t) for t in r["tenants"]]
            run.traffic = [TrafficRow(key, p, s, t, int(b)) for p, s, t, b in r["traffic"]]
            run.samples = [SampleRow(key, *map(int, s)) for s in r["samples"]]
            run.counters = [CounterRow(key, sc, int(g), int(p), m, int(v)) for sc, g, p, m, v in r["counters"]]
            run.events = _run_events(r.get("events"))
            res.runs.append(run)
        for a in d["alone"]:
            res.alone[tuple(a["key"])] = _tenant_row(a["row"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not an experiment result: {type(exc).__name__}: {exc}") from None
    return res


def loads(text: str) -> ExperimentResult:
    try:
        d = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"an experiment result is not JSON: {exc}") from None
    return from_dict(d)


__all__ = ["FORMAT", "dumps", "from_dict", "loads", "to_dict"]
