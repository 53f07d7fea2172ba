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
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, create_model

from .. import abi
from ..policy import GPU_KEYS, KEYS, NODE_KEYS, preset_names, value_type
from ..policyfile import PolicyTable
from ..schema import FileModel, size_value, validate, validate_value
from ..sim.schema import NodeTable
from ..tomlpos import TomlDoc

BASELINE_ORDER = ("stock", "huvm-atc22", "huvm")
#: the simulator's limits (driver/sim/huvm_sim_cdef.h): repetitions of a trace; times and sizes
MAX_STEPS: int = abi.lib.HUVM_SIM_MAX_STEPS
MAX_START_MS: int = abi.lib.HUVM_SIM_MAX_OP_NS // 1_000_000
MAX_STATIC_BYTES: int = abi.lib.HUVM_SIM_MAX_OP_NS
#: an experiment's own bound: the simulator is deterministic, so repetitions only check that it is
MAX_REPETITIONS = 100
TENANT_SWEEP_KEYS = ("static", "steps")

Steps = Annotated[int, Field(ge=0, le=MAX_STEPS)]
StaticBytes = Annotated[int, BeforeValidator(size_value), Field(ge=0, le=MAX_STATIC_BYTES)]


# ---- the schema ----------------------------------------------------------------------------------------

class ExperimentFile(FileModel):
    """The top level: which tables there are (each is checked by its own model below)."""

    experiment: dict[str, Any] = {}
    node: dict[str, Any]
    tenant: Annotated[list[dict[str, Any]], Field(min_length=1)]
    policy: dict[str, dict[str, Any]] = {}
    sweep: dict[str, Any] | None = None


class ExperimentTable(FileModel):
    """``[experiment]``."""

    name: str | None = None
    description: str = ""
    policies: Annotated[list[str], Field(min_length=1)] = list(BASELINE_ORDER)
    ideal: bool = True
    repetitions: Annotated[int, Field(ge=1, le=MAX_REPETITIONS)] = 1


class ExperimentNode(NodeTable):
    """``[node]``: a simulated node's table (``preset`` required; ``real`` for a real node)."""

    preset: str


class _Tenant(FileModel):
    name: str | None = None
    gpu: Annotated[int, Field(ge=0, le=abi.MAX_GPUS - 1)]
    trace: str = ""
    steps: Steps = 1
    static: StaticBytes = 0
    start_ms: Annotated[float, Field(ge=0, le=MAX_START_MS, allow_inf_nan=False)] = 0.0
    managed: bool = True


#: one ``[[tenant]]``: its own keys, plus its GPU's policy keys (role, lend_limit, lend_reserve)
TenantTable: type[_Tenant] = create_model(  # type: ignore[call-overload]
    "TenantTable", __base__=_Tenant, **{k: (value_type(KEYS[k]) | None, None) for k in GPU_KEYS})


class SweepTable(FileModel):
    """``[sweep]``: one parameter, several values (checked against the key by :func:`_sweep`)."""

    key: str
    values: Annotated[list[Any], Field(min_length=1)]
    policies: list[str] | None = None


# ---- the parsed experiment -----------------------------------------------------------------------------

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
    """The experiment of doc: every table checked against its schema, then the references between them
    (tenant names, policy names, the sweep's key); the first refusal as doc's error (file, line, key)."""
    top = validate(doc, ExperimentFile, doc.data)
    exp = validate(doc, ExperimentTable, top.experiment, "experiment")
    node = validate(doc, ExperimentNode, top.node, "node")
    tenants = _tenants(doc, top.tenant)
    policies = _policies(doc, exp, top.policy)
    sweep = _sweep(doc, top.sweep, tenants, policies) if top.sweep is not None else None
    return ExperimentSpec(doc.path, exp.name if exp.name is not None else Path(doc.path).stem, exp.description,
                          node.preset, {k: v for k, v in top.node.items() if k != "preset"}, tenants, policies,
                          exp.ideal, exp.repetitions, sweep, doc)


def _tenants(doc: TomlDoc, tables: list[dict[str, Any]]) -> tuple[TenantSpec, ...]:
    out: list[TenantSpec] = []
    for i, raw in enumerate(tables):
        path = ("tenant", str(i))
        t = validate(doc, TenantTable, raw, *path)
        name = t.name if t.name is not None else f"tenant{i}"
        if name in {x.name for x in out}:
            raise doc.error(f"duplicate tenant name {name!r}", *path, "name")
        if not t.trace and t.static == 0:
            raise doc.error("a tenant needs a trace or a static footprint", *path, "trace")
        out.append(TenantSpec(name, t.gpu, _trace_ref(doc, t.trace) if t.trace else "", t.steps, t.static,
                              int(t.start_ms * 1_000_000), doc.line(*path), t.managed,
                              tuple((k, raw[k]) for k in GPU_KEYS if k in raw), i))
    if not any(t.steps > 0 and t.trace for t in out):
        raise doc.error("at least one tenant must run a trace in the foreground (steps >= 1)", "tenant")
    return tuple(out)


def _policies(doc: TomlDoc, exp: ExperimentTable, tables: dict[str, dict[str, Any]]) -> tuple[PolicySpec, ...]:
    presets = preset_names()
    out: list[PolicySpec] = []
    for i, n in enumerate(exp.policies):
        if n in {p.name for p in out}:
            raise doc.error(f"{n!r} is listed twice", "experiment", "policies", str(i))
        if n in tables:
            t = validate(doc, PolicyTable, tables[n], "policy", n)
            preset: str | None = getattr(t, "preset")  # noqa: B009 - a field of a model made at run time
            out.append(PolicySpec(n, preset, ("policy", n)))
        elif n in presets:
            out.append(PolicySpec(n, n))
        else:
            raise doc.error(f"unknown policy {n!r}: not a preset ({', '.join(presets)}) nor a [policy.{n}] table",
                            "experiment", "policies", str(i))
    for n in tables:
        if n not in exp.policies:
            raise doc.error(f"[policy.{n}] is not listed in experiment.policies", "policy", n)
    return tuple(out)


def _sweep(doc: TomlDoc, raw: dict[str, Any], tenants: tuple[TenantSpec, ...],
           policies: tuple[PolicySpec, ...]) -> SweepSpec:
    s = validate(doc, SweepTable, raw, "sweep")
    key = s.key
    parts = key.split(".")
    names = [p.name for p in policies]
    labels: list[Any] = []
    point_settings: list[dict[str, Any]] = []
    if parts[0] == "tenant":
        if len(parts) != 3 or parts[1] not in {t.name for t in tenants} or parts[2] not in TENANT_SWEEP_KEYS:
            raise doc.error(f"expected tenant.NAME.{{{','.join(TENANT_SWEEP_KEYS)}}} with a tenant's NAME",
                            "sweep", "key")
        kind = StaticBytes if parts[2] == "static" else Steps
        for i, v in enumerate(s.values):
            validate_value(doc, kind, v, "sweep", "values", str(i))
            labels.append(v)
            point_settings.append({key: v})
    else:
        if key not in NODE_KEYS and not (len(parts) == 3 and parts[0] == "gpu" and parts[2] in GPU_KEYS):
            raise doc.error(f"unknown sweep key (policy keys: {', '.join(KEYS)}; or tenant.NAME.static|steps)",
                            "sweep", "key")
        for i, v in enumerate(s.values):
            point = v if isinstance(v, dict) else {key: v}
            if not point:
                raise doc.error("an empty sweep point", "sweep", "values", str(i))
            for k, x in point.items():
                spec = KEYS.get(k.split(".")[-1])
                if spec is None:
                    raise doc.error(f"unknown policy key {k!r} in a sweep point", "sweep", "values", str(i))
                validate_value(doc, value_type(spec), x, "sweep", "values", str(i), *([k] if point is v else []))
            labels.append(v.get(key, ",".join(f"{k}={x}" for k, x in v.items())) if isinstance(v, dict) else v)
            point_settings.append(dict(point))
    if len(set(map(str, labels))) != len(labels):
        raise doc.error("sweep points must have distinct values", "sweep", "values")
    swept = s.policies if s.policies is not None else names
    for i, n in enumerate(swept):
        if n not in names:
            raise doc.error(f"{n!r} is not one of experiment.policies", "sweep", "policies", str(i))
    return SweepSpec(key, tuple(labels), tuple(swept), tuple(point_settings))
