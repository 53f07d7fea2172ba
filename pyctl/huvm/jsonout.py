"""The one JSON schema of huvmctl's ``--json`` output, as pydantic models.

Every document has ``schema_version`` (:data:`SCHEMA_VERSION`, raised on any incompatible change) and
``kind`` (the verb). Shared rules: sizes are integers in bytes (``*_bytes``; ``null`` for unlimited),
objects rather than positional arrays (``host_reason`` is ``{"no_peer": 3, ...}``), GPU sets are lists of
GPU indices rather than bitmasks, flags and reasons are named, and each counter's key names what it holds
with its unit (``evict_to_peer_chunks``, ``from_peer_bytes``; rates end in ``_per_s``).
:func:`json_schema` gives the JSON Schema of every document (``huvmctl`` documents it in docs/pyctl.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from . import abi
from .info import NodeInfo
from .metrics import GPU_METRICS, PAIR_METRICS, Metric, host_reasons
from .policy import GPU_KEYS, KEYS, NODE_KEYS, KeySpec, Policy, flag_names
from .stats import StatsDelta, StatsSnapshot, TenantFigures, guest_traffic_mbyte_per_s, rate_map

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Gpu(_Model):
    index: int
    uuid: str
    name: str
    memory_bytes: int
    free_bytes: int
    pcie_mbyte_per_s: int
    flags: list[str] = Field(description="named GPU flags: present, replayable_faults, pma_eviction")


class Link(_Model):
    gpu: int
    peer: int
    type: str = Field(description="none, pcie, nvlink_1..nvlink_4, c2c")
    link_count: int
    mbyte_per_s: int


class Node(_Model):
    abi_version: str
    module_abi_version: str
    huvm_version: str
    backend: str
    upstream_version: str
    gpus: list[Gpu]
    links: list[Link]


def _policy_field(spec: KeySpec) -> tuple[Any, Any]:
    """A policy field's JSON type and pydantic field, from its row of the header's table: enums by name,
    booleans, flags as a list of names, sizes in bytes (null for unlimited), other numbers as integers."""
    unit = {"mbyte_per_s": "MB/s (10^6 B/s)", "ms": "ms", "percent": "%", "chunks": "2 MiB chunks",
            "bytes": "bytes"}.get(spec.unit, "")
    extra = "; null: unlimited" if spec.unlimited else "; 0: off" if spec.off else ""
    desc = f"{spec.help} ({unit}{extra})" if unit else spec.help
    if spec.kind == "enum":
        return str, Field(description=desc)
    if spec.kind == "bool":
        return bool, Field(description=desc)
    if spec.kind == "flags":
        return list[str], Field(default_factory=list, description="the flags set: " + ", ".join(spec.choices()))
    if spec.unlimited:
        return int | None, Field(description=desc)
    return int, Field(default=0, description=desc) if spec.scope == "gpu" else Field(description=desc)


def _policy_model(name: str, scope: str, **fixed: Any) -> Any:
    fields: dict[str, Any] = {**fixed}
    fields.update({k: _policy_field(KEYS[k]) for k in (NODE_KEYS if scope == "node" else GPU_KEYS)})
    return create_model(name, __base__=_Model, **fields)


# The policy documents' fields are the header's policy field table (huvm.policy.KEYS), in struct order.
if TYPE_CHECKING:
    class GpuPolicy(_Model):
        index: int | None
        uuid: str

    class PolicyDoc(_Model):
        generation: int
        preset: str
        gpus: list[GpuPolicy]
else:
    GpuPolicy = _policy_model(
        "GpuPolicy", "gpu",
        index=(int | None, Field(description="GPU index on this node; null for an entry of an absent GPU")),
        uuid=(str, ...))
    PolicyDoc = _policy_model("PolicyDoc", "node", generation=(int, ...), preset=(str, ...),
                              gpus=(list[GpuPolicy], ...))


class GpuStats(_Model):
    gpu: int
    counters: dict[str, int] = Field(description="counter and gauge name (with its unit) -> value")
    host_reason_chunks: dict[str, int] = Field(description="chunks evicted to host, by named reason")


class PairStats(_Model):
    owner: int
    holder: int
    counters: dict[str, int]


class Stats(_Model):
    timestamp_ns: int
    policy_generation: int
    gpus: list[GpuStats]
    pairs: list[PairStats] = Field(description="pairs with any non-zero value")


class GpuRates(_Model):
    gpu: int
    rates: dict[str, float] = Field(description="counter name with _per_s -> per second over the interval")
    host_reason_chunks_per_s: dict[str, float] = Field(
        description="chunks evicted to host per second over the interval, by named reason")
    gauges: dict[str, int]
    guest_traffic_mbyte_per_s: float = Field(
        default=0.0, description="guests' data copied into or out of this GPU over the interval, MB/s (what its "
                                 "lend_traffic_mbyte_per_s budget limits, per 20 ms window)")


class _Doc(_Model):
    """A whole document: ``schema_version`` and ``kind`` are required when validating one (a document
    without them is not ours) and filled in when huvm builds one."""

    schema_version: Literal[1]

    @classmethod
    def make(cls, **data: Any) -> Self:
        """A document of this kind at this schema version."""
        kind = cls.model_fields["kind"].json_schema_extra["const"]  # type: ignore[index]
        return cls.model_validate({"schema_version": SCHEMA_VERSION, "kind": kind, **data})


class StatusDoc(_Doc):
    kind: Literal["status"] = Field(json_schema_extra={"const": "status"})
    backend: str
    node: Node
    policy: PolicyDoc
    stats: Stats


class PolicyShowDoc(_Doc):
    kind: Literal["policy"] = Field(json_schema_extra={"const": "policy"})
    policy: PolicyDoc


class TenantFigure(_Model):
    policy: str
    sweep_value: str | None
    tenant: str
    gpu: int
    role: str = Field(description="harvester, lender or idle")
    foreground: bool = Field(description="false: runs until the foreground tenants finish")
    runtime_ns: int
    ops_per_s: float
    harvester_speedup: float | None = Field(
        description="harvesters: their runtime under stock / under this policy (> 1: faster); else null")
    lender_slowdown: float | None = Field(
        description="lenders: against running alone, runtime or (background) throughput ratio (1.0: lending cost "
                    "nothing); else null")


class StatsDoc(_Doc):
    kind: Literal["stats"] = Field(json_schema_extra={"const": "stats"})
    stats: Stats
    tenants: list[TenantFigure] | None = Field(
        default=None, description="a simulated node from an experiment file: every tenant under every policy of "
                                  "the experiment, harvester speedup and lender slowdown side by side; else null")


class StatsTenantsDoc(_Doc):
    """``stats --run DIR``: an experiment output folder's tenants, harvester speedup and lender slowdown."""

    kind: Literal["stats-tenants"] = Field(json_schema_extra={"const": "stats-tenants"})
    run: str = Field(description="the output folder")
    tenants: list[TenantFigure]


class StatsIntervalDoc(_Doc):
    kind: Literal["stats-interval"] = Field(json_schema_extra={"const": "stats-interval"})
    timestamp_ns: int
    interval_s: float
    gpus: list[GpuRates]


class VaSpace(_Model):
    id: int
    pid: int
    uid: int
    comm: str
    gpus: list[int] = Field(description="indices of the GPUs registered in this va_space")
    counters: dict[str, int]


class VaSpacesDoc(_Doc):
    kind: Literal["va-spaces"] = Field(json_schema_extra={"const": "va-spaces"})
    va_spaces: list[VaSpace]


PolicyValue = int | bool | str | None | list[str]


class PolicyChange(_Model):
    key: str = Field(description="node key, or gpu.INDEX.FIELD (gpu.1.lend_limit_bytes) for a GPU's entry")
    old: PolicyValue = Field(description="as in the policy document: sizes in bytes, null for unlimited (or "
                                         "for a GPU entry that was not there), enums by name")
    new: PolicyValue


class PolicyChangeDoc(_Doc):
    """``policy set | preset | apply``: what changed (or would, with ``--dry-run``)."""

    kind: Literal["policy-change"] = Field(json_schema_extra={"const": "policy-change"})
    applied: bool = Field(description="false for --dry-run: nothing was sent")
    generation: int
    preset: str
    changes: list[PolicyChange]


class PolicyDiffDoc(_Doc):
    """``policy diff FILE``: the current policy against the file's."""

    kind: Literal["policy-diff"] = Field(json_schema_extra={"const": "policy-diff"})
    file: str
    changes: list[PolicyChange] = Field(description="old: the node's value now; new: the file's")


class PolicyKey(_Model):
    key: str = Field(description="as huvmctl policy set takes it (gpu.N.KEY for per-GPU keys)")
    scope: Literal["node", "gpu"]
    type: Literal["enum", "bool", "int", "size", "flags", "rate"]
    min: int | None = Field(description="int: the smallest value; size: in bytes; rate: in MB/s, the smallest "
                                        "other than 0 when off_allowed")
    max: int | None = Field(description="int: the largest value; size: in bytes, null when unlimited is the top; "
                                        "rate: in MB/s")
    choices: list[str] | None = Field(description="enum: the names it takes; flags: the flag names (a set of them)")
    unlimited_allowed: bool
    off_allowed: bool = Field(default=False, description="rate: 0 (off, no budget) is allowed besides min..max")
    help: str


class PolicyKeysDoc(_Doc):
    kind: Literal["policy-keys"] = Field(json_schema_extra={"const": "policy-keys"})
    presets: list[str]
    keys: list[PolicyKey]


class NvLinkState(_Model):
    link: int
    active: bool
    remote_bus_id: str | None


class TopologyGpu(_Model):
    index: int
    uuid: str
    name: str
    memory_bytes: int
    pcie_mbyte_per_s: int
    nvml_index: int | None = Field(description="null without NVML")
    pci_bus_id: str | None
    pcie_gen: int | None
    pcie_width: int | None
    nvlinks: list[NvLinkState]
    hbm_mbyte_per_s: int | None = Field(description="peak memory bandwidth in MB/s from NVML (bus width x max "
                                                    "memory clock x 2 / 8); null without NVML")


class TopologyLink(_Model):
    gpu: int
    peer: int
    label: str = Field(description="as nvidia-smi topo -m prints it: NV<n> for n NVLink links, or PCIe")
    mbyte_per_s: int


class TopologyDoc(_Doc):
    kind: Literal["topology"] = Field(json_schema_extra={"const": "topology"})
    nvml: bool = Field(description="whether NVML answered (without it every NVML field is null)")
    gpus: list[TopologyGpu]
    links: list[TopologyLink]
    notes: list[str]


class LenderBudgetRow(_Model):
    gpu: int
    uuid: str
    hbm_mbyte_per_s: int
    hbm_source: Literal["nvml", "given"] = Field(description="nvml: from the GPU; given: --hbm")
    lend_traffic_mbyte_per_s: int = Field(description="the budget set (or that would be, with --dry-run)")


class LenderBudgetDoc(_Doc):
    """``policy lender-budget``: the budgets for a slowdown target, and the policy change that applies them."""

    kind: Literal["lender-budget"] = Field(json_schema_extra={"const": "lender-budget"})
    max_slowdown: float = Field(description="the target, a share (0.02: 2 %)")
    share: float = Field(description="of each GPU's HBM bandwidth guests' copies may take: 1 - 1 / (1 + target)")
    budgets: list[LenderBudgetRow]
    applied: bool = Field(description="false for --dry-run: nothing was sent")
    generation: int
    preset: str
    changes: list[PolicyChange]


class GpuRatesRow(_Model):
    gpu: int
    uuid: str
    hbm_mbyte_per_s: int = Field(description="HBM bandwidth, MB/s; 0: unknown (T makes no clamp)")
    giveback_mbyte_per_s: int = Field(description="give-back rate (GPU to host eviction), MB/s; 0: unknown (the "
                                                  "host link's line rate is used)")


class GpuRatesDoc(_Doc):
    """``rates show|set|load``: each GPU's rates that its slowdown bound weighs (GET_GPU_RATES after the change)."""

    kind: Literal["gpu-rates"] = Field(json_schema_extra={"const": "gpu-rates"})
    rates: list[GpuRatesRow]
    changed: list[int] = Field(description="the GPUs this command set (empty for show)")


class SimPreset(_Model):
    name: str
    gpu_count: int
    gpu_name: str
    memory_bytes: int = Field(description="of each GPU")
    nvswitch: bool
    aliases: list[str]
    source: str


class SimPresetsDoc(_Doc):
    kind: Literal["sim-presets"] = Field(json_schema_extra={"const": "sim-presets"})
    presets: list[SimPreset]


class TraceRecordDoc(_Doc):
    """``trace record``: the Parquet file written and what went into it."""

    kind: Literal["trace-record"] = Field(json_schema_extra={"const": "trace-record"})
    path: str
    rows: int = Field(description="events written")
    lost: int = Field(description="records the perf buffer dropped")
    counts: dict[str, int] = Field(description="per event, counted in the kernel (exact even when records are lost)")
    per_event: dict[str, int] = Field(description="per event, rows written")
    source: str
    seconds: float


class ExperimentDoc(_Doc):
    """``experiment run`` and ``sim run``: the summary (the rows are those of summary.json)."""

    kind: Literal["experiment"] = Field(json_schema_extra={"const": "experiment"})
    experiment: str
    node: str
    sweep_key: str | None
    results: list[dict[str, Any]] = Field(description="one object per (sweep value, policy)")
    tenants: list[dict[str, Any]] = Field(description="one object per tenant of each run")
    notes: list[str]
    files: list[str] = Field(description="files written (none for sim run)")
    node_record: dict[str, Any] | None = Field(
        default=None, description="the node of the runs: node_kind (sim, emulated, local), module, node_preset, "
                                  "scale, granularity (trace chunks per 2 MiB block), node_gpus")


class CompareSide(_Model):
    path: str
    experiment: str
    node: str
    node_kind: str = Field(description="sim, emulated or local")
    module: str
    scale: float = Field(description="the run's scale factor on bytes and working sets (1.0: full size)")


class CompareRow(_Model):
    sweep_value: str | None
    policy: str
    counter: str = Field(description="counter name, peer_bytes, host_bytes, or 'bytes PATH SRC->DST'")
    a: float
    b: float
    rel_error: float | None = Field(description="(b - a) / a; null when only a is 0")


class ExperimentCompareDoc(_Doc):
    """``experiment compare RUN_A RUN_B``: two runs' counters side by side."""

    kind: Literal["experiment-compare"] = Field(json_schema_extra={"const": "experiment-compare"})
    a: CompareSide
    b: CompareSide
    normalized: bool = Field(description="counts divided by each run's scale factor")
    rows: list[CompareRow]
    notes: list[str]


class TraceFacts(_Model):
    """What a trace is: :class:`huvmlab.traces.TraceInfo` is this model (one declaration for the summary and
    its JSON document)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    trace_kind: str = Field(description="dnn, graph, lender, ...")
    model: str
    size_bytes: int = Field(description="on disk")
    n_ops: int
    n_storages: int
    n_accesses: int
    n_touches: int
    n_chunks: int
    peak_live_bytes: int
    peak_op: int
    peak_phase: str
    allocator_peak_bytes: int = Field(description="predicted torch.cuda.max_memory_allocated: the caching "
                                      "allocator's blocks, rounded, at their peak")
    reserved_bytes: int
    static_bytes: int
    flops: int
    params: int
    est_time_s: dict[str, float] = Field(description="GPU preset -> estimated time of one step")
    meta: dict[str, Any] = Field(description="the generator's parameters")


class TraceInfoDoc(_Doc, TraceFacts):
    kind: Literal["trace-info"] = Field(json_schema_extra={"const": "trace-info"})


class CalibrateRow(_Model):
    key: str = Field(description="the constant: memory_bytes, pcie_mbyte_per_s, or a cost (fault_service_ns, ...)")
    what: str
    unit: str = Field(description="bytes, MB/s or ns")
    node: int = Field(description="the calibrated node's value")
    preset: int = Field(description="the nearest preset's value")
    ratio: float | None = Field(description="node / preset; null when the preset's is 0")


class CalibrateDoc(_Doc):
    """``calibrate``: the record and node files written and the node against the nearest preset."""

    kind: Literal["calibrate"] = Field(json_schema_extra={"const": "calibrate"})
    source: str = Field(description="measured, or the record file given with --record")
    gpu_name: str
    driver: str
    node: str = Field(description="the simulated node's name")
    record_file: str | None = Field(description="the calibration record written (null with --record)")
    node_file: str | None = Field(description="the node TOML written (null: --record without --out)")
    nearest_preset: str
    rows: list[CalibrateRow]
    notes: list[str]


class GpuCheckRun(_Model):
    allocator: str = Field(description="pytorch or managed-pool")
    step_s: list[float] = Field(description="every step's wall time, warm-up included")
    steady_s: float = Field(description="median step time after the warm-up steps")
    peak_bytes: int | None = Field(description="torch.cuda.max_memory_allocated (PyTorch's allocator only)")


class GpuCheckDoc(_Doc):
    """``gpu-check``: ``measured`` is false (and the rest empty) where there is no GPU."""

    kind: Literal["gpu-check"] = Field(json_schema_extra={"const": "gpu-check"})
    measured: bool
    reason: str = Field(description="why nothing was measured (no GPU, CPU-only PyTorch)")
    device: str
    driver: str
    torch: str
    cuda: str | None
    rmm_package: str
    model: str
    batch: int
    seq: int
    amp: str
    predicted_peak_bytes: int = Field(description="the trace's allocator peak for this configuration")
    runs: list[GpuCheckRun]
    ratio: float | None = Field(description="managed pool's steady step time / PyTorch's")
    target_ratio: float
    ok: bool


class WatchEventDoc(_Doc):
    """``watch``: one per line."""

    kind: Literal["watch-event"] = Field(json_schema_extra={"const": "watch-event"})
    unix_time_s: float
    source: Literal["module", "device"]
    action: Literal["add", "remove"]
    name: str = Field(description="the module (nvidia_uvm) or the device node")


DOCUMENTS: tuple[type[_Doc], ...] = (StatusDoc, PolicyShowDoc, StatsDoc, StatsTenantsDoc, StatsIntervalDoc,
                                     VaSpacesDoc, PolicyChangeDoc, PolicyDiffDoc, PolicyKeysDoc, TopologyDoc,
                                     SimPresetsDoc, LenderBudgetDoc, GpuRatesDoc,
                                     ExperimentDoc, ExperimentCompareDoc, TraceInfoDoc, TraceRecordDoc,
                                     WatchEventDoc, CalibrateDoc, GpuCheckDoc)
#: any document, told apart by ``kind``
AnyDocument: Any = Annotated[Union[DOCUMENTS], Field(discriminator="kind")]  # noqa: UP007 - a runtime tuple


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of every document: one ``oneOf`` keyed by ``kind``."""
    from pydantic import TypeAdapter

    schema: dict[str, Any] = TypeAdapter(AnyDocument).json_schema()
    return schema


def validate(doc: Any) -> _Doc:
    """A document (parsed JSON) checked against the schema; pydantic's ValidationError when it is not one."""
    from pydantic import TypeAdapter

    parsed: _Doc = TypeAdapter(AnyDocument).validate_python(doc, strict=True)
    return parsed


# ---- from the library's objects --------------------------------------------------------------------------

def _flag_names(flags: int) -> list[str]:
    return [name.removeprefix("HUVM_GPU_FLAG_").lower() for name, bit in sorted(abi.constants("HUVM_GPU_FLAG_").items(),
                                                                                key=lambda kv: kv[1])
            if flags & bit]


def node(info: NodeInfo) -> Node:
    return Node(abi_version=abi.version_str(info.abi_version),
                module_abi_version=abi.version_str(info.module_abi_version),
                huvm_version=abi.huvm_version_str(info.huvm_version), backend=info.backend_name,
                upstream_version=info.upstream_version,
                gpus=[Gpu(index=g.index, uuid=g.uuid, name=g.name, memory_bytes=g.memory_bytes,
                          free_bytes=g.free_bytes, pcie_mbyte_per_s=g.pcie_mbyte_per_s, flags=_flag_names(g.flags))
                      for g in info.gpus],
                links=[Link(gpu=k.a, peer=k.b, type=k.type_name, link_count=k.link_count, mbyte_per_s=k.mbyte_per_s)
                       for k in info.links])


def policy_value(spec: KeySpec, value: int) -> PolicyValue:
    """A policy field's value as the policy document holds it (:func:`_policy_field`)."""
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "enum":
        return abi.enum_names(spec.enum_prefix).get(value, str(value)).replace("_", "-")
    if spec.kind == "flags":
        return flag_names(spec, value)
    if spec.unlimited and value == abi.UNLIMITED:
        return None
    return value


def policy(p: Policy, info: NodeInfo | None = None) -> PolicyDoc:
    index = {g.uuid.lower(): g.index for g in info.gpus} if info else {}
    gpus = [GpuPolicy(index=index.get(g.uuid.lower()), uuid=g.uuid,
                      **{k: policy_value(KEYS[k], getattr(g, k)) for k in GPU_KEYS})
            for g in p.gpus]
    return PolicyDoc(generation=p.generation, preset=p.preset_name, gpus=gpus,
                     **{k: policy_value(KEYS[k], getattr(p, k)) for k in NODE_KEYS})


def _name(m: Metric) -> str:
    return m.base_name


def stats(s: StatsSnapshot) -> Stats:
    gpus = []
    for g in s.gpus:
        counters: dict[str, int] = {}
        reasons: dict[str, int] = {}
        for m in GPU_METRICS:
            v = g.values[m.field]
            if isinstance(v, tuple):
                reasons = _host_reasons(v)
            else:
                counters[_name(m)] = v
        gpus.append(GpuStats(gpu=g.gpu, counters=counters, host_reason_chunks=reasons))
    pairs = [PairStats(owner=p.owner, holder=p.holder,
                       counters={_name(m): p.values[m.field] for m in PAIR_METRICS}) for p in s.pairs]
    return Stats(timestamp_ns=s.timestamp_ns, policy_generation=s.generation, gpus=gpus, pairs=pairs)


def tenant_figures(figs: Sequence[TenantFigures]) -> list[TenantFigure]:
    return [TenantFigure(**f.to_dict()) for f in figs]


def _host_reasons(value: int | tuple[int, ...]) -> dict[str, int]:
    """host_reason[] by reason name (the reasons an eviction to host can have: not ``peer``)."""
    values = value if isinstance(value, tuple) else (value,)
    return {name: values[i] for i, name in host_reasons().items() if i < len(values)}


def stats_interval(d: StatsDelta) -> StatsIntervalDoc:
    """Rates of the scalar counters by name; the per-reason array (host_reason) as its own object, one rate
    per named reason (by huvm.stats' one rule), never summed into a name that does not say so."""
    by_field = {m.field: m for m in GPU_METRICS}
    arrays = {m.field for m in GPU_METRICS if m.length}
    before = {g.gpu: g for g in d.before.gpus}
    gpus = []
    traffic = guest_traffic_mbyte_per_s(d)
    for g, r in zip(d.after.gpus, d.rates(), strict=True):
        gauges = {_name(m): int(g.scalar(m.field)) for m in GPU_METRICS if m.kind == "gauge"}
        new = _host_reasons(g.values["host_reason"])
        old = _host_reasons(before[g.gpu].values["host_reason"]) if g.gpu in before else None
        reasons = rate_map(dict.fromkeys(new, "counter"), old, new, d.seconds)
        rates = {_name(by_field[f]) + "_per_s": v for f, v in r.items() if f not in arrays}
        gpus.append(GpuRates(gpu=g.gpu, rates=rates, host_reason_chunks_per_s=reasons, gauges=gauges,
                             guest_traffic_mbyte_per_s=traffic.get(g.gpu, 0.0)))
    return StatsIntervalDoc.make(timestamp_ns=d.after.timestamp_ns, interval_s=d.seconds, gpus=gpus)


def dump(doc: _Model) -> dict[str, Any]:
    return doc.model_dump(mode="json")


def policy_values(p: Policy, info: NodeInfo | None = None) -> dict[str, PolicyValue]:
    """A policy as flat key -> value, the values as in :class:`PolicyDoc` (GPU entries ``gpu.INDEX.FIELD``,
    by UUID for a GPU the node does not have)."""
    doc = policy(p, info)
    out: dict[str, PolicyValue] = {"preset": doc.preset, **{k: getattr(doc, k) for k in NODE_KEYS}}
    for g in doc.gpus:
        for name, value in g.model_dump().items():
            if name not in ("index", "uuid"):
                out[f"gpu.{g.uuid if g.index is None else g.index}.{name}"] = value
    return out


def changes(before: Policy, after: Policy, info: NodeInfo | None = None) -> list[PolicyChange]:
    """What differs from before to after (generation left out)."""
    a, b = policy_values(before, info), policy_values(after, info)
    return [PolicyChange(key=k, old=a.get(k), new=b.get(k)) for k in dict.fromkeys([*a, *b])
            if k not in a or k not in b or a[k] != b[k]]


def policy_keys() -> PolicyKeysDoc:
    from .policy import preset_names

    keys = []
    for spec in KEYS.values():
        ranged = spec.kind in ("int", "bytes", "rate")
        keys.append(PolicyKey(
            key=spec.name if spec.scope == "node" else f"gpu.N.{spec.name}", scope=spec.scope,
            type="size" if spec.kind == "bytes" else spec.kind, min=spec.lo if ranged else None,
            max=spec.hi if ranged and not (spec.unlimited and spec.hi == abi.UNLIMITED) else None,
            choices=list(spec.choices()) if spec.kind == "enum" else None, unlimited_allowed=spec.unlimited,
            off_allowed=spec.off, help=spec.help))
    return PolicyKeysDoc.make(presets=list(preset_names()), keys=keys)


def topology(topo: Any) -> TopologyDoc:
    """A :class:`huvm.topology.Topology`."""
    return TopologyDoc.make(
        nvml=topo.nvml, notes=list(topo.notes),
        gpus=[TopologyGpu(index=g.index, uuid=g.uuid, name=g.name, memory_bytes=g.memory_bytes,
                          pcie_mbyte_per_s=g.pcie_mbyte_per_s, nvml_index=g.nvml_index, pci_bus_id=g.pci_bus_id,
                          pcie_gen=g.pcie_gen, pcie_width=g.pcie_width, hbm_mbyte_per_s=g.hbm_mbyte_per_s,
                          nvlinks=[NvLinkState(link=n.link, active=n.active, remote_bus_id=n.remote_bus_id)
                                   for n in g.nvlinks]) for g in topo.gpus],
        links=[TopologyLink(gpu=a, peer=b, label=label, mbyte_per_s=mbps) for a, b, label, mbps in topo.links])


def trace_info(info: TraceFacts) -> TraceInfoDoc:
    """A :class:`huvmlab.traces.TraceInfo` (a :class:`TraceFacts`) as its document."""
    return TraceInfoDoc.make(**info.model_dump())



def gpu_check(res: Any, reason: str = "no GPU", *, target_ratio: float) -> GpuCheckDoc:
    """A :class:`huvmlab.experiment.gpucheck.CheckResult`, or None where nothing was measured; target_ratio:
    its ``TARGET_RATIO``."""
    if res is None:
        return GpuCheckDoc.make(measured=False, reason=reason, device="", driver="", torch="", cuda=None,
                                rmm_package="", model="", batch=0, seq=0, amp="", predicted_peak_bytes=0, runs=[],
                                ratio=None, target_ratio=target_ratio, ok=True)
    w = res.config.warmup
    runs = [GpuCheckRun(allocator=r.allocator, step_s=r.step_s, steady_s=r.steady_s(w), peak_bytes=r.peak_bytes)
            for r in (res.pytorch, res.pool)]
    p = res.probe
    return GpuCheckDoc.make(measured=True, reason="", device=p.device, driver=p.driver, torch=p.torch, cuda=p.cuda,
                            rmm_package=res.rmm_package, model=res.config.model, batch=res.config.batch,
                            seq=res.config.seq, amp=res.config.amp, predicted_peak_bytes=res.predicted_peak_bytes,
                            runs=runs, ratio=res.ratio, target_ratio=target_ratio, ok=res.ok)
