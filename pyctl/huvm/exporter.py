"""Prometheus exporter: a custom collector that reads huvm's counters on every scrape.

Names come from the metric table (:mod:`huvm.metrics`): ``huvm_<field>_<unit>_total`` for counters,
``huvm_<field>_<unit>`` for gauges, ``huvm_pair_*`` per GPU pair. Per-GPU series carry dcgm-exporter's
labels, so that they join with its series: ``gpu`` (the NVML index), ``UUID``, ``pci_bus_id``,
``device`` (``nvidia<gpu>``), ``modelName`` and ``Hostname``. Pair series carry ``owner``/``holder`` (NVML
indices), ``owner_UUID``/``holder_UUID`` and ``Hostname``. No label holds a value that changes while the
node runs: the policy's preset is a state set (``huvm_policy_preset``), not a label.

The collector reads the node through a :class:`huvm.attach.Attachment`: on the kernel backend each scrape
opens the device and closes it afterwards, so the exporter can start before the module is loaded, never
keeps it from being unloaded, and reads it again once it is back. ``huvm_up`` is 0 (and nothing else is
exported, so no stale per-GPU series) while the node cannot be read.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from . import abi, topology
from .attach import Attachment
from .client import Node
from .errors import HuvmError
from .info import NodeInfo
from .metrics import GPU_METRICS, PAIR_METRICS, host_reasons
from .metrics import Metric as HuvmMetric
from .stats import guest_traffic_chunks

GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
PAIR_LABELS = ["owner", "holder", "owner_UUID", "holder_UUID", "Hostname"]


@dataclass(frozen=True)
class GpuIdentity:
    """The labels that name one GPU as dcgm-exporter names it."""

    gpu: str
    uuid: str
    pci_bus_id: str
    device: str
    model: str

    def labels(self, hostname: str) -> list[str]:
        return [self.gpu, self.uuid, self.pci_bus_id, self.device, self.model, hostname]


def identities(info: NodeInfo, nvml_module: ModuleType | None = None) -> tuple[dict[int, GpuIdentity], str | None]:
    """huvm GPU index -> its identity, and a note when NVML could not name every GPU.

    With NVML knowing every GPU (by UUID), ``gpu`` is its NVML index and ``device`` ``nvidia<index>``, as
    dcgm-exporter labels them. Otherwise (no driver, the simulated node, the qemu test module) huvm's own
    index stands in for every GPU, so the labels never collide. A simulated node's GPUs are not asked of
    NVML."""
    if info.backend == abi.lib.HUVM_BACKEND_SIM:
        return {g.index: GpuIdentity(str(g.index), g.uuid, "", f"nvidia{g.index}", g.name) for g in info.gpus}, None
    topo = topology.discover(info, nvml_module)
    named = bool(topo.gpus) and all(g.nvml_index is not None for g in topo.gpus)
    out: dict[int, GpuIdentity] = {}
    for g in topo.gpus:
        idx = g.nvml_index if named and g.nvml_index is not None else g.index
        out[g.index] = GpuIdentity(str(idx), g.uuid, (g.pci_bus_id or "") if named else "", f"nvidia{idx}",
                                   g.name)
    note = None
    if not named and topo.gpus:
        why = "; ".join(topo.notes) or "NVML does not know these GPUs"
        note = f"gpu and device labels use huvm's GPU index ({why})"
    return out, note


def _family(m: HuvmMetric, labels: list[str]) -> CounterMetricFamily | GaugeMetricFamily:
    help_text = f"{m.help} ({m.unit})"
    if m.kind == "counter":
        return CounterMetricFamily(m.prom_name.removesuffix("_total"), help_text, labels=labels)
    return GaugeMetricFamily(m.prom_name, help_text, labels=labels)


class HuvmCollector(Collector):
    """Collects a node's counters and gauges at scrape time.

    ``node``: a :class:`~huvm.client.Node` (always that node) or an :class:`~huvm.attach.Attachment` (a
    node that may come and go). ``nvml_module`` replaces ``import pynvml`` (tests)."""

    def __init__(self, node: Node | Attachment, hostname: str | None = None, *, pairs: bool = True,
                 nvml_module: ModuleType | None = None, on_note: Callable[[str], None] | None = None) -> None:
        self.attachment = node if isinstance(node, Attachment) else Attachment.of(node)
        self.hostname = hostname or socket.gethostname()
        self.pairs = pairs
        self.nvml_module = nvml_module
        self.on_note = on_note
        self._ids: tuple[Any, dict[int, GpuIdentity]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: no read of the node at registration

    def identities(self, info: NodeInfo) -> dict[int, GpuIdentity]:
        """The GPUs' labels, asked of NVML again only when the node came or went, or its GPUs changed."""
        key = (self.attachment.epoch, tuple(g.uuid for g in info.gpus))
        with self._lock:
            if self._ids is None or self._ids[0] != key:
                ids, note = identities(info, self.nvml_module)
                if note and self.on_note is not None:
                    self.on_note(note)
                self._ids = (key, ids)
            return self._ids[1]

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("huvm_up", "1 if this scrape read the huvm node, else 0 (module not loaded, "
                                          "stock module, no permission, ...)")
        try:
            with self.attachment.session() as node:
                info = node.info()
                snap = node.stats()
                policy = node.get_policy()
        except HuvmError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        host = self.hostname
        meta = InfoMetricFamily("huvm_build", "huvm module and backend")
        meta.add_metric([], {"version": abi.huvm_version_str(info.huvm_version),
                             "abi": abi.version_str(info.module_abi_version), "backend": info.backend_name,
                             "upstream": info.upstream_version, "Hostname": host})
        yield meta
        gen = GaugeMetricFamily("huvm_policy_generation", "policy generation (changes on every SET_POLICY)",
                                labels=["Hostname"])
        gen.add_metric([host], policy.generation)
        yield gen
        preset = StateSetMetricFamily("huvm_policy_preset", "the preset the policy in force came from (1) "
                                                            "and the others (0)", labels=["Hostname"])
        preset.add_metric([host], {name: value == policy.preset
                                   for value, name in sorted(abi.enum_names("HUVM_PRESET_").items())})
        yield preset

        ids = self.identities(info)

        def labels_of(index: int) -> list[str]:
            g = ids.get(index) or GpuIdentity(str(index), "", "", f"nvidia{index}", "")
            return g.labels(host)

        gpu_info = GaugeMetricFamily("huvm_gpu_info", "1 per GPU: its dcgm-exporter labels and huvm's index "
                                                      "for it (huvm_index, as huvmctl shows it)",
                                     labels=[*GPU_LABELS, "huvm_index"])
        mem = GaugeMetricFamily("huvm_gpu_memory_bytes", "framebuffer usable by UVM (bytes)", labels=GPU_LABELS)
        free = GaugeMetricFamily("huvm_gpu_free_bytes", "free GPU memory now (bytes)", labels=GPU_LABELS)
        for g in info.gpus:
            gpu_info.add_metric([*labels_of(g.index), str(g.index)], 1)
            mem.add_metric(labels_of(g.index), g.memory_bytes)
            free.add_metric(labels_of(g.index), g.free_bytes)
        yield gpu_info
        yield mem
        yield free

        # A lender's guest-traffic budget and the traffic it limits (the core's huvm_guest_traffic_total over
        # the pair counters): rate(huvm_gpu_guest_traffic_bytes_total[1m]) / 1e6 / the budget is its use.
        budget = GaugeMetricFamily("huvm_gpu_lend_traffic_budget_mbyte_per_s",
                                   "the GPU's guest-traffic budget, policy lend_traffic_mbyte_per_s (MB/s; 0: none)",
                                   labels=GPU_LABELS)
        entries = {e.uuid.lower(): e for e in policy.gpus}
        for g in info.gpus:
            e = entries.get(g.uuid.lower())
            budget.add_metric(labels_of(g.index), e.lend_traffic_mbyte_per_s if e is not None else 0)
        yield budget
        traffic = CounterMetricFamily("huvm_gpu_guest_traffic_bytes",
                                      "other GPUs' data copied into or out of this GPU: evicted or prefetched "
                                      "onto it, fetched or given back from it (bytes; what its budget limits)",
                                      labels=GPU_LABELS)
        through = guest_traffic_chunks(snap.pairs)
        for c in snap.gpus:
            traffic.add_metric(labels_of(c.gpu), through.get(c.gpu, 0) * abi.CHUNK_SIZE)
        yield traffic

        reasons = host_reasons()
        for m in GPU_METRICS:
            fam = _family(m, GPU_LABELS + ([m.label] if m.label else []))
            for c in snap.gpus:
                value = c.values[m.field]
                if isinstance(value, tuple):
                    for i, v in enumerate(value):
                        if m.field == "host_reason" and i not in reasons:
                            continue
                        name = m.label_values[i] if i < len(m.label_values) else str(i)
                        fam.add_metric([*labels_of(c.gpu), name], v)
                else:
                    fam.add_metric(labels_of(c.gpu), value)
            yield fam

        if not self.pairs:
            return
        for m in PAIR_METRICS:
            fam = _family(m, PAIR_LABELS)
            for p in snap.pairs:
                own, hold = labels_of(p.owner), labels_of(p.holder)
                fam.add_metric([own[0], hold[0], own[1], hold[1], host], p.values[m.field])
            yield fam


def make_registry(node: Node | Attachment, hostname: str | None = None, registry: CollectorRegistry | None = None,
                  **kw: Any) -> CollectorRegistry:
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(HuvmCollector(node, hostname, **kw))
    return registry


def serve(node: Node | Attachment, port: int, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None,
          **kw: Any) -> Any:
    """Start the HTTP server (a daemon thread); returns (server, thread)."""
    reg = make_registry(node, registry=registry, **kw)
    return start_http_server(port, addr=addr, registry=reg)


def follow(attachment: Attachment, report: Callable[[str], None], stop: threading.Event,
           timeout: float = 1.0) -> threading.Thread | None:
    """A daemon thread that reports the module and its device node coming and going (udev, inotify) and
    checks the node after each change, so that ``report`` (one line each) says when it can be read again.
    None for a node that cannot go away (a held node). Ends when ``stop`` is set."""
    w = attachment.watcher()
    if w is None:
        return None
    for note in w.notes:
        report(note)

    def run() -> None:
        while not stop.is_set():
            events = attachment.wait(timeout)
            for ev in events:
                report(f"{ev.kind} {ev.name}: {'appeared' if ev.action == 'add' else 'went away'}")
            if events:
                attachment.check()  # on_change says whether it can be read now

    t = threading.Thread(target=run, name="huvm-export-watch", daemon=True)
    t.start()
    return t
