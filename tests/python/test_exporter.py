"""The Prometheus exporter: names and labels from the metric table, values from the node, huvm_up."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

from huvm import abi, client, metrics
from huvm.errors import HuvmError
from huvm.exporter import HuvmCollector, make_registry, serve
from huvm_testing import CoreNode
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
    # dcgm-exporter's labels; without NVML knowing the GPUs, huvm's index names them
    assert labels == {"gpu": "0", "UUID": info.gpus[0].uuid, "pci_bus_id": "", "device": "nvidia0",
                      "modelName": "sim0", "Hostname": "nodeA"}
    assert value == stats.gpus[0].scalar("evict_to_peer")
    total = sum(v for name in ("huvm_evict_to_peer_chunks_total", "huvm_evict_to_host_chunks_total")
                for _, v in m[name])
    assert total == 9
    reasons = {lab["reason"] for lab, _ in m["huvm_host_reason_chunks_total"]}
    assert reasons == set(metrics.REASON_NAMES) - {"peer"}  # going to a peer is no reason to go to host
    host = sum(v for _, v in m["huvm_host_reason_chunks_total"])
    assert host == stats.total("evict_to_host")
    pair = m.get("huvm_pair_evict_chunks_total", [])
    assert pair and sum(v for _, v in pair) == stats.total("evict_to_peer")
    for lab, _ in pair:
        assert set(lab) == {"owner", "holder", "owner_UUID", "holder_UUID", "Hostname"}
        assert lab["owner_UUID"] == info.gpus[int(lab["owner"])].uuid
    assert m["huvm_gpu_memory_bytes"][0][1] == info.gpus[0].memory_bytes
    # no label whose value changes: the generation is a plain gauge, the preset a state set
    assert m["huvm_policy_generation"] == [({"Hostname": "nodeA"}, node.get_policy().generation)]
    presets = {lab["huvm_policy_preset"]: v for lab, v in m["huvm_policy_preset"]}
    assert presets["huvm"] == 1.0 and presets["stock"] == 0.0 and sum(presets.values()) == 1.0
    assert [lab["huvm_index"] for lab, _ in m["huvm_gpu_info"]] == ["0", "1", "2"]
    # each GPU's guests' traffic (the pair counters its budget sums) and its budget (none here)
    through = {lab["gpu"]: v for lab, v in m["huvm_gpu_guest_traffic_bytes_total"]}
    for g in range(3):
        want = sum(p.values[f] for p in stats.pairs if p.holder == g and p.owner != g
                   for f in ("evict_chunks", "prefetch_chunks", "fetch_chunks", "giveback_chunks"))
        assert through[str(g)] == want * abi.CHUNK_SIZE
    assert sum(through.values()) > 0
    assert [v for _, v in m["huvm_gpu_lend_traffic_budget_mbyte_per_s"]] == [0, 0, 0]
    node.set(["gpu.1.lend_traffic_mbyte_per_s=18GB/s"])
    m = scrape(make_registry(node, hostname="nodeA"))
    assert [v for _, v in m["huvm_gpu_lend_traffic_budget_mbyte_per_s"]] == [0, 18000, 0]


def test_labels_are_nvml_indices_when_nvml_knows_the_gpus() -> None:
    from test_pyctl_observe import fake_pynvml

    node = busy_node()
    info, stats = node.info(), node.stats()
    uuids = [g.uuid for g in info.gpus]
    nvml = fake_pynvml([uuids[2], uuids[0], uuids[1]])  # NVML's order is not the module's
    m = scrape(make_registry(node, hostname="h", nvml_module=nvml))
    by_uuid = {lab["UUID"]: (lab, v) for lab, v in m["huvm_evict_to_peer_chunks_total"]}
    lab0, v0 = by_uuid[uuids[0]]
    assert (lab0["gpu"], lab0["device"], lab0["pci_bus_id"]) == ("1", "nvidia1", "00000000:1B:00.0")
    assert v0 == stats.gpus[0].scalar("evict_to_peer")
    assert by_uuid[uuids[2]][0]["gpu"] == "0"
    info_rows = {lab["huvm_index"]: lab["gpu"] for lab, _ in m["huvm_gpu_info"]}
    assert info_rows == {"0": "1", "1": "2", "2": "0"}
    for lab, _ in m.get("huvm_pair_evict_chunks_total", []):  # pairs are named by NVML index too
        assert by_uuid[lab["owner_UUID"]][0]["gpu"] == lab["owner"]
    # NVML that knows only some of the GPUs: huvm's index for all of them (never two GPUs with one label)
    m = scrape(make_registry(node, hostname="h", nvml_module=fake_pynvml([uuids[1]])))
    assert [lab["gpu"] for lab, _ in m["huvm_gpu_memory_bytes"]] == ["0", "1", "2"]


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
    names |= set(scrape(make_registry(busy_node())))       # and what a scrape holds besides the metric table
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    from huvm.exporter import GPU_LABELS, PAIR_LABELS

    labels = set(GPU_LABELS) | set(PAIR_LABELS) | {"reason"}
    for e in exprs:
        for used in re.findall(r"\bhuvm_[a-z_]+", e):
            assert used in names, (used, e)
        for sel in re.findall(r"\{([^}]*)\}", e):
            for label in re.findall(r"(\w+)\s*=~?", sel):
                assert label in labels, (label, e)
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]).groups()  # type: ignore[union-attr]
            assert label in labels and (metric in names or metric == "huvm_build_info"), var["query"]


def _http(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_exporter_starts_before_the_module_and_follows_it(tmp_path: Path) -> None:
    # The "module" is a node of the real policy core behind a kernel backend whose device path is a file
    # in tmp_path: absent = module not loaded; created = loaded. The exporter is started first.
    import functools
    import threading

    from huvm.attach import attach
    from huvm.backend import KernelBackend
    from huvm.exporter import follow

    core = busy_node().backend
    assert isinstance(core, CoreNode)
    dev = tmp_path / "nvidia-uvm"
    lines: list[str] = []
    att = attach("kernel", str(dev), on_change=lines.append,
                 backend_factory=functools.partial(KernelBackend, ioctl_fn=core.fake_ioctl()))
    server, _ = serve(att, 0, addr="127.0.0.1")
    stop = threading.Event()
    try:
        port = server.server_port
        follow(att, lines.append, stop, timeout=0.05)
        m = _http(port)
        assert m == {"huvm_up": [({}, 0.0)]}  # no stale per-GPU series while it is absent
        assert any("does not exist" in line for line in lines)

        dev.touch()  # the module is loaded: its device node appears
        deadline = time.monotonic() + 5
        while not any("attached" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert any("appeared" in line for line in lines) and any("attached" in line for line in lines)
        m = _http(port)
        assert m["huvm_up"] == [({}, 1.0)]
        assert sum(v for _, v in m["huvm_evict_to_peer_chunks_total"]) + \
            sum(v for _, v in m["huvm_evict_to_host_chunks_total"]) == 9
        # the exporter holds no descriptor of the device between scrapes: the module could be unloaded
        assert not any(os.path.realpath(f"/proc/self/fd/{fd}") == str(dev) for fd in os.listdir("/proc/self/fd"))

        dev.unlink()  # unloaded ...
        assert _http(port) == {"huvm_up": [({}, 0.0)]}
        dev.touch()  # ... and loaded again: read again with nothing to reconnect
        assert _http(port)["huvm_up"] == [({}, 1.0)]
    finally:
        stop.set()
        server.shutdown()
        att.close()


def test_exporter_without_the_module_over_the_cli(tmp_path: Path) -> None:
    # huvmctl export against a device that is not there: it serves huvm_up 0 instead of exiting
    import socket
    import threading

    from huvm.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result: dict[str, int] = {}
    t = threading.Thread(target=lambda: result.setdefault("rc", main(
        ["--backend", "kernel", "--device", str(tmp_path / "nvidia-uvm"), "export", "--port", str(port),
         "--addr", "127.0.0.1", "--duration", "2"])))
    t.start()
    m: dict[str, list[tuple[dict[str, str], float]]] = {}
    for _ in range(100):
        try:
            m = _http(port)
            break
        except OSError:
            time.sleep(0.05)
    t.join()
    assert result["rc"] == 0
    assert m == {"huvm_up": [({}, 0.0)]}
