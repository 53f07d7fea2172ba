"""Run an experiment: pick the executor of its node kind (:mod:`huvmlab.experiment.executor`, which holds
the executor interface), check everything, run every planned run.

:class:`Runner` is the simulated node's executor (``kind = "sim"``). Each run builds a fresh
:class:`huvmlab.sim.node.SimNode` with the policy's base preset (at the run's sweep value for a node sweep), then
applies the policy's settings through the same control path as ``huvmctl policy apply`` (validated by the
core, sent as one SET_POLICY through the node's ioctl), adds the tenants, runs to completion and reads the
results: tenant outcomes, GET_STATS counters, traffic per path and memory samples. The simulator is
deterministic, so the same file gives the same numbers.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from huvm.errors import ConfigError
from huvm.node import Node
from huvm.policy import Setting

from ..sim.backend import SimBackend
from .executor import (
    Executor,
    NodeRecord,
    PlannedRun,
    Progress,
    check_tenants,
    counter_rows,
    module_version,
    plan,
    tenant_role,
    with_sweep_value,
)
from .results import ExperimentResult, RunKey, RunResult, SampleRow, TenantRow, TrafficRow
from .spec import ExperimentSpec, TenantSpec

__all__ = ["PlannedRun", "Progress", "Runner", "check_tenants", "plan", "run", "run_to", "tenant_role"]

_with_sweep_value = with_sweep_value  # the name this module had


class Runner(Executor):
    """The simulated node's executor."""

    kind = "sim"
    record_mode: ClassVar[str | None] = "usdt"  # [record] events: the simulator's USDT probes, in this process

    def __init__(self, spec: ExperimentSpec, outdir: Path | None = None) -> None:
        self.check_node(spec)
        super().__init__(spec, outdir)
        check_tenants(spec, self.config)
        self._sim_traces: dict[tuple[str, str], Any] = {}
        self._record: NodeRecord | None = None

    def check_node(self, spec: ExperimentSpec) -> None:
        """Refuse a node this executor does not simulate (before anything is built)."""
        if spec.node_kind != "sim":
            raise ConfigError(f"a {spec.node_kind} node is not the simulated node (huvmctl experiment run runs it "
                              "on its own node)", file=spec.path, line=spec.doc.line("node", "kind"), key="node.kind")
        if spec.real_node:
            raise ConfigError("node.preset = \"real\" is not a simulated node: for commands on this machine's "
                              "GPUs use node.kind = \"local\"",
                              file=spec.path, line=spec.doc.line("node", "preset"), key="node.preset")

    # -- inputs --
    def _trace(self, t: TenantSpec, config: Any = None) -> Any:
        """t's trace as the simulator's events for the node's GPU model."""
        tr = self.trace(t)
        if tr is None:
            return None
        gpu_preset = (config or self.config).gpu_preset
        if (t.trace, gpu_preset) not in self._sim_traces:
            from .. import traces

            try:
                self._sim_traces[(t.trace, gpu_preset)] = tr.to_sim_events(gpu_preset)
            except (traces.TraceFormatError, ConfigError) as exc:
                msg = exc.reason if isinstance(exc, ConfigError) else str(exc)
                raise ConfigError(f"tenant {t.name!r}: {msg}", file=self.spec.path,
                                  line=t.key_line(self.spec.doc, "trace"), key=f"tenant[{t.index}].trace") from None
        return self._sim_traces[(t.trace, gpu_preset)]

    def _tenants(self, value: Any) -> list[TenantSpec]:
        return self.tenants(value)

    def _settings(self, node: Node, run: PlannedRun) -> tuple[str, list[Setting]]:
        return self.policy_settings(run, node.info())

    def _sim_tenant(self, t: TenantSpec, config: Any) -> Any:
        from ..sim.tenants import TenantSpec as SimTenant

        return SimTenant(gpu=t.gpu, trace=self._trace(t, config), name=t.name, steps=max(t.steps, 1),
                         background=t.steps == 0, static_bytes=t.static_bytes, start_ns=t.start_ns, managed=t.managed)

    # -- one run --
    def prepare(self, run: PlannedRun) -> tuple[Any, Node, list[TenantSpec], dict[str, str]]:
        """A simulated node set up for run (policy applied, tenants added, not yet run): (SimNode, Node over
        it, the tenants, the policy's settings as shown by `policy show`)."""
        from ..sim.node import SimNode

        ideal = run.policy is None
        base = "stock" if ideal else (run.policy.preset if run.policy and run.policy.preset else "huvm")
        config = self.config_for(run.key.sweep_value)
        sim = SimNode(config, preset=base, unlimited=ideal)
        node = Node(SimBackend(sim))
        try:
            settings_desc: dict[str, str] = {}
            if not ideal:
                preset, settings = self._settings(node, run)
                node.apply(settings, preset=preset)
                settings_desc = node.get_policy().settings(node.info())
            tenants = self._tenants(run.key.sweep_value)
            for t in tenants:
                sim.add_tenant(self._sim_tenant(t, config))
        except BaseException:
            node.close()
            raise
        return sim, node, tenants, settings_desc

    def check(self) -> None:
        """Load every trace and validate every run's policy against the node, before anything runs."""
        from ..sim.node import SimNode

        super().check()
        for t in self.spec.tenants:
            self._trace(t)
        seen: set[tuple[str, str]] = set()
        for run in self.runs():
            if run.policy is None or (run.policy.name, str(run.key.sweep_value)) in seen:
                continue
            seen.add((run.policy.name, str(run.key.sweep_value)))
            config = self.config_for(run.key.sweep_value)
            for t in self.spec.tenants:
                self._trace(t, config)
            base = run.policy.preset or "huvm"
            node = Node(SimBackend(SimNode(config, preset=base)))
            try:
                preset, settings = self._settings(node, run)
                node.plan(settings, preset=preset)
            finally:
                node.close()

    def record(self) -> NodeRecord:
        if self._record is None:
            from ..sim.node import SimNode

            with Node(SimBackend(SimNode(self.config, preset="stock", sample_interval_ns=0))) as node:
                info = node.info()
            self._record = NodeRecord("sim", module_version(info, simulated=True), self.spec.node_preset, 1.0,
                                      self.config.gpu_count)
        return self._record

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
        res.counters.extend(counter_rows(run.key, node.stats()))
        tr = sim.traffic()
        n = self.config_for(run.key.sweep_value).gpu_count
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
        config = self.config_for(value)
        with SimNode(config, preset="stock", sample_interval_ns=0) as sim:
            sim.add_tenant(self._sim_tenant(t, config))
            if t.steps == 0:
                # a foreground clock of short empty ops: background tenants stop when the foreground is done
                sim.add_tenant(SimTenant(gpu=t.gpu, trace=horizon_trace(horizon_ns), name="horizon"))
            sim.run()
            r = sim.tenant_result(0)
        values = {k: int(v) for k, v in r.items() if k != "runtime_ns"}
        return TenantRow(key, t.name, t.gpu, t.steps > 0, int(r["runtime_ns"]), values, tenant_role(t))


def run(spec: ExperimentSpec, progress: Callable[[PlannedRun, int, int], None] | None = None,
        outdir: Path | None = None, node: str | None = None) -> ExperimentResult:
    """Run every planned run on spec's node (progress(run, index, total) is called before each); outdir:
    the output folder, where a node keeps its own files (a local node's tenant logs), or None; node: another
    node than the file's (``"sim-twin"``: an emulated file on the simulator at its granularity,
    :mod:`huvmlab.experiment.twin`)."""
    with executor_for(spec, outdir, node) as ex:
        ex.check()
        return ex.execute(ex.planned(), progress)


#: executors of the node kinds that are not the simulator's (``[node] kind``: "emulated") and of ``--node``
#: (:func:`executor_for`: "sim-twin"), added by twin.py and by the package (huvmlab/experiment/__init__.py,
#: which imports emulated.py when an experiment asks for it), so runner.py never names them
KIND_EXECUTORS: dict[str, Callable[[ExperimentSpec, Path | None], Executor]] = {}
NODE_EXECUTORS: dict[str, Callable[[ExperimentSpec, Path | None], Executor]] = {}


def executor_for(spec: ExperimentSpec, outdir: Path | None = None, node: str | None = None) -> Executor:
    """The executor of spec's node kind, or of ``node`` (a key of :data:`NODE_EXECUTORS`: "sim-twin")."""
    if node is not None:
        if node not in NODE_EXECUTORS:
            raise ConfigError(f"unknown node {node!r} (one of: {', '.join(NODE_EXECUTORS)}; or none: the file's)")
        return NODE_EXECUTORS[node](spec, outdir)
    if spec.node_kind == "local":
        from .local import LocalExecutor

        return LocalExecutor(spec, outdir)
    if spec.node_kind in KIND_EXECUTORS:
        return KIND_EXECUTORS[spec.node_kind](spec, outdir)
    return Runner(spec, outdir)


def run_to(spec: ExperimentSpec, outdir: str | Path,
           progress: Callable[[PlannedRun, int, int], None] | None = None,
           node: str | None = None) -> tuple[ExperimentResult, list[Path]]:
    """Run spec and write outdir/: data/*.parquet|csv, plots/*.png, summary.json, report.md, the spec. node:
    another node than the file's (``"sim-twin"``, :func:`run`)."""
    out = Path(outdir)
    res = run(spec, progress, out, node)
    if out.exists():
        for sub in ("data", "plots"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    from .output import write
    from .plots import all_plots  # matplotlib: imported only where plots are drawn
    from .report import markdown

    files = write(res, out)
    files += all_plots(res, out)
    (out / "experiment.toml").write_text(spec.doc.text)
    files.append(out / "experiment.toml")
    report = out / "report.md"
    report.write_text(markdown(res, spec.doc.text, files, out))
    files.append(report)
    return res, files
