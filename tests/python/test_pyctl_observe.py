"""Stats deltas and rates, topology with and without NVML (fake pynvml), the udev watcher (fake monitor)."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import pytest
from huvm import abi, client, topology
from huvm.stats import GpuCounters, PairCounters, StatsSnapshot
from huvm.watch import Event, Watcher
from huvm_testing import CoreNode


def snap(t_ns: int, evict: int, lent: int, pair_evict: int = 0) -> StatsSnapshot:
    values: dict[str, Any] = {"evict_to_peer": evict, "lent_bytes": lent, "host_reason": (1, 2) + (0,) * 8}
    from huvm.metrics import GPU_METRICS, PAIR_METRICS

    full = {m.field: values.get(m.field, (0,) * m.length if m.length else 0) for m in GPU_METRICS}
    pair = {m.field: 0 for m in PAIR_METRICS}
    pair["evict_chunks"] = pair_evict
    pair["held_bytes"] = pair_evict * 2 << 20
    return StatsSnapshot(t_ns, 1, (GpuCounters(0, full),), (PairCounters(0, 1, pair),))


def test_delta_and_rates() -> None:
    a, b = snap(1_000_000_000, 10, 4 << 20, 3), snap(3_000_000_000, 50, 2 << 20, 7)
    d = b.delta(a)
    assert d.seconds == 2.0
    g = d.gpus[0]
    assert g["evict_to_peer"] == 40  # counter: difference
    assert g["lent_bytes"] == 2 << 20  # gauge: the later value
    assert g["host_reason"] == (0,) * 10
    assert d.rates()[0]["evict_to_peer"] == 20.0
    assert "lent_bytes" not in d.rates()[0]
    assert d.pairs[0]["evict_chunks"] == 4 and d.pairs[0]["held_bytes"] == 14 << 20
    assert d.pair_rates()[(0, 1)]["evict_chunks"] == 2.0


def test_delta_across_reset_counts_from_zero() -> None:
    d = snap(2, 5, 0).delta(snap(1, 100, 0))
    assert d.gpus[0]["evict_to_peer"] == 5


def test_rate_map_is_the_one_rate_rule() -> None:
    from huvm.metrics import Kind
    from huvm.stats import counter_delta, rate_map

    kinds: dict[str, Kind] = {"evict_to_peer": "counter", "faults": "counter", "lent_bytes": "gauge"}
    old = {"evict_to_peer": 100, "faults": 50, "lent_bytes": 7}
    new = {"evict_to_peer": 160, "faults": 20, "lent_bytes": 9}  # faults went down: a reset in between
    r = rate_map(kinds, old, new, 2.0)
    assert r == {"evict_to_peer": 30.0, "faults": 10.0, "lent_bytes": 9.0}
    assert rate_map(kinds, None, new, 2.0) == {"evict_to_peer": 0.0, "faults": 0.0, "lent_bytes": 9.0}
    assert rate_map(kinds, old, new, 0.0)["evict_to_peer"] == 0.0
    assert rate_map({"giveback": "counter"}, {}, {"giveback": 4}, 4.0) == {"giveback": 1.0}
    assert (counter_delta(10, 25), counter_delta(100, 7)) == (15, 7)


def test_stats_from_node_and_reset() -> None:
    fake = CoreNode(2)
    node = client.Node(fake)
    ev = abi.new_params(abi.lib.HUVM_IOCTL_TEST_EVENT)
    ev.event, ev.gpu, ev.count = abi.lib.HUVM_TEST_EVENT_EVICT, 0, 5
    node.call(abi.lib.HUVM_IOCTL_TEST_EVENT, ev)
    s = node.stats()
    assert s.gpus[0].scalar("evict_to_peer") + s.gpus[0].scalar("evict_to_host") == 5
    assert s.total("evict_to_peer") == sum(p["evict_chunks"] for p in s.pairs)
    d = s.to_dict()
    assert d["gpus"][0]["gpu"] == 0 and isinstance(d["gpus"][0]["host_reason"], list)
    node.reset_stats()
    s2 = node.stats()
    assert s2.total("evict_to_peer") == 0 and s2.total("evict_to_host") == 0
    # gauges survive a reset
    assert s2.total("lent_bytes") == s.total("lent_bytes")


# ---- topology -------------------------------------------------------------------------------------------

class NVMLError(Exception):
    pass


@dataclass
class _Pci:
    busId: bytes  # noqa: N815 - pynvml's field name


def fake_pynvml(uuids: list[str], fail_init: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_NVLINK_MAX_LINKS = 4  # type: ignore[attr-defined]
    state = {"init": 0, "shutdown": 0}

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")
        state["init"] += 1

    def link_state(h: int, link: int) -> int:
        if link >= 2:
            raise NVMLError("Not Supported")
        return 1

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: state.__setitem__("shutdown", 1)  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(uuids)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: uuids[h]  # type: ignore[attr-defined]
    m.nvmlDeviceGetPciInfo = lambda h: _Pci(f"00000000:{h + 0x1a:02X}:00.0".encode())  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 3  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkState = link_state  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: _Pci(b"00000000:1B:00.0")  # type: ignore[attr-defined]
    m.state = state  # type: ignore[attr-defined]
    return m


def test_topology_with_nvml() -> None:
    info = client.Node(CoreNode(3)).info()
    uuids = [g.uuid for g in info.gpus]
    fake = fake_pynvml([uuids[1], uuids[0]])  # NVML order differs from the module's
    topo = topology.discover(info, fake)
    assert topo.nvml
    g0, g1, g2 = topo.gpus
    assert (g0.nvml_index, g1.nvml_index, g2.nvml_index) == (1, 0, None)
    assert g0.pci_bus_id == "00000000:1B:00.0" and (g0.pcie_gen, g0.pcie_width) == (3, 16)
    assert [lk.link for lk in g0.nvlinks] == [0, 1] and all(lk.active for lk in g0.nvlinks)
    assert any("GPU 2" in n and "not known to NVML" in n for n in topo.notes)
    assert fake.state["shutdown"] == 1
    assert (0, 1, "NV2", 50000) in topo.links
    assert topo.to_dict()["gpus"][0]["uuid"] == uuids[0]


def test_topology_degrades_without_nvml() -> None:
    info = client.Node(CoreNode(2)).info()
    topo = topology.discover(info, fake_pynvml([], fail_init=True))
    assert not topo.nvml
    assert topo.notes and "NVML unavailable" in topo.notes[0] and "Driver Not Loaded" in topo.notes[0]
    assert all(g.nvml_index is None and g.pcie_gen is None for g in topo.gpus)
    assert [g.uuid for g in topo.gpus] == [g.uuid for g in info.gpus]


def test_topology_with_the_real_pynvml() -> None:
    # without an NVIDIA driver (CI) the real pynvml fails to initialise and discover() says so; with one,
    # the synthetic GPU's UUID is unknown to NVML and that is noted
    topo = topology.discover(client.Node(CoreNode(1)).info())
    assert topo.notes
    assert ("NVML unavailable" in topo.notes[0]) != topo.nvml
    assert topo.gpus[0].nvml_index is None


# ---- watcher --------------------------------------------------------------------------------------------

@dataclass
class _Dev:
    action: str
    sys_name: str


class FakeMonitor:
    def __init__(self, script: list[tuple[_Dev | None, bool]], present: dict[str, bool]) -> None:
        self.script = script
        self.present = present

    def poll(self, timeout: float | None = None) -> _Dev | None:
        if not self.script:
            return None
        dev, exists = self.script.pop(0)
        self.present["dev"] = exists
        return dev


def test_watcher_module_and_device_events() -> None:
    present = {"dev": False}
    mon = FakeMonitor([
        (_Dev("add", "nvidia_uvm"), True),       # module loaded, device node made
        (_Dev("add", "snd_hda_intel"), True),    # unrelated module: ignored
        (_Dev("remove", "nvidia_uvm"), False),   # unloaded
        (_Dev("add", "nvidia_uvm"), False),      # loaded again, device node not yet made
    ], present)
    w = Watcher("/dev/nvidia-uvm", monitor=mon, exists=lambda p: present["dev"])
    assert not w.present
    events = list(w.events(timeout=0.01))
    assert events == [
        Event("module", "add", "nvidia_uvm"), Event("device", "add", "/dev/nvidia-uvm"),
        Event("module", "remove", "nvidia_uvm"), Event("device", "remove", "/dev/nvidia-uvm"),
        Event("module", "add", "nvidia_uvm"),
    ]


def test_watcher_default_monitor_is_pyudev(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyudev

    calls: list[str] = []

    class M:
        def filter_by(self, subsystem: str) -> None:
            calls.append(subsystem)

        def poll(self, timeout: float | None = None) -> None:
            return None

    monkeypatch.setattr(pyudev.Monitor, "from_netlink", staticmethod(lambda ctx: M()))
    w = Watcher("/nonexistent")
    assert calls == ["module"] and w.poll(0) == []


def test_watcher_sees_the_device_node_through_inotify(tmp_path: Any) -> None:
    # nvidia-modprobe makes /dev/nvidia-uvm without a udev event: inotify on its directory wakes the watcher
    import threading
    import time

    dev = tmp_path / "nvidia-uvm"
    with Watcher(str(dev), udev=False) as w:
        assert not w.present and w.notes == []
        threading.Timer(0.2, dev.touch).start()
        t0 = time.monotonic()
        assert w.poll(5) == [Event("device", "add", str(dev))]
        assert time.monotonic() - t0 < 2  # woken by the creation, not by the timeout
        (tmp_path / "unrelated").touch()
        assert w.poll(0.1) == []  # another name in the directory is no event
        dev.unlink()
        assert w.poll(5) == [Event("device", "remove", str(dev))]
    # a directory that does not exist cannot be watched: said in a note, and polling still works
    w = Watcher(str(tmp_path / "no" / "dev"), udev=False)
    assert w.notes and "inotify" in w.notes[0]
    assert w.poll(0.01) == []
