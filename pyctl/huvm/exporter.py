"""Prometheus exporter: a custom collector that reads huvm's counters on every scrape.

Names come from the metric table (:mod:`huvm.metrics`): ``huvm_<field>_<unit>_total`` for counters,
``huvm_<field>_<unit>`` for gauges, ``huvm_pair_*`` per GPU pair. Labels follow dcgm-exporter and
nvitop-exporter: ``gpu`` (index), ``uuid``, ``device`` (name), ``hostname``; pair metrics carry
``owner``/``holder`` (indices) and ``owner_uuid``/``holder_uuid``; ``huvm_host_reason_chunks_total`` adds
``reason``. ``huvm_up`` is 0 when a scrape could not read the node.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from . import abi
from .client import Node
from .errors import HuvmError
from .metrics import GPU_METRICS, PAIR_METRICS
from .metrics import Metric as HuvmMetric

GPU_LABELS = ["gpu", "uuid", "device", "hostname"]
PAIR_LABELS = ["owner", "holder", "owner_uuid", "holder_uuid", "hostname"]


def _family(m: HuvmMetric, labels: list[str]) -> CounterMetricFamily | GaugeMetricFamily:
    help_text = f"{m.help} ({m.unit})"
    if m.kind == "counter":
        return CounterMetricFamily(m.prom_name.removesuffix("_total"), help_text, labels=labels)
    return GaugeMetricFamily(m.prom_name, help_text, labels=labels)


class HuvmCollector(Collector):
    """Collects a node's counters and gauges at scrape time."""

    def __init__(self, node: Node, hostname: str | None = None, *, pairs: bool = True) -> None:
        self.node = node
        self.hostname = hostname or socket.gethostname()
        self.pairs = pairs

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: no read of the node at registration

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("huvm_up", "1 if the last scrape read the huvm node, else 0")
        try:
            info = self.node.info()
            snap = self.node.stats()
            policy = self.node.get_policy()
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
                             "upstream": info.upstream_version, "hostname": host})
        yield meta
        gen = GaugeMetricFamily("huvm_policy_generation", "policy generation (changes on every SET_POLICY)",
                                labels=["preset", "hostname"])
        gen.add_metric([policy.preset_name, host], policy.generation)
        yield gen

        gpu_labels = {g.index: [str(g.index), g.uuid, g.name, host] for g in info.gpus}
        mem = GaugeMetricFamily("huvm_gpu_memory_bytes", "framebuffer usable by UVM (bytes)", labels=GPU_LABELS)
        free = GaugeMetricFamily("huvm_gpu_free_bytes", "free GPU memory now (bytes)", labels=GPU_LABELS)
        for g in info.gpus:
            mem.add_metric(gpu_labels[g.index], g.memory_bytes)
            free.add_metric(gpu_labels[g.index], g.free_bytes)
        yield mem
        yield free

        for m in GPU_METRICS:
            fam = _family(m, GPU_LABELS + ([m.label] if m.label else []))
            for c in snap.gpus:
                labels = gpu_labels.get(c.gpu, [str(c.gpu), "", "", host])
                value = c.values[m.field]
                if isinstance(value, tuple):
                    for name, v in zip(m.label_values, value, strict=False):
                        fam.add_metric([*labels, name], v)
                else:
                    fam.add_metric(labels, value)
            yield fam

        if not self.pairs:
            return
        uuids = {g.index: g.uuid for g in info.gpus}
        for m in PAIR_METRICS:
            fam = _family(m, PAIR_LABELS)
            for p in snap.pairs:
                fam.add_metric([str(p.owner), str(p.holder), uuids.get(p.owner, ""), uuids.get(p.holder, ""), host],
                               p.values[m.field])
            yield fam


def make_registry(node: Node, hostname: str | None = None, registry: CollectorRegistry | None = None,
                  **kw: Any) -> CollectorRegistry:
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(HuvmCollector(node, hostname, **kw))
    return registry


def serve(node: Node, port: int, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None) -> Any:
    """Start the HTTP server (a daemon thread); returns (server, thread)."""
    reg = make_registry(node, registry=registry)
    return start_http_server(port, addr=addr, registry=reg)
