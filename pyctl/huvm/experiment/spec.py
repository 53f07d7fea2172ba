"""Experiment files (TOML): what to run, parsed and checked with file, line and key in every error.

::

    [experiment]
    name = "consolidation-case1"
    description = "PageRank harvests from three busy co-runners (HUVM ATC'22 Fig 6, case 1)"
    policies = ["stock", "huvm-atc22", "huvm"]   # presets or [policy.NAME] tables, in table order
    ideal = true                                   # add the unlimited-memory run (ratios are to it)
    repetitions = 1

    [node]
    preset = "p3.8xlarge"                          # simulated node preset (see `huvmctl sim presets`)

    [[tenant]]
    name = "pagerank"
    gpu = 0
    trace = "bundled:pagerank-small"               # bundled:NAME or a path (relative to this file)
    steps = 1                                      # repetitions of the trace; 0 = background
    static = "0"                                   # bytes cudaMalloc'd and held (idle footprint)
    start_ms = 0
    managed = true                                 # UVM managed (evictable); false: cudaMalloc
    role = "harvester"                             # optional, its GPU's policy (not under stock/ideal):
    lend_reserve = "1GiB"                          #   role, lend_limit, lend_reserve

    [policy.tuned]                                 # a policy file's keys, in a table
    preset = "huvm"
    prefetch_chunks = 32

    [sweep]                                        # optional: one parameter, several values
    key = "prefetch_chunks"                        # a policy key, or tenant.NAME.static / tenant.NAME.steps
    values = [0, 1, 2, 4, 8, 16]
    policies = ["huvm-atc22"]                      # which policies the sweep applies to (default: all)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..policy import GPU_KEYS, KEYS, NODE_KEYS, preset_names
from ..tomlpos import TomlDoc
from ..units import format_size, parse_size

BASELINE_ORDER = ("stock", "huvm-atc22", "huvm")
#: the simulator's limits (driver/sim/huvm_sim_internal.h): SIM_MAX_STEPS; times and sizes below 2^48
MAX_STEPS = 1_000_000
MAX_START_MS = (1 << 48) // 1_000_000
MAX_STATIC_BYTES = 1 << 48
TENANT_SWEEP_KEYS = ("static", "steps")


@dataclass(frozen=True)
class TenantSpec:
    name: str
    gpu: int
    trace: str  # "bundled:NAME" or an absolute path
    steps: int = 1
    static_bytes: int = 0
    start_ns: int = 0
    line: int | None = None
    managed: bool = True
    gpu_settings: tuple[tuple[str, Any], ...] = ()  # (role|lend_limit|lend_reserve, value) for its GPU
    index: int = 0  # position among the [[tenant]] tables

    def key_line(self, doc: TomlDoc, key: str) -> int | None:
        return doc.line("tenant", str(self.index), key)


@dataclass(frozen=True)
class PolicySpec:
    """A named policy: a preset, or a [policy.NAME] table (validated against the node when it runs)."""

    name: str
    preset: str | None
    table: tuple[str, ...] = ()  # path of its table in the document, () for a plain preset


@dataclass(frozen=True)
class SweepSpec:
    """values: the labels of the sweep points; settings[i]: the settings of point i (``{key: value}``, or
    an inline table of several policy keys, e.g. ``{prefetch_mode = "off", prefetch_chunks = 0}``)."""

    key: str
    values: tuple[Any, ...]
    policies: tuple[str, ...]
    settings: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ExperimentSpec:
    path: str
    name: str
    description: str
    node_preset: str
    node_options: dict[str, Any]
    tenants: tuple[TenantSpec, ...]
    policies: tuple[PolicySpec, ...]
    ideal: bool
    repetitions: int
    sweep: SweepSpec | None
    doc: TomlDoc = field(repr=False, compare=False)

    @property
    def real_node(self) -> bool:
        return self.node_preset == "real"


def _get(doc: TomlDoc, table: dict[str, Any], key: str, kind: type | tuple[type, ...], path: tuple[str, ...],
         default: Any = None, required: bool = False) -> Any:
    if key not in table:
        if required:
            raise doc.error(f"missing required key {key!r}", *path)
        return default
    v = table[key]
    if isinstance(v, bool) and kind is not bool and (not isinstance(kind, tuple) or bool not in kind):
        raise doc.error(f"expected {_kind_name(kind)}, got {v!r}", *path, key)
    if not isinstance(v, kind):
        raise doc.error(f"expected {_kind_name(kind)}, got {v!r}", *path, key)
    return v


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", bool: "true/false", list: "a list", dict: "a table",
             float: "a number"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _check_keys(doc: TomlDoc, table: dict[str, Any], allowed: tuple[str, ...], path: tuple[str, ...]) -> None:
    for k in table:
        if k not in allowed:
            raise doc.error(f"unknown key (known: {', '.join(allowed)})", *path, k)


def _size(doc: TomlDoc, v: Any, path: tuple[str, ...]) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise doc.error(f"expected a size, got {v!r}", *path)
    try:
        n = parse_size(v) if isinstance(v, str) else int(v)
    except ValueError as exc:
        raise doc.error(str(exc), *path) from None
    if not 0 <= n <= MAX_STATIC_BYTES:
        raise doc.error(f"must be 0..{format_size(MAX_STATIC_BYTES)}, got {n}", *path)
    return n


def _trace_ref(doc: TomlDoc, ref: str) -> str:
    if ref.startswith("bundled:"):
        return ref
    p = Path(ref)
    if not p.is_absolute():
        p = Path(doc.path).resolve().parent / p
    return str(p)


def load(path: str | Path) -> ExperimentSpec:
    doc = TomlDoc(path)
    return parse(doc)


def parse(doc: TomlDoc) -> ExperimentSpec:
    d = doc.data
    _check_keys(doc, d, ("experiment", "node", "tenant", "policy", "sweep"), ())
    exp = _get(doc, d, "experiment", dict, (), {})
    _check_keys(doc, exp, ("name", "description", "policies", "ideal", "repetitions"), ("experiment",))
    name = _get(doc, exp, "name", str, ("experiment",), Path(doc.path).stem)
    description = _get(doc, exp, "description", str, ("experiment",), "")
    repetitions = _get(doc, exp, "repetitions", int, ("experiment",), 1)
    if not 1 <= repetitions <= 100:
        raise doc.error(f"must be 1..100, got {repetitions}", "experiment", "repetitions")
    ideal = _get(doc, exp, "ideal", bool, ("experiment",), True)

    node = _get(doc, d, "node", dict, (), {})
    node_preset = _get(doc, node, "preset", str, ("node",), required=True)
    node_options = {k: v for k, v in node.items() if k != "preset"}

    # tenants
    raw_tenants = _get(doc, d, "tenant", list, (), required=True)
    tenants: list[TenantSpec] = []
    seen_names: set[str] = set()
    for i, t in enumerate(raw_tenants):
        path = ("tenant", str(i))
        if not isinstance(t, dict):
            raise doc.error("expected [[tenant]] tables", "tenant")
        _check_keys(doc, t, ("name", "gpu", "trace", "steps", "static", "start_ms", "managed", *GPU_KEYS), path)
        tname = _get(doc, t, "name", str, path, f"tenant{i}")
        if tname in seen_names:
            raise _tenant_error(doc, i, "name", f"duplicate tenant name {tname!r}")
        seen_names.add(tname)
        gpu = _get(doc, t, "gpu", int, path, required=True)
        if gpu < 0:
            raise _tenant_error(doc, i, "gpu", f"must be >= 0, got {gpu}")
        steps = _get(doc, t, "steps", int, path, 1)
        if not 0 <= steps <= MAX_STEPS:
            raise _tenant_error(doc, i, "steps", f"must be 0..{MAX_STEPS}, got {steps}")
        static = _size(doc, t.get("static", 0), path + ("static",))
        start_ms = _get(doc, t, "start_ms", (int, float), path, 0)
        if not 0 <= start_ms <= MAX_START_MS:  # also refuses nan
            raise _tenant_error(doc, i, "start_ms", f"must be 0..{MAX_START_MS} (ms), got {start_ms}")
        trace = _get(doc, t, "trace", str, path, "")
        if not trace and static == 0:
            raise _tenant_error(doc, i, "trace", "a tenant needs a trace or a static footprint")
        managed = _get(doc, t, "managed", bool, path, True)
        gpu_settings = tuple((k, t[k]) for k in GPU_KEYS if k in t)
        tenants.append(TenantSpec(tname, gpu, _trace_ref(doc, trace) if trace else "", steps, static,
                                  int(start_ms * 1_000_000), doc.line(*path), managed, gpu_settings, i))
    if not any(t.steps > 0 and t.trace for t in tenants):
        raise doc.error("at least one tenant must run a trace in the foreground (steps >= 1)", "tenant")

    # policies
    tables = _get(doc, d, "policy", dict, (), {})
    names = _get(doc, exp, "policies", list, ("experiment",), list(BASELINE_ORDER))
    presets = preset_names()
    policies: list[PolicySpec] = []
    for n in names:
        if not isinstance(n, str):
            raise doc.error(f"expected policy names, got {n!r}", "experiment", "policies")
        if n in tables:
            t = tables[n]
            if not isinstance(t, dict):
                raise doc.error("expected a table", "policy", n)
            _check_keys(doc, t, ("preset", "gpu", *NODE_KEYS), ("policy", n))
            preset = t.get("preset")
            if preset is not None and preset not in presets:
                raise doc.error(f"unknown preset {preset!r} (known: {', '.join(presets)})", "policy", n, "preset")
            policies.append(PolicySpec(n, preset, ("policy", n)))
        elif n in presets:
            policies.append(PolicySpec(n, n))
        else:
            raise doc.error(f"unknown policy {n!r}: not a preset ({', '.join(presets)}) nor a [policy.{n}] table",
                            "experiment", "policies")
    if len({p.name for p in policies}) != len(policies) or not policies:
        raise doc.error("policies must be a non-empty list of distinct names", "experiment", "policies")
    for n in tables:
        if n not in names:
            raise doc.error(f"[policy.{n}] is not listed in experiment.policies", "policy", n)

    # sweep
    sweep: SweepSpec | None = None
    if "sweep" in d:
        s = _get(doc, d, "sweep", dict, ())
        _check_keys(doc, s, ("key", "values", "policies"), ("sweep",))
        key = _get(doc, s, "key", str, ("sweep",), required=True)
        values = _get(doc, s, "values", list, ("sweep",), required=True)
        if not values:
            raise doc.error("needs at least one value", "sweep", "values")
        parts = key.split(".")
        if parts[0] == "tenant":
            if len(parts) != 3 or parts[1] not in seen_names or parts[2] not in TENANT_SWEEP_KEYS:
                raise doc.error(f"expected tenant.NAME.{{{','.join(TENANT_SWEEP_KEYS)}}} with a tenant's NAME",
                                "sweep", "key")
            for v in values:
                if parts[2] == "static":
                    _size(doc, v, ("sweep", "values"))
                elif isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_STEPS:
                    raise doc.error(f"expected integers 0..{MAX_STEPS}, got {v!r}", "sweep", "values")
        elif key not in NODE_KEYS and not (len(parts) == 3 and parts[0] == "gpu" and parts[2] in GPU_KEYS):
            raise doc.error(f"unknown sweep key (policy keys: {', '.join(KEYS)}; or tenant.NAME.static|steps)",
                            "sweep", "key")
        labels: list[Any] = []
        point_settings: list[dict[str, Any]] = []
        for v in values:
            if isinstance(v, dict):
                if parts[0] == "tenant" or not v:
                    raise doc.error("inline tables of settings are for policy keys only", "sweep", "values")
                for k in v:
                    if k.split(".")[-1] not in KEYS:
                        raise doc.error(f"unknown policy key {k!r} in a sweep point", "sweep", "values")
                labels.append(v.get(key, ",".join(f"{k}={x}" for k, x in v.items())))
                point_settings.append(dict(v))
            else:
                labels.append(v)
                point_settings.append({key: v})
        if len(set(map(str, labels))) != len(labels):
            raise doc.error("sweep points must have distinct values", "sweep", "values")
        swept = _get(doc, s, "policies", list, ("sweep",), [p.name for p in policies])
        for n in swept:
            if n not in [p.name for p in policies]:
                raise doc.error(f"{n!r} is not one of experiment.policies", "sweep", "policies")
        sweep = SweepSpec(key, tuple(labels), tuple(swept), tuple(point_settings))
    return ExperimentSpec(doc.path, name, description, node_preset, node_options, tuple(tenants),
                          tuple(policies), ideal, repetitions, sweep, doc)


def _tenant_error(doc: TomlDoc, index: int, key: str, message: str) -> ConfigError:
    """An error about key of the index-th [[tenant]] (its line; the key named tenant.KEY)."""
    return ConfigError(message, file=doc.path, line=doc.line("tenant", str(index), key), key=f"tenant[{index}].{key}")
