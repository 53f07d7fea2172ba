"""Run an experiment on the simulated node: one run per (sweep value, policy, repetition), plus ideal.

Each run builds a fresh :class:`huvm.sim.node.SimNode` with the policy's base preset, then applies the
policy's settings through the same control path as ``huvmctl policy apply`` (validated by the core, sent
as one SET_POLICY through the node's ioctl), adds the tenants, runs to completion and reads the results:
tenant outcomes, GET_STATS counters, traffic per path and memory samples. The simulator is deterministic,
so the same file gives the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, HuvmError, UsageError
from ..metrics import GPU_METRICS, PAIR_METRICS
from ..node import Node
from ..policy import Origin, Setting, parse_setting
from ..policyfile import parse as parse_policy_table
from ..sim.backend import SimBackend
from ..units import format_size, parse_size
from .results import CounterRow, ExperimentResult, RunKey, RunResult, SampleRow, TenantRow, TrafficRow
from .spec import ExperimentSpec, PolicySpec, TenantSpec

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PlannedRun:
    key: RunKey
    policy: PolicySpec | None  # None: the ideal run


def plan(spec: ExperimentSpec) -> list[PlannedRun]:
    runs: list[PlannedRun] = []
    values: list[Any] = list(spec.sweep.values) if spec.sweep else [None]
    for rep in range(spec.repetitions):
        if spec.ideal:
            ideal_values = values if spec.sweep and spec.sweep.key.startswith("tenant.") else [None]
            for v in ideal_values:
                runs.append(PlannedRun(RunKey("ideal", v, rep), None))
        for v in values:
            for p in spec.policies:
                swept = spec.sweep is not None and p.name in spec.sweep.policies
                if spec.sweep is not None and not swept and v != values[0]:
                    continue  # an unswept policy runs once, listed under the first value
                runs.append(PlannedRun(RunKey(p.name, v if swept or spec.sweep is None else values[0], rep), p))
    return runs


def check_tenants(spec: ExperimentSpec, config: Any) -> None:
    """Refuse, before anything runs, tenants the node cannot hold: a GPU index beyond the node, or static
    footprints that do not fit. The simulator pins (cudaMallocs) a tenant's static bytes, in whole 2 MiB
    chunks, for the whole run, so on each GPU their sum must fit the usable memory (capacity less the
    reserve), with a chunk to spare when a tenant there runs a trace; every sweep point is checked too."""
    for t in spec.tenants:
        if t.gpu >= config.gpu_count:
            raise ConfigError(f"GPU {t.gpu} is not in 0..{config.gpu_count - 1} of {config.name}",
                              file=spec.path, line=t.key_line(spec.doc, "gpu"), key=f"tenant[{t.index}].gpu")
    variants: list[tuple[Any, list[TenantSpec]]] = [(None, list(spec.tenants))]
    sweep = spec.sweep
    if sweep is not None and sweep.key.startswith("tenant.") and sweep.key.endswith(".static"):
        variants += [(v, _with_sweep_value(spec, v)) for v in sweep.values]
    from ..sim.config import CHUNK_BYTES as chunk

    def chunks(t: TenantSpec) -> int:
        return (t.static_bytes + chunk - 1) // chunk * chunk

    for value, tenants in variants:
        for gpu in range(config.gpu_count):
            usable = int(config.usable_bytes(gpu))
            on_gpu = [t for t in tenants if t.gpu == gpu]
            traced = [t for t in on_gpu if t.trace]
            limit = usable - (chunk if traced else 0)
            pinned = sum(chunks(t) for t in on_gpu)
            if pinned <= limit:
                continue
            total = 0
            for culprit in on_gpu:  # the tenant whose static footprint goes over
                total += chunks(culprit)
                if total > limit:
                    break
            g = config.gpus[gpu]
            room = (f"more than its usable {format_size(usable)} ({format_size(g.memory_bytes)} less "
                    f"{format_size(g.reserved_bytes)} reserved)" if pinned > usable else
                    f"all of its usable memory, none left for tenant {traced[0].name!r}'s trace")
            msg = f"static footprints on GPU {gpu} add up to {format_size(pinned)}: {room}"
            if value is None or sweep is None:
                raise ConfigError(msg, file=spec.path, line=culprit.key_line(spec.doc, "static"),
                                  key=f"tenant[{culprit.index}].static")
            raise spec.doc.error(f"{sweep.key} = {value!r}: {msg}", "sweep", "values")


def tenant_role(t: TenantSpec) -> str:
    """``idle`` (no trace: a footprint only), ``lender`` (its GPU's role is lender, or it runs in the
    background until the others finish: its cost is measured), else ``harvester`` (its speedup is)."""
    if not t.trace:
        return "idle"
    if t.steps == 0 or dict(t.gpu_settings).get("role") == "lender":
        return "lender"
    return "harvester"


def _with_sweep_value(spec: ExperimentSpec, value: Any) -> list[TenantSpec]:
    """The tenants with a tenant.NAME.static|steps sweep point applied."""
    from dataclasses import replace

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


class Runner:
    def __init__(self, spec: ExperimentSpec) -> None:
        if spec.real_node:
            raise ConfigError("experiments on a real node are not run by huvmctl (the workloads are real "
                              "programs); use node.preset = a simulated node preset",
                              file=spec.path, line=spec.doc.line("node", "preset"), key="node.preset")
        from ..sim.config import NodeConfig
        from ..sim.errors import SimConfigError

        self.spec = spec
        try:
            self.config = NodeConfig.from_dict({"preset": spec.node_preset, **spec.node_options})
        except SimConfigError as exc:
            raise spec.doc.error(exc.reason, "node", *(exc.path or ("preset",))) from None
        check_tenants(spec, self.config)
        self._traces: dict[str, Any] = {}

    # -- inputs --
    def _trace(self, t: TenantSpec) -> Any:
        if not t.trace:
            return None
        if t.trace not in self._traces:
            from .. import traces

            try:
                tr = traces.load(traces.resolve(t.trace))
                self._traces[t.trace] = tr.to_sim_events(self.config.gpu_preset)
            except (traces.TraceFormatError, ConfigError, OSError) as exc:
                msg = exc.reason if isinstance(exc, ConfigError) else str(exc)
                raise ConfigError(f"tenant {t.name!r}: {msg}", file=self.spec.path,
                                  line=t.key_line(self.spec.doc, "trace"), key=f"tenant[{t.index}].trace") from None
        return self._traces[t.trace]

    def _tenants(self, value: Any) -> list[TenantSpec]:
        return _with_sweep_value(self.spec, value)

    def _settings(self, node: Node, run: PlannedRun) -> tuple[str, list[Setting]]:
        """(base preset, settings) of a run's policy, checked against the simulated node: the tenants' GPU
        roles and lending limits (not under stock), then the policy's own table, then the sweep point."""
        assert run.policy is not None
        p = run.policy
        info = node.info()
        pf = parse_policy_table(self.spec.doc, info, p.table) if p.table else None
        preset = (pf.preset if pf and pf.preset else None) or p.preset or "huvm"
        settings: list[Setting] = []

        def merge(new: list[Setting]) -> None:
            nonlocal settings
            keys = {x.key for x in new}
            settings = [s for s in settings if s.key not in keys] + new

        if preset != "stock":
            for t in self.spec.tenants:
                for k, v in t.gpu_settings:
                    origin = Origin(self.spec.path, t.key_line(self.spec.doc, k))
                    merge(parse_setting(f"gpu.{t.gpu}.{k}", v, info, origin))
        if pf is not None:
            merge(list(pf.settings))
        sweep = self.spec.sweep
        policy_sweep = sweep is not None and not sweep.key.startswith("tenant.")
        if sweep and policy_sweep and p.name in sweep.policies and run.key.sweep_value is not None:
            point = sweep.settings[list(sweep.values).index(run.key.sweep_value)]
            for key, value in point.items():
                merge(parse_setting(key, value, info, Origin(self.spec.path, self.spec.doc.line("sweep", "values"))))
        return preset, settings

    # -- one run --
    def prepare(self, run: PlannedRun) -> tuple[Any, Node, list[TenantSpec], dict[str, str]]:
        """A simulated node set up for run (policy applied, tenants added, not yet run): (SimNode, Node over
        it, the tenants, the policy's settings as shown by `policy show`)."""
        from ..sim.node import SimNode
        from ..sim.tenants import TenantSpec as SimTenant

        ideal = run.policy is None
        base = "stock" if ideal else (run.policy.preset if run.policy and run.policy.preset else "huvm")
        sim = SimNode(self.config, preset=base, unlimited=ideal)
        node = Node(SimBackend(sim))
        try:
            settings_desc: dict[str, str] = {}
            if not ideal:
                preset, settings = self._settings(node, run)
                node.apply(settings, preset=preset)
                settings_desc = node.get_policy().settings(node.info())
            tenants = self._tenants(run.key.sweep_value)
            for t in tenants:
                sim.add_tenant(SimTenant(gpu=t.gpu, trace=self._trace(t), name=t.name, steps=max(t.steps, 1),
                                         background=t.steps == 0, static_bytes=t.static_bytes,
                                         start_ns=t.start_ns, managed=t.managed))
        except BaseException:
            node.close()
            raise
        return sim, node, tenants, settings_desc

    def check(self) -> None:
        """Load every trace and validate every run's policy against the node, before anything runs."""
        from ..sim.node import SimNode

        for t in self.spec.tenants:
            self._trace(t)
        seen: set[tuple[str, str]] = set()
        for run in self.runs():
            if run.policy is None or (run.policy.name, str(run.key.sweep_value)) in seen:
                continue
            seen.add((run.policy.name, str(run.key.sweep_value)))
            base = run.policy.preset or "huvm"
            node = Node(SimBackend(SimNode(self.config, preset=base)))
            try:
                preset, settings = self._settings(node, run)
                node.plan(settings, preset=preset)
            finally:
                node.close()

    def run_one(self, run: PlannedRun) -> RunResult:
        sim, node, tenants, settings_desc = self.prepare(run)
        try:
            sim.run()
            return self._collect(run, sim, node, tenants, settings_desc)
        finally:
            node.close()

    def _collect(self, run: PlannedRun, sim: Any, node: Node, tenants: list[TenantSpec],
                 settings: dict[str, str]) -> RunResult:
        res = RunResult(run.key, int(sim.now_ns), policy_settings=settings)
        for i, t in enumerate(tenants):
            r = sim.tenant_result(i)
            values = {k: int(v) for k, v in r.items() if k not in ("runtime_ns",)}
            res.tenants.append(TenantRow(run.key, t.name, t.gpu, t.steps > 0, int(r["runtime_ns"]), values,
                                         tenant_role(t)))
        snap = node.stats()
        for g in snap.gpus:
            for m in GPU_METRICS:
                v = g.values[m.field]
                if isinstance(v, tuple):
                    for name, x in zip(m.label_values, v, strict=False):
                        res.counters.append(CounterRow(run.key, "gpu", g.gpu, -1, f"{m.field}.{name}", x))
                else:
                    res.counters.append(CounterRow(run.key, "gpu", g.gpu, -1, m.field, v))
        for p in snap.pairs:
            for m in PAIR_METRICS:
                res.counters.append(CounterRow(run.key, "pair", p.owner, p.holder, m.field, p.values[m.field]))
        tr = sim.traffic()
        n = self.config.gpu_count
        for a in range(n):
            res.traffic.append(TrafficRow(run.key, "host_to_gpu", "host", str(a), int(tr["host_to_gpu"][a])))
            res.traffic.append(TrafficRow(run.key, "gpu_to_host", str(a), "host", int(tr["gpu_to_host"][a])))
            for b in range(n):
                if a != b:
                    res.traffic.append(TrafficRow(run.key, "gpu_to_gpu", str(a), str(b), int(tr["gpu_to_gpu"][a][b])))
                    res.traffic.append(TrafficRow(run.key, "remote_read", str(a), str(b),
                                                  int(tr["remote_read"][a][b])))
        smp = sim.samples()
        for i, t_ns in enumerate(smp["t_ns"].tolist()):
            for k in range(n):
                res.samples.append(SampleRow(run.key, int(t_ns), k, int(smp["own_bytes"][i][k]),
                                             int(smp["guest_bytes"][i][k]), int(smp["free_bytes"][i][k]),
                                             int(smp["peer_bytes"][i][k]), int(smp["host_bytes"][i][k])))
        return res

    def runs(self) -> list[PlannedRun]:
        return plan(self.spec)

    def run_alone(self, t: TenantSpec, value: Any, horizon_ns: int) -> TenantRow:
        """Tenant t alone on the node under stock: its own speed, the baseline of its slowdown. A tenant that
        runs until the others finish is stopped after ``horizon_ns`` (its throughput is what counts)."""
        from ..sim.node import SimNode
        from ..sim.tenants import TenantSpec as SimTenant
        from ..sim.workloads import horizon_trace

        key = RunKey("alone", value, 0)
        with SimNode(self.config, preset="stock", sample_interval_ns=0) as sim:
            sim.add_tenant(SimTenant(gpu=t.gpu, trace=self._trace(t), name=t.name, steps=max(t.steps, 1),
                                     background=t.steps == 0, static_bytes=t.static_bytes, start_ns=t.start_ns,
                                     managed=t.managed))
            if t.steps == 0:
                # a foreground clock of short empty ops: background tenants stop when the foreground is done
                sim.add_tenant(SimTenant(gpu=t.gpu, trace=horizon_trace(horizon_ns), name="horizon"))
            sim.run()
            r = sim.tenant_result(0)
        values = {k: int(v) for k, v in r.items() if k != "runtime_ns"}
        return TenantRow(key, t.name, t.gpu, t.steps > 0, int(r["runtime_ns"]), values, tenant_role(t))


def run(spec: ExperimentSpec, progress: Callable[[PlannedRun, int, int], None] | None = None) -> ExperimentResult:
    """Run every planned run; progress(run, index, total) is called before each."""
    runner = Runner(spec)
    runner.check()
    planned = runner.runs()
    res = ExperimentResult(spec.name, spec.description, runner.config.name, spec.sweep.key if spec.sweep else None)
    for i, p in enumerate(planned):
        if progress:
            progress(p, i, len(planned))
        try:
            res.runs.append(runner.run_one(p))
        except UsageError:
            raise
        except HuvmError as exc:
            raise HuvmError(f"run {p.key.run_id}: {exc}", status=exc.status) from exc
    _alone_runs(runner, res)
    if spec.repetitions > 1:
        res.notes.append(f"{spec.repetitions} repetitions: the simulator is deterministic, so repetitions agree "
                         "exactly (they check it)")
    return res


def _alone_runs(runner: Runner, res: ExperimentResult) -> None:
    """Each tenant with a trace alone on the node (stock), once, or per sweep value when the sweep changes
    the tenants. A background tenant's throughput depends on the window it is measured over (a lender that
    rises at 30 s), so it runs alone once per run, for as long as that run's foreground lasted
    (``alone[(tenant, value, run_id)]``); ``alone[(tenant, value)]`` is the stock run's window."""
    spec = runner.spec
    tenant_sweep = spec.sweep is not None and spec.sweep.key.startswith("tenant.")
    for value in (list(spec.sweep.values) if spec.sweep and tenant_sweep else [None]):
        runs = [r for r in res.runs if value is None or r.key.sweep_value == value]
        stock = [r for r in runs if r.key.policy == "stock"]
        horizon = max((r.foreground_runtime_ns() for r in (stock or runs)), default=0) or 1_000_000_000
        for t in _with_sweep_value(spec, value):
            if not t.trace:
                continue
            res.alone[(t.name, value)] = base = runner.run_alone(t, value, horizon)
            if t.steps == 0:
                windows: dict[int, TenantRow] = {horizon: base}
                for r in runs:
                    h = r.foreground_runtime_ns() or horizon
                    if h not in windows:
                        windows[h] = runner.run_alone(t, value, h)
                    res.alone[(t.name, value, r.key.run_id)] = windows[h]
