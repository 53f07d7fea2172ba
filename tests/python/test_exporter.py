"""The Prometheus exporter: names and labels from the metric table, values from the node, huvm_up."""

from __future__ import annotations

import urllib.request

from huvm import abi, client, metrics
from huvm.errors import HuvmError
from huvm.exporter import HuvmCollector, make_registry, serve
from huvm.testing import CoreNode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def busy_node() -> client.Node:
    node = client.Node(CoreNode(3))
    for gpu, count in ((0, 7), (1, 2)):
        ev = abi.new_params(abi.lib.HUVM_IOCTL_TEST_EVENT)
        ev.event, ev.gpu, ev.count = abi.lib.HUVM_TEST_EVENT_EVICT, gpu, count
        node.call(abi.lib.HUVM_IOCTL_TEST_EVENT, ev)
    return node


def test_every_metric_is_exported_with_labels() -> None:
    node = busy_node()
    info, stats = node.info(), node.stats()
    m = scrape(make_registry(node, hostname="nodeA"))
    assert m["huvm_up"] == [({}, 1.0)]
    for metric in metrics.GPU_METRICS:
        assert metric.prom_name in m, metric.prom_name
    samples = m["huvm_evict_to_peer_chunks_total"]
    assert len(samples) == 3
    labels, value = samples[0]
    assert labels == {"gpu": "0", "uuid": info.gpus[0].uuid, "device": "sim0", "hostname": "nodeA"}
    assert value == stats.gpus[0].scalar("evict_to_peer")
    total = sum(v for name in ("huvm_evict_to_peer_chunks_total", "huvm_evict_to_host_chunks_total")
                for _, v in m[name])
    assert total == 9
    reasons = {lab["reason"] for lab, _ in m["huvm_host_reason_chunks_total"]}
    assert reasons == set(metrics.REASON_NAMES)
    pair = m.get("huvm_pair_evict_chunks_total", [])
    assert sum(v for _, v in pair) == stats.total("evict_to_peer")
    for lab, _ in pair:
        assert set(lab) == {"owner", "holder", "owner_uuid", "holder_uuid", "hostname"}
    assert m["huvm_gpu_memory_bytes"][0][1] == info.gpus[0].memory_bytes
    assert m["huvm_policy_generation"][0][0]["preset"] == "huvm"


class _Broken:
    name = "broken"
    description = "broken"

    def ioctl(self, cmd: int, params: object) -> None:
        raise HuvmError("device went away")

    def close(self) -> None:
        pass


def test_scrape_failure_reports_down() -> None:
    reg = CollectorRegistry()
    reg.register(HuvmCollector(client.Node(_Broken()), "h"))
    m = scrape(reg)
    assert m == {"huvm_up": [({}, 0.0)]}


def test_serve_http() -> None:
    server, thread = serve(busy_node(), 0, addr="127.0.0.1")
    try:
        port = server.server_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "huvm_evict_to_peer_chunks_total{" in body and "huvm_up 1.0" in body
    finally:
        server.shutdown()


def test_grafana_dashboard_queries_exported_metrics() -> None:
    import json
    import re
    from pathlib import Path

    import huvm

    path = Path(huvm.__file__).parent / "data" / "grafana" / "huvm-dashboard.json"
    dash = json.loads(path.read_text())
    names = {m.prom_name for m in metrics.METRICS} | {"huvm_up"}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    for e in exprs:
        for used in re.findall(r"\bhuvm_[a-z_]+", e):
            assert used in names, (used, e)
