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
    lend_reserve_bytes = "1GiB"                    #   role, flags, lend_limit_bytes, lend_reserve_bytes, ...

    [policy.tuned]                                 # a policy file's keys, in a table
    preset = "huvm"
    prefetch_chunks = 32

    [sweep]                                        # optional: one parameter, several values
    key = "prefetch_chunks"                        # a policy key, tenant.NAME.static / tenant.NAME.steps,
    values = [0, 1, 2, 4, 8, 16]                   #   or node.gpu_memory_bytes / node.preset / node.gpu_count
    policies = ["huvm-atc22"]                      # which policies the sweep applies to (default: all)

``[node] kind`` picks where the runs happen (huvmlab.experiment.executor): ``"sim"`` (default, the simulated
node above), ``"emulated"`` (NVIDIA's nvidia-uvm on the qemu test bed's software GPUs: ``gpus``, ``fb_mib``,
``scale``, ``module``) or ``"local"`` (this machine's GPUs and patched module: tenants are commands,
``command``, ``gpus``, ``env``, ``cwd``; node keys ``device``, ``stop_grace_s``, ``timeout_s``,
``sample_ms``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from huvm import abi
from huvm.policy import GPU_KEYS, KEYS, NODE_KEYS, key_spec, preset_names, spellings, value_type, written
from huvm.policyfile import PolicyTable
from huvm.schema import FileModel, size_value, validate, validate_value
from huvm.tomlpos import TomlDoc
from pydantic import BeforeValidator, Field, StringConstraints, create_model

from ..sim.schema import MAX_GPUS as SIM_MAX_GPUS
from ..sim.schema import GpuMemory, NodeTable

BASELINE_ORDER = ("stock", "huvm-atc22", "huvm")
#: the simulator's limits (driver/sim/huvm_sim_cdef.h): repetitions of a trace; times and sizes
MAX_STEPS: int = abi.lib.HUVM_SIM_MAX_STEPS
MAX_START_MS: int = abi.lib.HUVM_SIM_MAX_OP_NS // 1_000_000
MAX_STATIC_BYTES: int = abi.lib.HUVM_SIM_MAX_OP_NS
#: an experiment's own bound: the simulator is deterministic, so repetitions only check that it is
MAX_REPETITIONS = 100
TENANT_SWEEP_KEYS = ("static", "steps")
#: ``node.KEY`` sweeps (a different machine per value: every policy and ideal runs at every value)
NODE_SWEEP_KEYS = ("gpu_memory_bytes", "preset", "gpu_count")
NODE_KINDS = ("sim", "emulated", "local")
#: emulated framebuffer per GPU, MiB: the software GPU's fb_mib module parameter range (docs/softgpu.md)
MIN_FB_MIB, MAX_FB_MIB = 64, 4096
#: what the software GPU keeps of each framebuffer for RM (its rm_reserved_mib default, docs/softgpu.md): UVM's
#: PMA gets the rest, so an emulated node's reserve defaults to it
EMULATED_RESERVED_BYTES = 32 << 20
#: a local tenant's stop: SIGTERM, then SIGKILL after this grace (s); a run's own time limit (s)
DEFAULT_STOP_GRACE_S = 10.0
MAX_STOP_GRACE_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0

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
    record: dict[str, Any] | None = None


class RecordTable(FileModel):
    """``[record]``: events recorded alongside every run (huvmlab.experiment.recording)."""

    events: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1)]


class ExperimentTable(FileModel):
    """``[experiment]``."""

    name: str | None = None
    description: str = ""
    policies: Annotated[list[str], Field(min_length=1)] = list(BASELINE_ORDER)
    ideal: bool = True
    repetitions: Annotated[int, Field(ge=1, le=MAX_REPETITIONS)] = 1


class ExperimentNode(NodeTable):
    """``[node]`` of ``kind = "sim"``: a simulated node's table (``preset`` required; ``real`` is refused)."""

    kind: Literal["sim"] = "sim"
    preset: str


#: simulated-node keys an emulated node does not take (it has ``gpus`` and ``fb_mib`` instead)
_EMULATED_REFUSED = ("gpus", "gpu_count", "gpu_memory_bytes")
def _scale_value(v: Any) -> Any:
    """A string "1/N" as its float (anything else left for the float check)."""
    if isinstance(v, str):
        x = parse_scale(v)
        if x is None:
            raise ValueError(f'expected a number in (0, 1] or "1/N", got {v!r}')
        return x
    return v


_Scale = Annotated[float, BeforeValidator(_scale_value), Field(gt=0, le=1, allow_inf_nan=False)]

#: ``[node]`` of ``kind = "emulated"``: the preset's topology for N software GPUs of fb_mib each; the
#: simulated-node override keys (reserve, costs, topology, ...) stay, gpus/gpu_count/gpu_memory_bytes do not
EmulatedNode: type[FileModel] = create_model(  # type: ignore[call-overload]
    "EmulatedNode", __base__=FileModel,
    kind=(Literal["emulated"], ...),
    preset=(str, ...),
    gpus=(Annotated[int, Field(ge=1, le=SIM_MAX_GPUS)] | None, None),
    fb_mib=(Annotated[int, Field(ge=MIN_FB_MIB, le=MAX_FB_MIB)], ...),
    scale=(_Scale | None, None),
    time_scale=(_Scale | None, None),
    module=(Literal["stock", "patched"], "patched"),
    **{k: (f.annotation, f) for k, f in NodeTable.model_fields.items() if k not in (*_EMULATED_REFUSED, "preset")})


class LocalNode(FileModel):
    """``[node]`` of ``kind = "local"``: this machine's GPUs under the patched nvidia-uvm."""

    kind: Literal["local"]
    preset: str | None = None  # a label for the report (the real node is described by GET_INFO)
    device: Annotated[str, StringConstraints(min_length=1)] = "/dev/nvidia-uvm"
    stop_grace_s: Annotated[float, Field(gt=0, le=MAX_STOP_GRACE_S, allow_inf_nan=False)] = DEFAULT_STOP_GRACE_S
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)] | None = None
    sample_ms: Annotated[int, Field(ge=0, le=3_600_000)] = 500


GpuIndex = Annotated[int, Field(ge=0, le=abi.MAX_GPUS - 1)]


class _Tenant(FileModel):
    name: str | None = None
    gpu: GpuIndex | None = None
    trace: str = ""
    steps: Steps = 1
    static: StaticBytes = 0
    start_ms: Annotated[float, Field(ge=0, le=MAX_START_MS, allow_inf_nan=False)] = 0.0
    managed: bool = True
    # local nodes only: a program, the GPUs it sees, its environment and working directory
    command: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1)] | None = None
    gpus: Annotated[list[GpuIndex], Field(min_length=1)] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None


#: one ``[[tenant]]``: its own keys, plus its GPU's policy keys (huvm.policy.GPU_KEYS, and their deprecated spellings)
TenantTable: type[_Tenant] = create_model(  # type: ignore[call-overload]
    "TenantTable", __base__=_Tenant, **{w: (value_type(KEYS[k]) | None, None) for k in GPU_KEYS for w in spellings(k)})


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
    gpu_settings: tuple[tuple[str, Any], ...] = ()  # (a per-GPU policy key: role, lend_traffic..., value)
    index: int = 0  # position among the [[tenant]] tables
    # local nodes: argv, the GPUs it sees (gpu is the first), extra environment, working directory (absolute)
    command: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

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
class EmulatedNodeSpec:
    """``kind = "emulated"``: N software GPUs of fb_mib each; traces and static footprints scaled by scale."""

    gpus: int
    fb_mib: int
    scale: float
    scale_declared: bool  # False: the default, fb / the preset's GPU memory
    module: str  # stock | patched
    time_scale: float = 1.0  # factor on the traces' compute times (op durations) when replayed

    @property
    def fb_bytes(self) -> int:
        return self.fb_mib << 20


@dataclass(frozen=True)
class LocalNodeSpec:
    """``kind = "local"``: the machine's GPUs and its patched nvidia-uvm (device)."""

    device: str = "/dev/nvidia-uvm"
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    timeout_s: float | None = None
    sample_ms: int = 500
    label: str | None = None


@dataclass(frozen=True)
class ExperimentSpec:
    path: str
    name: str
    description: str
    node_preset: str
    node_options: dict[str, Any]  # NodeConfig.from_dict keys besides preset (never kind-specific keys)
    tenants: tuple[TenantSpec, ...]
    policies: tuple[PolicySpec, ...]
    ideal: bool
    repetitions: int
    sweep: SweepSpec | None
    doc: TomlDoc = field(repr=False, compare=False)
    node_kind: str = "sim"
    emulated: EmulatedNodeSpec | None = None
    local: LocalNodeSpec | None = None
    #: ``[record] events``: the events recorded alongside every run (empty: none)
    record_events: tuple[str, ...] = ()

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
    kind = validate_value(doc, Literal["sim", "emulated", "local"], top.node.get("kind", "sim"), "node", "kind")
    emulated: EmulatedNodeSpec | None = None
    local: LocalNodeSpec | None = None
    options = {k: v for k, v in top.node.items() if k not in ("preset", "kind")}
    if kind == "sim":
        preset = validate(doc, ExperimentNode, top.node, "node").preset
    elif kind == "emulated":
        for k in _EMULATED_REFUSED:
            if k in top.node and (k != "gpus" or isinstance(top.node[k], list)):
                instead = "fb_mib" if k == "gpu_memory_bytes" else "gpus = N, a count"
                what = "a list of GPU tables is" if k == "gpus" else "this key is"
                raise doc.error(f"{what} not for an emulated node (use {instead})", "node", k)
        node = validate(doc, EmulatedNode, top.node, "node")
        preset = getattr(node, "preset")  # noqa: B009 - a field of a model made at run time
        emulated = _emulated(doc, node)
        options = {k: v for k, v in options.items() if k not in ("gpus", "fb_mib", "scale", "time_scale", "module")}
    else:
        lnode = validate(doc, LocalNode, top.node, "node")
        preset = lnode.preset or "local"
        local = LocalNodeSpec(lnode.device, lnode.stop_grace_s, lnode.timeout_s, lnode.sample_ms, lnode.preset)
        options = {}
    tenants = _tenants(doc, top.tenant, kind)
    policies = _policies(doc, exp, top.policy)
    if emulated is not None and emulated.module == "stock":
        for i, p in enumerate(policies):
            if (p.preset or "huvm") != "stock" or p.table:
                raise doc.error(f"policy {p.name!r} needs the patched module (node.module = \"stock\" runs only "
                                "the stock policy)", "experiment", "policies", str(i))
    sweep = _sweep(doc, top.sweep, tenants, policies, kind) if top.sweep is not None else None
    record = _record(doc, top.record, kind) if top.record is not None else ()
    return ExperimentSpec(doc.path, exp.name if exp.name is not None else Path(doc.path).stem, exp.description,
                          preset, options, tenants, policies, exp.ideal, exp.repetitions, sweep, doc, kind, emulated,
                          local, record)


def _record(doc: TomlDoc, raw: dict[str, Any], kind: str) -> tuple[str, ...]:
    """``[record] events``: known event names (huvm's, and UVM's kprobe events where there is an nvidia-uvm)."""
    from huvm import bpf

    table = validate(doc, RecordTable, raw, "record")
    known = bpf.all_event_names()
    for i, name in enumerate(table.events):
        if name not in known and name != "all":
            raise doc.error(f"unknown event {name!r} (events: {', '.join(known)}, or \"all\")", "record", "events",
                            str(i))
        if kind == "sim" and bpf.is_uvm_event(name):
            raise doc.error(f"{name!r} is a kprobe on nvidia-uvm: a simulated node has none (huvm's events only)",
                            "record", "events", str(i))
    if "all" in table.events and len(table.events) > 1:
        raise doc.error("\"all\" (every huvm event) stands alone; name UVM's events one by one", "record", "events")
    return bpf.check_events(table.events)


def parse_scale(text: str) -> float | None:
    """``"1/N"`` (N >= 1) as a float; None if text is not of that form."""
    m = re.fullmatch(r"\s*1\s*/\s*([0-9]+)\s*", text)
    if m is None or int(m.group(1)) < 1:
        return None
    return 1.0 / int(m.group(1))


def _emulated(doc: TomlDoc, node: Any) -> EmulatedNodeSpec:
    """The emulated node's settings; the scale defaults to fb / the preset's GPU memory."""
    from ..sim.config import NodeConfig
    from ..sim.errors import SimConfigError

    try:
        base = NodeConfig.from_dict({"preset": node.preset})
    except SimConfigError as exc:
        raise doc.error(exc.reason, "node", "preset") from None
    gpus = node.gpus if node.gpus is not None else base.gpu_count
    if gpus > base.gpu_count:
        raise doc.error(f"{gpus} is not in 1..{base.gpu_count} (the GPUs of {base.name})", "node", "gpus")
    fb = node.fb_mib << 20

    def factor(key: str, default: float) -> float:
        v = getattr(node, key)
        return default if v is None else float(v)

    scale = factor("scale", min(1.0, fb / base.gpus[0].memory_bytes))
    return EmulatedNodeSpec(gpus, node.fb_mib, scale, node.scale is not None, node.module, factor("time_scale", 1.0))


def _tenants(doc: TomlDoc, tables: list[dict[str, Any]], kind: str = "sim") -> tuple[TenantSpec, ...]:
    out: list[TenantSpec] = []
    for i, raw in enumerate(tables):
        path = ("tenant", str(i))
        t = validate(doc, TenantTable, raw, *path)
        name = t.name if t.name is not None else f"tenant{i}"
        if name in {x.name for x in out}:
            raise doc.error(f"duplicate tenant name {name!r}", *path, "name")
        if kind == "local":
            out.append(_local_tenant(doc, t, raw, name, i))
            continue
        for k in ("command", "gpus", "env", "cwd"):
            if k in raw:
                raise doc.error('only tenants of a local node (node.kind = "local") take this key', *path, k)
        if t.gpu is None:
            raise doc.error("missing required key", *path, "gpu")
        if not t.trace and t.static == 0:
            raise doc.error("a tenant needs a trace or a static footprint", *path, "trace")
        out.append(TenantSpec(name, t.gpu, _trace_ref(doc, t.trace) if t.trace else "", t.steps, t.static,
                              int(t.start_ms * 1_000_000), doc.line(*path), t.managed,
                              tuple((k, raw[w]) for k, w in written(raw, GPU_KEYS)), i))
    if kind == "local":
        if not any(t.steps > 0 for t in out):
            raise doc.error("at least one tenant must run in the foreground (steps = 1)", "tenant")
    elif not any(t.steps > 0 and t.trace for t in out):
        raise doc.error("at least one tenant must run a trace in the foreground (steps >= 1)", "tenant")
    return tuple(out)


def _local_tenant(doc: TomlDoc, t: Any, raw: dict[str, Any], name: str, i: int) -> TenantSpec:
    """A tenant of a local node: a command on its GPUs (gpu, the owner of its data, is the first)."""
    path = ("tenant", str(i))
    for k in ("trace", "static", "managed"):
        if k in raw:
            raise doc.error('a local node runs commands: use command = [...] (traces run on kind "sim" or '
                            '"emulated")', *path, k)
    if t.command is None:
        raise doc.error("missing required key (a local node's tenants are commands)", *path, "command")
    if t.steps > 1:
        raise doc.error(f"{t.steps}: a command runs once (steps = 1, or 0 for a background command stopped "
                        "at the end)", *path, "steps")
    gpus = list(t.gpus) if t.gpus is not None else ([t.gpu] if t.gpu is not None else None)
    if gpus is None:
        raise doc.error("missing required key (gpus = [...] or gpu = N)", *path, "gpus")
    if len(set(gpus)) != len(gpus):
        raise doc.error("a GPU is listed twice", *path, "gpus")
    if t.gpu is not None and t.gpu != gpus[0]:
        raise doc.error(f"gpu = {t.gpu} must be the first of gpus (the GPU that owns its data)", *path, "gpu")
    cwd = None
    if t.cwd is not None:
        p = Path(t.cwd)
        cwd = str(p if p.is_absolute() else Path(doc.path).resolve().parent / p)
    return TenantSpec(name, gpus[0], "", t.steps, 0, int(t.start_ms * 1_000_000), doc.line(*path), True,
                      tuple((k, raw[w]) for k, w in written(raw, GPU_KEYS)), i, tuple(t.command), tuple(gpus),
                      tuple(sorted((t.env or {}).items())), cwd)


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
           policies: tuple[PolicySpec, ...], node_kind: str = "sim") -> SweepSpec:
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
    elif parts[0] == "node":
        if len(parts) != 2 or parts[1] not in NODE_SWEEP_KEYS:
            raise doc.error(f"expected node.{{{','.join(NODE_SWEEP_KEYS)}}}", "sweep", "key")
        if node_kind != "sim":
            raise doc.error(f'node sweeps run on the simulated node (node.kind = "sim"), not on {node_kind!r}',
                            "sweep", "key")
        if s.policies is not None:
            raise doc.error("a node sweep changes the machine: every policy runs at every value (drop "
                            "sweep.policies)", "sweep", "policies")
        vtype: Any = {"gpu_memory_bytes": GpuMemory, "preset": Annotated[str, StringConstraints(min_length=1)],
                          "gpu_count": Annotated[int, Field(ge=1, le=SIM_MAX_GPUS)]}[parts[1]]
        for i, v in enumerate(s.values):
            validate_value(doc, vtype, v, "sweep", "values", str(i))
            labels.append(v)
            point_settings.append({parts[1]: v})
    else:
        gpu_spec = key_spec(parts[2]) if len(parts) == 3 and parts[0] == "gpu" else None
        if key not in NODE_KEYS and (gpu_spec is None or gpu_spec.scope != "gpu"):
            raise doc.error(f"unknown sweep key (policy keys: {', '.join(KEYS)}; or tenant.NAME.static|steps; "
                            f"or node.{{{','.join(NODE_SWEEP_KEYS)}}})", "sweep", "key")
        for i, v in enumerate(s.values):
            point = v if isinstance(v, dict) else {key: v}
            if not point:
                raise doc.error("an empty sweep point", "sweep", "values", str(i))
            for k, x in point.items():
                spec = key_spec(k.split(".")[-1])
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
