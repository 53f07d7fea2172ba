"""The simulated twin of an emulated experiment: the same file (``[node] kind = "emulated"``) run on the
simulator at the emulated node's granularity (``huvmctl experiment run FILE --node sim-twin``).

On the emulated node at scale 1/k a trace's 2 MiB chunk is 2 MiB / k, so one UVM 2 MiB block holds k of them
and UVM moves and counts whole blocks (docs/simulator.md, "Cross-check against the emulated node"). The twin
runs the simulator at that granularity, everything derived from the file's emulated ``[node]``:

- k = 1 / ``scale``, refused unless a trace chunk is a whole 1/k of a 2 MiB block (scale 1/8, 1/16, ...);
- the node: ``preset``'s topology over ``gpus`` GPUs of ``fb_mib`` each, less the software GPU's RM reserve
  (:data:`huvmlab.experiment.spec.EMULATED_RESERVED_BYTES`, what ``huvm-softgpu.ko`` keeps: the emulated node's
  usable memory whatever ``gpu_reserved_bytes`` says);
- every trace coarsened to k chunks per chunk (:func:`huvmlab.sim.workloads.coarsen`), static footprints scaled
  as the emulated node scales them (whole 2 MiB pieces);
- compute times as recorded: ``time_scale`` only shortens the replay in qemu, where every fault costs the
  emulator's time; the simulator's fault and copy costs are a V100's, so scaling compute would not bring
  back the emulated node's ratio of compute to paging either (docs/experiments.md: on the shipped
  two-harvesters file stock counts the same either way, the peer-tier presets 4-10 % fewer evictions with
  it);
- the counts, in blocks as on the module, reported in chunk equivalents: every counter in chunks, bytes or
  faults, the traffic, the memory samples and the tenants' chunk counts times k. The runs record
  ``scale = 1`` (full size) and ``granularity = k``, so ``huvmctl experiment compare TWIN EMULATED`` divides
  only the emulated side by its scale and both are in chunk equivalents at the same granularity.

``[record]`` is not recorded on the twin (its events would count blocks, its counters chunk equivalents).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from huvm.errors import ConfigError
from huvm.metrics import GPU_METRICS, PAIR_METRICS
from huvm.node import Node
from huvm.units import format_size

from .executor import CHUNK_BYTES, NodeRecord, PlannedRun, node_config, scale_bytes, scale_text
from .results import ExperimentResult, RunResult, SampleRow, TenantRow
from .runner import NODE_EXECUTORS, Runner
from .spec import EMULATED_RESERVED_BYTES, ExperimentSpec, TenantSpec

#: ``huvmctl experiment run --node``: where to run an experiment other than its file's node
NODE_CHOICES = ("sim-twin",)
#: units of the module's counters that count data (chunks, bytes) or faulted chunks: times k on the twin
SCALED_UNITS = ("chunks", "bytes", "faults")
#: the simulator's per-tenant outcomes that count chunks: times k on the twin
SCALED_TENANT_VALUES = ("touches", "faults", "first_touches", "remote_touches", "resident_chunks", "peer_chunks",
                        "host_chunks")
_SCALED_METRICS = frozenset(m.field for m in (*GPU_METRICS, *PAIR_METRICS) if m.unit in SCALED_UNITS)


def granularity(spec: ExperimentSpec) -> int:
    """k: the trace chunks per UVM 2 MiB block of spec's emulated node (scale 1/k). A ConfigError naming
    ``node.scale`` when a trace chunk there is not a whole 1/k of a block, or the node is not emulated."""
    if spec.emulated is None:
        raise ConfigError(f"the simulated twin is of an emulated node (node.kind = \"emulated\"), not of a "
                          f"{spec.node_kind} node", file=spec.path, line=spec.doc.line("node", "kind"),
                          key="node.kind")
    scale = spec.emulated.scale
    chunk = scale_bytes(CHUNK_BYTES, scale)
    k = CHUNK_BYTES // chunk
    if CHUNK_BYTES % chunk or abs(scale * k - 1.0) > 1e-9:
        raise ConfigError(f"scale {scale_text(scale)} makes a trace chunk {format_size(chunk)} (whole pages), not "
                          "a whole fraction of a 2 MiB block: the simulated twin needs scale 1/k with k dividing "
                          "512 (1/8, 1/16, 1/32, ...)", file=spec.path, line=spec.doc.line("node", "scale"),
                          key="node.scale")
    return k


def twin_node(spec: ExperimentSpec) -> Any:
    """The twin's node (:class:`huvmlab.sim.config.NodeConfig`): the emulated node's shape, each GPU's usable
    memory as the module has it (fb_mib less the software GPU's RM reserve)."""
    return node_config(replace(spec, node_options={**spec.node_options,
                                                   "gpu_reserved_bytes": EMULATED_RESERVED_BYTES}))


class SimTwin(Runner):
    """The simulated node at an emulated experiment's granularity (see the module's doc)."""

    record_mode = None  # [record] is not recorded on the twin (noted in the report)

    def check_node(self, spec: ExperimentSpec) -> None:
        self.k = granularity(spec)

    def config_for(self, value: Any) -> Any:
        if "" not in self._configs:
            self._configs[""] = twin_node(self.spec)
        return self._configs[""]

    def _trace(self, t: TenantSpec, config: Any = None) -> Any:
        from ..sim.workloads import coarsen

        gpu_preset = (config or self.config).gpu_preset
        key = (f"{t.trace}/{self.k}", gpu_preset)
        if key not in self._sim_traces:
            base = super()._trace(t, config)
            self._sim_traces[key] = None if base is None else coarsen(base, self.k)
        return self._sim_traces[key]

    def _sim_tenant(self, t: TenantSpec, config: Any) -> Any:
        assert self.spec.emulated is not None
        static = scale_bytes(t.static_bytes, self.spec.emulated.scale)
        static = -(-static // CHUNK_BYTES) * CHUNK_BYTES  # whole 2 MiB pieces, as the emulated node pins them
        return super()._sim_tenant(replace(t, static_bytes=static), config)

    def record(self) -> NodeRecord:
        rec = super().record()
        if rec.granularity != self.k:
            self._record = rec = replace(rec, granularity=float(self.k))
        return rec

    def _collect(self, run: PlannedRun, sim: Any, node: Node, tenants: list[TenantSpec],
                 settings: dict[str, str]) -> RunResult:
        return chunk_equivalents(super()._collect(run, sim, node, tenants, settings), self.k)

    def run_alone(self, t: TenantSpec, value: Any, horizon_ns: int) -> TenantRow:
        return _tenant_row(super().run_alone(t, value, horizon_ns), self.k)

    def add_notes(self, res: ExperimentResult) -> None:
        super().add_notes(res)
        em = self.spec.emulated
        assert em is not None
        g = self.config.gpus[0]
        res.notes.append(
            f"simulated twin of the emulated node at its granularity: k = {self.k} trace chunks per 2 MiB block "
            f"(scale {scale_text(em.scale)}; every trace coarsened, huvmlab.sim.workloads.coarsen), {em.gpus} GPUs "
            f"of {format_size(g.memory_bytes)} less {format_size(g.reserved_bytes)} reserved (the software GPU's RM "
            f"share); counters, traffic, memory samples and the tenants' chunk counts are chunk equivalents "
            f"(blocks x {self.k}): compare with the emulated run (huvmctl experiment compare)")
        if em.time_scale != 1.0:
            res.notes.append(f"compute times as the traces recorded them: node.time_scale "
                             f"({scale_text(em.time_scale)}) only shortens the emulated node's replay")
        if node_config(self.spec).gpus[0].reserved_bytes != EMULATED_RESERVED_BYTES:
            res.notes.append(f"node.gpu_reserved_bytes is not the software GPU's RM reserve "
                             f"({format_size(EMULATED_RESERVED_BYTES)}), which the emulated node keeps: the twin "
                             "uses the software GPU's")
        if self.spec.record_events:
            res.notes.append("[record] events are not recorded on the simulated twin (its counters are chunk "
                             "equivalents, the events would be blocks)")


def _tenant_row(t: TenantRow, k: int) -> TenantRow:
    values = {n: v * k if n in SCALED_TENANT_VALUES else v for n, v in t.values.items()}
    return replace(t, values=values)


def chunk_equivalents(res: RunResult, k: int) -> RunResult:
    """A twin run's result in chunk equivalents: counters in chunks, bytes or faults, traffic, memory
    samples and the tenants' chunk counts times k (what the emulated node's counts are divided by its scale
    for, in ``huvmctl experiment compare``)."""
    res.counters = [replace(c, value=c.value * k) if c.metric.split(".")[0] in _SCALED_METRICS else c
                    for c in res.counters]
    res.traffic = [replace(t, bytes=t.bytes * k) for t in res.traffic]
    res.samples = [SampleRow(s.run, s.t_ns, s.gpu, s.own_bytes * k, s.guest_bytes * k, s.free_bytes * k,
                             s.peer_bytes * k, s.host_bytes * k) for s in res.samples]
    res.tenants = [_tenant_row(t, k) for t in res.tenants]
    return res


NODE_EXECUTORS.update(dict.fromkeys(NODE_CHOICES, SimTwin))
