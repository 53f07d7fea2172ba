"""`huvmctl policy lender-budget`: a lender's guest-traffic budget from a slowdown target and its HBM bandwidth
(huvm.budget), the HBM bandwidth from NVML (huvm.topology), the command on the simulated node."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest
from huvm import abi, budget, topology
from huvm.cli import main
from huvm.client import Node
from huvm.errors import PolicyError
from huvm.jsonout import validate
from huvmlab.simbackend import SimBackend

SIM = ["--backend", "sim"]
V100_MB_S = 4096 * 877 * 2 // 8        # NVML's bus width x max memory clock of a V100 SXM2


# ---- the arithmetic ----

def test_budget_is_the_hbm_share_for_the_target() -> None:
    """1 / (1 - s) = 1 + t: 1.96 % of the HBM for a 2 % target; clamped to the ABI's range."""
    assert budget.lend_traffic_for(900_000, 0.02) == int(900_000 * (1 - 1 / 1.02)) == 17_647
    assert budget.lend_traffic_for(1_555_200, 0.02) == 30_494
    assert budget.lend_traffic_for(1_000, 0.02) == abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S
    assert budget.lend_traffic_for(10**12, 0.5) == abi.lib.HUVM_MAX_MBYTE_PER_S
    assert abs(budget.traffic_share(0.02) - 0.0196078) < 1e-6
    for bad in (0.0, 1.0, -0.1, 2.0):
        with pytest.raises(PolicyError, match="above 0 and below 1"):
            budget.lend_traffic_for(900_000, bad)
    with pytest.raises(PolicyError, match="must be positive"):
        budget.lend_traffic_for(0, 0.02)


@pytest.mark.parametrize("text,value", [("2%", 0.02), ("0.02", 0.02), (" 5 %", 0.05), ("50%", 0.5)])
def test_slowdown_takes_a_percentage_or_a_share(text: str, value: float) -> None:
    assert budget.parse_slowdown(text) == pytest.approx(value)


@pytest.mark.parametrize("text,match", [("0", "above 0 % and below 100 %"), ("100%", "above 0 %"),
                                        ("-1%", "above 0 %"), ("1", "above 0 %"), ("two", "such as 2% or 0.02"),
                                        ("%", "such as 2%")])
def test_bad_slowdowns_are_refused(text: str, match: str) -> None:
    with pytest.raises(PolicyError, match=match):
        budget.parse_slowdown(text)


def test_hbm_bandwidth_from_bus_width_and_memory_clock() -> None:
    """Data-sheet checks: V100 SXM2 900 GB/s, A100 40 GB 1,555 GB/s, H100 SXM 3.35 TB/s."""
    assert topology.hbm_mbyte_per_s(4096, 877) == 898_048
    assert topology.hbm_mbyte_per_s(5120, 1215) == 1_555_200
    assert topology.hbm_mbyte_per_s(5120, 2619) == 3_352_320
    assert topology.hbm_mbyte_per_s(None, 877) is None
    assert topology.hbm_mbyte_per_s(4096, 0) is None


# ---- NVML ----

def fake_pynvml(uuids: list[str], bus_width: dict[int, int], mem_clock: dict[int, int]) -> types.ModuleType:
    """pynvml with the queries discover() makes; a GPU missing from bus_width/mem_clock fails that query."""
    m = types.ModuleType("pynvml")
    calls: list[tuple[str, int, Any]] = []

    def fail(*_: Any) -> Any:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def width(h: int) -> int:
        return bus_width[h] if h in bus_width else fail()

    def clock(h: int, kind: int) -> int:
        calls.append(("clock", h, kind))
        return mem_clock[h] if h in mem_clock else fail()

    m.NVML_CLOCK_MEM = 2  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(uuids)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: uuids[h]  # type: ignore[attr-defined]
    m.nvmlDeviceGetPciInfo = fail  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrPcieLinkGeneration = fail  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrPcieLinkWidth = fail  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkState = fail  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkRemotePciInfo = fail  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryBusWidth = width  # type: ignore[attr-defined]
    m.nvmlDeviceGetMaxClockInfo = clock  # type: ignore[attr-defined]
    m.calls = calls  # type: ignore[attr-defined]
    return m


@pytest.fixture
def node() -> Any:
    with Node(SimBackend.from_config("aws-p3.8xlarge")) as n:
        yield n


def test_topology_reads_the_hbm_bandwidth_from_nvml(node: Node) -> None:
    info = node.info()
    uuids = [g.uuid for g in info.gpus]
    fake = fake_pynvml(uuids, {0: 4096, 1: 4096, 2: 4096}, {0: 877, 1: 877})
    topo = topology.discover(info, fake)
    assert [g.hbm_mbyte_per_s for g in topo.gpus] == [V100_MB_S, V100_MB_S, None, None]  # 2: no clock, 3: none
    assert ("clock", 0, 2) in fake.calls            # the memory clock (NVML_CLOCK_MEM), its maximum
    without = topology.discover(info, fake_pynvml([], {}, {}))
    assert all(g.hbm_mbyte_per_s is None for g in without.gpus)


def test_plan_takes_nvml_and_refuses_a_gpu_without_it(node: Node) -> None:
    info = node.info()
    topo = topology.discover(info, fake_pynvml([g.uuid for g in info.gpus], {1: 4096, 3: 4096}, {1: 877, 3: 877}))
    plan = budget.plan(info, ["3", "1"], 0.02, topology=topo)
    assert [(b.gpu, b.hbm_source, b.hbm_mbyte_per_s, b.lend_traffic_mbyte_per_s) for b in plan] == [
        (1, "nvml", V100_MB_S, budget.lend_traffic_for(V100_MB_S, 0.02)),
        (3, "nvml", V100_MB_S, budget.lend_traffic_for(V100_MB_S, 0.02))]
    with pytest.raises(PolicyError, match=r"GPU 2 \(GPU-[0-9a-f-]+\): its HBM bandwidth is unknown .*--hbm"):
        budget.plan(info, ["1", "2"], 0.02, topology=topo)
    given = budget.plan(info, ["all"], 0.05, hbm_mbyte_per_s=1_000_000, topology=topo)
    assert {b.hbm_source for b in given} == {"given"} and len(given) == 4


def test_settings_apply_in_one_change(node: Node) -> None:
    info = node.info()
    gen = node.get_policy().generation
    plan = budget.plan(info, ["1", "3"], 0.02, hbm_mbyte_per_s=900_000)
    before, new = node.plan(budget.settings(plan, info), info=info)
    after = node.set_policy(new)
    assert after.generation == gen + 1
    assert [g.lend_traffic_mbyte_per_s for g in node.get_policy().gpus] == [0, 17_647, 0, 17_647]


# ---- the command ----

def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HUVM_BACKEND", "HUVM_SIM_FALLBACK", "HUVM_DEVICE"):
        monkeypatch.delenv(var, raising=False)


def test_command_with_hbm_sets_the_named_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *SIM, "policy", "lender-budget", "1", "2", "--max-slowdown", "2%", "--hbm",
                       "900GB/s", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    validate(doc)
    assert doc["kind"] == "lender-budget" and doc["applied"] and doc["max_slowdown"] == 0.02
    assert [(b["gpu"], b["hbm_source"], b["lend_traffic_mbyte_per_s"]) for b in doc["budgets"]] == [
        (1, "given", 17_647), (2, "given", 17_647)]
    changed = {c["key"]: (c["old"], c["new"]) for c in doc["changes"]}
    assert changed == {"gpu.1.lend_traffic_mbyte_per_s": (0, 17_647), "gpu.2.lend_traffic_mbyte_per_s": (0, 17_647),
                       "preset": ("huvm", "custom")}
    rc, out, _ = run(capsys, *SIM, "policy", "lender-budget", "1", "--max-slowdown", "0.05", "--hbm", "900000")
    assert rc == 0 and "42857MB/s" in out and "applied: generation" in out


def test_dry_run_sends_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *SIM, "policy", "lender-budget", "all", "--max-slowdown", "2%", "--hbm", "900GB/s",
                       "--dry-run", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert not doc["applied"] and len(doc["changes"]) == 4
    assert doc["generation"] == json.loads(run(capsys, *SIM, "policy", "show", "--json")[1])["policy"]["generation"]


def test_command_takes_the_hbm_from_nvml(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with Node(SimBackend.from_config("aws-p3.8xlarge")) as n:
        uuids = [g.uuid for g in n.info().gpus]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(uuids, {1: 4096}, {1: 877}))
    rc, out, err = run(capsys, *SIM, "policy", "lender-budget", "1", "--max-slowdown", "2%", "--json")
    assert rc == 0, err
    (b,) = json.loads(out)["budgets"]
    assert (b["hbm_source"], b["hbm_mbyte_per_s"], b["lend_traffic_mbyte_per_s"]) == (
        "nvml", V100_MB_S, budget.lend_traffic_for(V100_MB_S, 0.02))


@pytest.mark.parametrize("argv,message", [
    (["1", "--max-slowdown", "2%"], "GPU 1 (GPU-"),                       # no NVML here, no --hbm
    (["1", "--max-slowdown", "0", "--hbm", "900GB/s"], "--max-slowdown '0': must be above 0 %"),
    (["1", "--max-slowdown", "2%", "--hbm", "fast"], "--hbm: not a rate: 'fast'"),
    (["9", "--max-slowdown", "2%", "--hbm", "900GB/s"], "unknown GPU '9'"),
])
def test_refusals_are_one_line_and_change_nothing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                  argv: list[str], message: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], {}, {}))    # NVML answers, knows no GPU
    sent: list[object] = []
    monkeypatch.setattr(Node, "set_policy", lambda self, p: sent.append(p))
    rc, out, err = run(capsys, *SIM, "policy", "lender-budget", *argv)
    assert rc == 2 and out == "" and sent == []
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_a_gpu_that_does_not_lend_gets_its_budget_and_a_note(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Any) -> None:
    """Under stock every role is none: the budget is set (it takes effect once the GPU lends) and the command
    says so."""
    cfg = tmp_path / "stock.toml"
    cfg.write_text('[node]\npreset = "aws-p3.8xlarge"\npolicy_preset = "stock"\n')
    rc, out, err = run(capsys, "--backend", "sim", "--sim-config", str(cfg), "policy", "lender-budget", "1",
                       "--max-slowdown", "2%", "--hbm", "900GB/s")
    assert rc == 0, err
    assert "note: not lending now, GPU 1 (none): a budget applies once the role is lender or both" in out
    rc, out, _ = run(capsys, *SIM, "policy", "lender-budget", "1", "--max-slowdown", "2%", "--hbm", "900GB/s")
    assert rc == 0 and "note:" not in out             # the huvm preset: every GPU lends
