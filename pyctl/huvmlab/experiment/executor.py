"""Where an experiment's runs happen: one executor per node kind (``[node] kind``).

An :class:`Executor` runs one planned run, a (policy, sweep value, repetition), and returns the same result
records whatever the node (:mod:`huvmlab.experiment.results`), so the report, tables, Parquet and plots do not
know where the numbers came from. Every run also records its node (:class:`NodeRecord`: kind, module
version, preset, scale factor).

- ``sim``: :class:`huvmlab.experiment.runner.Runner`, the simulated node (deterministic).
- ``emulated``: ``huvmlab.experiment.emulated.EmulatedExecutor``, NVIDIA's nvidia-uvm on the qemu test bed's
  software GPUs (traces replayed through UVM; bytes scaled by one declared factor).
- ``local``: :class:`huvmlab.experiment.local.LocalExecutor`, commands on this machine's GPUs under the
  patched module (policy through the ioctl).

The contract an executor implements::

    class Executor(abc.ABC):
        kind: ClassVar[str]                      # "sim" | "emulated" | "local"
        supports_ideal: ClassVar[bool]           # False: ideal runs dropped (noted in the report)
        supports_alone: ClassVar[bool]           # False: no alone baselines (noted)
        def check(self) -> None                  # refuse before anything runs (one-line HuvmError)
        def record(self) -> NodeRecord           # after check()
        def run_one(self, run: PlannedRun) -> RunResult
        def run_alone(self, t, value, horizon_ns) -> TenantRow | None
        def execute(self, planned, progress) -> ExperimentResult   # default: the loop below; may be
                                                 #   overridden (the emulated host side: one VM boot)
        def close(self) -> None

The base class gives every executor the shared rules: the tenants and node shape of a sweep value
(:meth:`Executor.tenants`, :meth:`Executor.config_for`), a run's policy settings exactly as the simulator
applies them (:meth:`Executor.policy_settings`), the traces (:meth:`Executor.trace`), and the conversions of
GET_STATS into result rows (:func:`counter_rows`, :func:`traffic_rows`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from huvm.errors import ConfigError, DeviceUnavailable, HuvmError, UsageError
from huvm.info import NodeInfo
from huvm.metrics import GPU_METRICS, PAIR_METRICS
from huvm.policy import Origin, Setting, parse_setting
from huvm.policyfile import parse as parse_policy_table
from huvm.units import format_size, parse_size

from .results import CounterRow, ExperimentResult, RunEvents, RunKey, RunResult, TenantRow, TrafficRow
from .spec import EMULATED_RESERVED_BYTES, ExperimentSpec, PolicySpec, TenantSpec

#: the unit of UVM's residency and of huvm's counters (2 MiB chunks)
CHUNK_BYTES = 2 << 20
#: the finest a scaled size gets: a page (scaled bytes are rounded down to it, and never below it)
PAGE_BYTES = 4096


@dataclass(frozen=True)
class PlannedRun:
    key: RunKey
    policy: PolicySpec | None  # None: the ideal run


Progress = Callable[[PlannedRun, int, int], None]


@dataclass(frozen=True)
class NodeRecord:
    """What every run records about its node."""

    kind: str  # sim | emulated | local
    module: str  # module version: the simulator's, or the kernel module's (GET_INFO)
    preset: str  # node preset (the topology source), or the local node's label
    scale: float = 1.0  # factor on trace bytes, working sets and static footprints (emulated)
    gpus: int = 0
    #: trace chunks per 2 MiB unit the node moves and counts: 1 at full size, k on the emulated node at scale
    #: 1/k (a UVM block holds k trace chunks; a fraction where 1/scale is not whole) and on its simulated twin
    granularity: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def module_version(info: NodeInfo, *, simulated: bool = False) -> str:
    """The module's version as GET_INFO reports it."""
    from huvm import abi

    huvm = f"huvm {abi.huvm_version_str(info.huvm_version)}"
    if simulated:
        return f"{huvm} (simulator)"
    upstream = info.upstream_version or "unknown"
    return f"nvidia-uvm {upstream} + {huvm}"


def scale_bytes(n: int, scale: float) -> int:
    """n bytes scaled (the one rounding rule): down to a whole page, at least a page (0 stays 0)."""
    if n <= 0:
        return 0
    if scale == 1.0:
        return n
    return max(PAGE_BYTES, int(n * scale) // PAGE_BYTES * PAGE_BYTES)


def scale_text(scale: float) -> str:
    """1/128 for 0.0078125; else the number."""
    inv = 1 / scale
    return f"1/{round(inv)}" if abs(inv - round(inv)) < 1e-9 else f"{scale:g}"


def tenant_role(t: TenantSpec) -> str:
    """``idle`` (no trace nor command: a footprint only), ``lender`` (its GPU's role is lender, or it runs in
    the background until the others finish: its cost is measured), else ``harvester`` (its speedup is)."""
    if not t.trace and not t.command:
        return "idle"
    if t.steps == 0 or dict(t.gpu_settings).get("role") == "lender":
        return "lender"
    return "harvester"


def sweep_changes_workload(spec: ExperimentSpec) -> bool:
    """A tenant or node sweep: every policy and ideal runs at every value (and alone baselines per value)."""
    return spec.sweep is not None and spec.sweep.key.startswith(("tenant.", "node."))


def plan(spec: ExperimentSpec) -> list[PlannedRun]:
    runs: list[PlannedRun] = []
    values: list[Any] = list(spec.sweep.values) if spec.sweep else [None]
    node_sweep = spec.sweep is not None and spec.sweep.key.startswith("node.")
    for rep in range(spec.repetitions):
        if spec.ideal:
            ideal_values = values if sweep_changes_workload(spec) else [None]
            for v in ideal_values:
                runs.append(PlannedRun(RunKey("ideal", v, rep), None))
        for v in values:
            for p in spec.policies:
                swept = spec.sweep is not None and (node_sweep or p.name in spec.sweep.policies)
                if spec.sweep is not None and not swept and v != values[0]:
                    continue  # an unswept policy runs once, listed under the first value
                runs.append(PlannedRun(RunKey(p.name, v if swept or spec.sweep is None else values[0], rep), p))
    return runs


def with_sweep_value(spec: ExperimentSpec, value: Any) -> list[TenantSpec]:
    """The tenants with a tenant.NAME.static|steps sweep point applied."""
    out = list(spec.tenants)
    sweep = spec.sweep
    if sweep and sweep.key.startswith("tenant.") and value is not None:
        _, name, field = sweep.key.split(".")
        for i, t in enumerate(out):
            if t.name == name:
                if field == "static":
                    out[i] = replace(t, static_bytes=parse_size(value) if isinstance(value, str) else value)
                else:
                    out[i] = replace(t, steps=int(value))
    return out


def node_config(spec: ExperimentSpec, value: Any = None) -> Any:
    """The node's shape (a :class:`huvmlab.sim.config.NodeConfig`) at a sweep value: the simulated node, or for
    an emulated node the preset's topology over ``gpus`` software GPUs of ``fb_mib`` each (reserve: the
    software GPU's RM share, :data:`huvmlab.experiment.spec.EMULATED_RESERVED_BYTES`, unless
    ``gpu_reserved_bytes`` says otherwise). Errors name the file, line and key (``sweep.values[i]`` for a
    node sweep value)."""
    from ..sim.config import NodeConfig
    from ..sim.errors import SimConfigError

    table: dict[str, Any] = {"preset": spec.node_preset, **spec.node_options}
    if spec.emulated is not None:
        table = {"gpu_reserved_bytes": EMULATED_RESERVED_BYTES, **table, "gpu_count": spec.emulated.gpus,
                 "gpu_memory_bytes": spec.emulated.fb_bytes}
    sweep = spec.sweep
    index: int | None = None
    if value is not None and sweep is not None and sweep.key.startswith("node."):
        index = list(sweep.values).index(value)
        table[sweep.key.split(".", 1)[1]] = value
    try:
        return NodeConfig.from_dict(table)
    except SimConfigError as exc:
        if index is not None:
            assert sweep is not None
            raise spec.doc.error(f"{sweep.key} = {value!r}: {exc.reason}", "sweep", "values", str(index)) from None
        raise spec.doc.error(exc.reason, "node", *(exc.path or ("preset",))) from None


def sweep_points(spec: ExperimentSpec) -> list[Any]:
    """The values at which the node or the tenants differ (None: the file's own)."""
    if spec.sweep is None or not sweep_changes_workload(spec):
        return [None]
    return [None, *spec.sweep.values] if spec.sweep.key.startswith("tenant.") else list(spec.sweep.values)


def check_tenants(spec: ExperimentSpec, config: Any = None) -> None:
    """Refuse, before anything runs, tenants the node cannot hold, at the file's values and at every sweep
    value that changes the node or the tenants: a GPU index beyond the node, or static footprints that do
    not fit. A tenant's static bytes (scaled on an emulated node) are pinned in whole 2 MiB chunks for the
    whole run, so on each GPU their sum must fit the usable memory (capacity less the reserve), with a
    chunk to spare when a tenant there runs a trace. ``config``: the node at the file's values (default:
    built from the spec)."""
    sweep = spec.sweep
    scale = spec.emulated.scale if spec.emulated is not None else 1.0
    for value in sweep_points(spec):
        cfg = config if value is None and config is not None else node_config(spec, value)
        tenants = with_sweep_value(spec, value)
        node_value = value is not None and sweep is not None and sweep.key.startswith("node.")

        def refuse(msg: str, t: TenantSpec, key: str, value: Any = value, node_value: bool = node_value) -> None:
            if value is None or sweep is None:
                raise ConfigError(msg, file=spec.path, line=t.key_line(spec.doc, key), key=f"tenant[{t.index}].{key}")
            where: tuple[str, ...] = ("sweep", "values", str(list(sweep.values).index(value))) if node_value \
                else ("sweep", "values")
            raise spec.doc.error(f"{sweep.key} = {value!r}: {msg}", *where)

        for t in tenants:
            for g in (t.gpus or (t.gpu,)):
                if g >= cfg.gpu_count:
                    refuse(f"GPU {g} is not in 0..{cfg.gpu_count - 1} of {cfg.name}", t, "gpus" if t.gpus else "gpu")

        def chunks(t: TenantSpec) -> int:
            n = scale_bytes(t.static_bytes, scale)
            return (n + CHUNK_BYTES - 1) // CHUNK_BYTES * CHUNK_BYTES

        for gpu in range(cfg.gpu_count):
            usable = int(cfg.usable_bytes(gpu))
            on_gpu = [t for t in tenants if t.gpu == gpu]
            traced = [t for t in on_gpu if t.trace or t.command]
            limit = usable - (CHUNK_BYTES if traced else 0)
            pinned = sum(chunks(t) for t in on_gpu)
            if pinned <= limit:
                continue
            total = 0
            culprit = on_gpu[0]
            for culprit in on_gpu:  # the tenant whose static footprint goes over
                total += chunks(culprit)
                if total > limit:
                    break
            g = cfg.gpus[gpu]
            room = (f"more than its usable {format_size(usable)} ({format_size(g.memory_bytes)} less "
                    f"{format_size(g.reserved_bytes)} reserved)" if pinned > usable else
                    f"all of its usable memory, none left for tenant {traced[0].name!r}'s trace")
            scaled = f" (scaled by {scale_text(scale)})" if scale != 1.0 else ""
            refuse(f"static footprints on GPU {gpu} add up to {format_size(pinned)}{scaled}: {room}", culprit,
                   "static")


def policy_settings(spec: ExperimentSpec, run: PlannedRun, info: NodeInfo) -> tuple[str, list[Setting]]:
    """(base preset, settings) of a run's policy, checked against the node: the tenants' GPU roles and
    lending limits (not under stock), then the policy's own table, then the sweep point."""
    assert run.policy is not None
    p = run.policy
    pf = parse_policy_table(spec.doc, info, p.table) if p.table else None
    preset = (pf.preset if pf and pf.preset else None) or p.preset or "huvm"
    settings: list[Setting] = []

    def merge(new: list[Setting]) -> None:
        nonlocal settings
        keys = {x.key for x in new}
        settings = [s for s in settings if s.key not in keys] + new

    if preset != "stock":
        for t in spec.tenants:
            for k, v in t.gpu_settings:
                origin = Origin(spec.path, t.key_line(spec.doc, k))
                merge(parse_setting(f"gpu.{t.gpu}.{k}", v, info, origin))
    if pf is not None:
        merge(list(pf.settings))
    sweep = spec.sweep
    policy_sweep = sweep is not None and not sweep.key.startswith(("tenant.", "node."))
    if sweep and policy_sweep and p.name in sweep.policies and run.key.sweep_value is not None:
        point = sweep.settings[list(sweep.values).index(run.key.sweep_value)]
        for key, value in point.items():
            merge(parse_setting(key, value, info, Origin(spec.path, spec.doc.line("sweep", "values"))))
    return preset, settings


def counter_rows(key: RunKey, stats: Any) -> list[CounterRow]:
    """GET_STATS counters (a :class:`huvm.stats.StatsSnapshot`, or a StatsDelta over a run) as rows."""
    out: list[CounterRow] = []
    for g in stats.gpus:
        for m in GPU_METRICS:
            v = g.values[m.field]
            if isinstance(v, tuple):
                for name, x in zip(m.label_values, v, strict=False):
                    out.append(CounterRow(key, "gpu", g.gpu, -1, f"{m.field}.{name}", int(x)))
            else:
                out.append(CounterRow(key, "gpu", g.gpu, -1, m.field, int(v)))
    for p in stats.pairs:
        for m in PAIR_METRICS:
            out.append(CounterRow(key, "pair", p.owner, p.holder, m.field, int(p.values[m.field])))
    return out


def traffic_rows(key: RunKey, stats: Any, gpu_count: int) -> list[TrafficRow]:
    """Bytes per path from the module's counters (the simulator measures them on its links instead):
    host_to_gpu / gpu_to_host per GPU (bytes_from_host / bytes_to_host), gpu_to_gpu per pair (the pair's
    evicted, fetched-back and prefetched chunks, 2 MiB each: eviction owner -> holder, fetch-back holder ->
    owner; host-to-peer prefetches count on host_to_gpu of the holder). remote_read is 0: the module does
    not count remote accesses in bytes."""
    out: list[TrafficRow] = []
    gpus = {g.gpu: g for g in stats.gpus}
    for a in range(gpu_count):
        g = gpus.get(a)
        out.append(TrafficRow(key, "host_to_gpu", "host", str(a), g.scalar("bytes_from_host") if g else 0))
        out.append(TrafficRow(key, "gpu_to_host", str(a), "host", g.scalar("bytes_to_host") if g else 0))
    pair = {(p.owner, p.holder): p for p in stats.pairs}
    for a in range(gpu_count):
        for b in range(gpu_count):
            if a == b:
                continue
            there, back = pair.get((a, b)), pair.get((b, a))
            moved = (there.values["evict_chunks"] if there else 0) + (back.values["fetch_chunks"] if back else 0)
            out.append(TrafficRow(key, "gpu_to_gpu", str(a), str(b), moved * CHUNK_BYTES))
            out.append(TrafficRow(key, "remote_read", str(a), str(b), 0))
    return out


class Executor(abc.ABC):
    """Runs an experiment's planned runs on one kind of node (see the module's docstring)."""

    kind: ClassVar[str] = ""
    supports_ideal: ClassVar[bool] = True
    supports_alone: ClassVar[bool] = True
    #: where ``[record] events`` come from on this node (huvm.bpf.Tracer's mode): the in-process simulator's
    #: USDT probes, or the kernel's tracepoints and kprobes; None: this executor does not record itself
    record_mode: ClassVar[str | None] = "tracepoint"

    def __init__(self, spec: ExperimentSpec, outdir: Path | None = None) -> None:
        self.spec = spec
        self.outdir = outdir
        self._configs: dict[str, Any] = {}
        self.config = self.config_for(None)
        self._traces: dict[str, Any] = {}

    # -- shared rules --
    def config_for(self, value: Any) -> Any:
        """The node's shape at a sweep value (the file's own for None or a sweep that does not change it)."""
        node_sweep = self.spec.sweep is not None and self.spec.sweep.key.startswith("node.")
        k = str(value) if node_sweep and value is not None else ""
        if k not in self._configs:
            self._configs[k] = node_config(self.spec, value if k else None)
        return self._configs[k]

    def tenants(self, value: Any) -> list[TenantSpec]:
        """The tenants at a sweep value (static bytes as written: an emulated node scales them itself)."""
        return with_sweep_value(self.spec, value)

    def trace(self, t: TenantSpec) -> Any:
        """t's trace (:class:`huvmlab.traces.Trace`), loaded once; None for a tenant without one."""
        if not t.trace:
            return None
        if t.trace not in self._traces:
            from .. import traces

            try:
                self._traces[t.trace] = traces.load(traces.resolve(t.trace))
            except (traces.TraceFormatError, ConfigError, OSError) as exc:
                msg = exc.reason if isinstance(exc, ConfigError) else str(exc)
                raise ConfigError(f"tenant {t.name!r}: {msg}", file=self.spec.path,
                                  line=t.key_line(self.spec.doc, "trace"), key=f"tenant[{t.index}].trace") from None
        return self._traces[t.trace]

    def policy_settings(self, run: PlannedRun, info: NodeInfo) -> tuple[str, list[Setting]]:
        return policy_settings(self.spec, run, info)

    def planned(self) -> list[PlannedRun]:
        """The runs this executor will run: :func:`plan`, less the ideal runs where it has none."""
        runs = plan(self.spec)
        return runs if self.supports_ideal else [r for r in runs if r.policy is not None]

    def result(self) -> ExperimentResult:
        """An empty result for this experiment on this node."""
        spec = self.spec
        return ExperimentResult(spec.name, spec.description, str(self.config.name),
                                spec.sweep.key if spec.sweep else None)

    # -- what an executor implements --
    def check(self) -> None:
        """Refuse before anything runs; the base class loads every trace and checks the tenants fit."""
        for t in self.spec.tenants:
            self.trace(t)
        check_tenants(self.spec, self.config)
        if self.spec.record_events and self.record_mode is not None:
            self.check_recording()

    def check_recording(self) -> None:
        """``[record] events`` can be recorded here (bcc, root; the module's tracepoints or functions)."""
        from huvm import bpf

        bpf.check_can_trace()
        if self.record_mode == "tracepoint":
            names = self.spec.record_events
            if any(not bpf.is_uvm_event(n) for n in names) and not bpf.tracepoints_present():
                raise bpf.TracingUnavailable("[record] events: no huvm tracepoints (the patched nvidia-uvm is not "
                                             "loaded)", reason="no-tracepoints")
            bpf.check_kprobes(names)

    def start_recording(self) -> Any:
        """A started :class:`huvmlab.tracerec.RunRecorder` for ``[record] events``, or None."""
        if not self.spec.record_events or self.record_mode is None:
            return None
        from ..tracerec import RunRecorder

        mode: Any = self.record_mode
        return RunRecorder(self.spec.record_events, mode).start()

    def adjust_events(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Recorded rows as the experiment names GPUs (the default: as recorded)."""
        return rows

    @abc.abstractmethod
    def record(self) -> NodeRecord: ...

    @abc.abstractmethod
    def run_one(self, run: PlannedRun) -> RunResult: ...

    def run_alone(self, t: TenantSpec, value: Any, horizon_ns: int) -> TenantRow | None:
        """t alone on the node under stock (its slowdown's baseline); None where the node cannot."""
        return None

    def execute(self, planned: Sequence[PlannedRun], progress: Progress | None = None) -> ExperimentResult:
        """Every planned run (progress(run, index, total) before each), then the alone baselines; each run
        records the node."""
        res = self.result()
        node = self.record().to_dict()
        recorder = self.start_recording()
        try:
            for i, p in enumerate(planned):
                if progress:
                    progress(p, i, len(planned))
                if recorder is not None:
                    recorder.cut()  # what happened between runs is no run's
                try:
                    r = self.run_one(p)
                except (UsageError, DeviceUnavailable):
                    raise
                except HuvmError as exc:
                    exc.args = (f"run {p.key.run_id}: {exc}", *exc.args[1:])  # the same type, the run named
                    raise
                if recorder is not None:
                    seg = recorder.cut()
                    window = r.events.window_ns if r.events is not None else None
                    r.events = RunEvents(self.adjust_events(seg.rows), seg.lost, seg.counts, seg.source, window)
                r.node = dict(node)
                res.runs.append(r)
        finally:
            if recorder is not None:
                recorder.close()
        if self.supports_alone:
            self.alone_runs(res)
        self.add_notes(res)
        return res

    def add_notes(self, res: ExperimentResult) -> None:
        from .recording import notes

        res.notes.extend(notes(res, self.spec.record_events))
        rec = self.record()
        if self.spec.ideal and not self.supports_ideal:
            res.notes.append(f"no ideal (unlimited-memory) run on a {rec.kind} node: `x ideal` is not measured")
        if not self.supports_alone:
            res.notes.append(f"no alone runs on a {rec.kind} node: lender slowdowns are not measured")
        if rec.scale != 1.0 and self.spec.emulated is not None:
            base = node_config(replace(self.spec, emulated=None, node_options={}))
            res.notes.append(f"every trace's bytes and working sets and every static footprint are scaled by "
                             f"{scale_text(rec.scale)} ({self.spec.emulated.fb_mib} MiB per emulated GPU against "
                             f"{format_size(base.gpus[0].memory_bytes)} on {base.name})")
        if rec.kind == "emulated" and self.spec.emulated is not None and self.spec.emulated.time_scale != 1.0:
            res.notes.append(f"every trace's compute times (op durations) are scaled by "
                             f"{scale_text(self.spec.emulated.time_scale)}")
        if self.spec.repetitions > 1 and self.kind == "sim":
            res.notes.append(f"{self.spec.repetitions} repetitions: the simulator is deterministic, so repetitions "
                             "agree exactly (they check it)")

    def alone_runs(self, res: ExperimentResult) -> None:
        """Each tenant with work alone on the node (stock), once, or per sweep value when the sweep changes
        the node or the tenants. A background tenant's throughput depends on the window it is measured over
        (a lender that rises at 30 s), so it runs alone once per run, for as long as that run's foreground
        lasted (``alone[(tenant, value, run_id)]``); ``alone[(tenant, value)]`` is the stock run's window."""
        spec = self.spec
        per_value = sweep_changes_workload(spec)
        assert spec.sweep is not None or not per_value
        for value in (list(spec.sweep.values) if spec.sweep and per_value else [None]):
            runs = [r for r in res.runs if value is None or r.key.sweep_value == value]
            stock = [r for r in runs if r.key.policy == "stock"]
            horizon = max((r.foreground_runtime_ns() for r in (stock or runs)), default=0) or 1_000_000_000
            for t in with_sweep_value(spec, value):
                if not t.trace and not t.command:
                    continue
                base = self.run_alone(t, value, horizon)
                if base is None:
                    continue
                res.alone[(t.name, value)] = base
                if t.steps == 0:
                    windows: dict[int, TenantRow] = {horizon: base}
                    for r in runs:
                        h = r.foreground_runtime_ns() or horizon
                        if h not in windows:
                            alone = self.run_alone(t, value, h)
                            if alone is None:
                                continue
                            windows[h] = alone
                        res.alone[(t.name, value, r.key.run_id)] = windows[h]

    def close(self) -> None:
        return None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

