"""huvmctl stats shows what lending costs and gains (issue 14 item 1): per GPU lent and borrowed figures from
the counters (every backend), and per tenant harvester speedup over stock and lender slowdown against running
alone, side by side, for a simulated node built from an experiment file or an experiment's output folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from huvm import jsonout
from huvm.cli import main
from huvm.stats import GpuCounters, PairCounters, StatsSnapshot, gpu_lending, tenant_figures
from huvm_testing import small_experiment

EXAMPLE = str(Path(jsonout.__file__).parent / "examples" / "consolidation.toml")
SMALL = small_experiment("bundled:lender-steady")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, jsonout.json_schema())
    jsonout.validate(doc)
    return doc


def test_gpu_lending_from_counters() -> None:
    zero = {k: 0 for k in ("lent_bytes", "lent_peak_bytes", "harvested_bytes", "giveback", "evict_to_peer",
                           "fetch_from_peer")}
    g0 = GpuCounters(0, {**zero, "harvested_bytes": 6 << 20, "evict_to_peer": 5, "fetch_from_peer": 2})
    g1 = GpuCounters(1, {**zero, "lent_bytes": 6 << 20, "lent_peak_bytes": 8 << 20, "giveback": 1})
    pair = PairCounters(0, 1, {"evict_chunks": 5, "fetch_chunks": 2, "prefetch_chunks": 3, "giveback_chunks": 1,
                               "held_bytes": 6 << 20})
    lend = gpu_lending(StatsSnapshot(1, 0, (g0, g1), (pair,)))
    assert (lend[0].borrowed_bytes, lend[0].borrowed_chunks, lend[0].fetched_back_chunks, lend[0].lent_chunks) == \
        (6 << 20, 5, 2, 0)
    assert (lend[1].lent_bytes, lend[1].lent_peak_bytes, lend[1].lent_chunks, lend[1].given_back_chunks) == \
        (6 << 20, 8 << 20, 8, 1)


def test_tenant_figures_side_by_side() -> None:
    rows = [
        {"policy": "stock", "sweep_value": None, "tenant": "h", "gpu": 0, "role": "harvester", "foreground": True,
         "runtime_ns": 300, "ops_per_s": 1.0, "slowdown_vs_alone": None},
        {"policy": "huvm", "sweep_value": None, "tenant": "h", "gpu": 0, "role": "harvester", "foreground": True,
         "runtime_ns": 100, "ops_per_s": 3.0, "slowdown_vs_alone": None},
        {"policy": "huvm", "sweep_value": None, "tenant": "l", "gpu": 1, "role": "lender", "foreground": False,
         "runtime_ns": 100, "ops_per_s": 9.0, "slowdown_vs_alone": 1.015},
        {"policy": "ideal", "sweep_value": None, "tenant": "h", "gpu": 0, "role": "harvester", "foreground": True,
         "runtime_ns": 50, "ops_per_s": 6.0, "slowdown_vs_alone": None},
    ]
    figs = {(f.policy, f.tenant): f for f in tenant_figures(rows)}
    assert ("ideal", "h") not in figs
    assert figs[("stock", "h")].harvester_speedup == 1.0
    assert figs[("huvm", "h")].harvester_speedup == 3.0 and figs[("huvm", "h")].lender_slowdown is None
    assert figs[("huvm", "l")].lender_slowdown == 1.015 and figs[("huvm", "l")].harvester_speedup is None


def test_sim_experiment_stats_show_tenants(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, "--sim", "--sim-config", EXAMPLE, "stats")
    assert doc["kind"] == "stats" and doc["tenants"]
    by = {(t["policy"], t["tenant"]): t for t in doc["tenants"]}
    harvesters = [t for t in doc["tenants"] if t["role"] == "harvester"]
    lenders = [t for t in doc["tenants"] if t["role"] == "lender"]
    assert harvesters and lenders
    for t in harvesters:
        stock = by[("stock", t["tenant"])]
        assert t["harvester_speedup"] == pytest.approx(stock["runtime_ns"] / t["runtime_ns"])
    assert all(t["lender_slowdown"] is not None and t["lender_slowdown"] > 0 for t in lenders)
    assert any(t["harvester_speedup"] > 1.2 for t in harvesters if t["policy"] == "huvm")
    # the table: both figures in one row per tenant, and the lending per GPU
    assert main(["--sim", "--sim-config", EXAMPLE, "stats"]) == 0
    text = capsys.readouterr().out
    assert "Lending per GPU" in text and "speedup over stock" in text and "x)" in text and " %)" in text


def test_plain_sim_node_has_no_tenants(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, "--sim", "stats")
    assert doc["tenants"] is None


def test_stats_of_an_experiment_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    exp = tmp_path / "e.toml"
    exp.write_text(SMALL)
    outdir = tmp_path / "run"
    assert main(["experiment", "run", str(exp), "--out", str(outdir)]) == 0
    capsys.readouterr()
    doc = _json(capsys, "stats", "--run", str(outdir))
    assert doc["kind"] == "stats-tenants" and doc["run"] == str(outdir)
    summary = json.loads((outdir / "summary.json").read_text())
    stock = {r["tenant"]: r["runtime_ns"] for r in summary["tenants"] if r["policy"] == "stock"}
    for t in doc["tenants"]:
        if t["role"] == "harvester":
            assert t["harvester_speedup"] == pytest.approx(stock[t["tenant"]] / t["runtime_ns"])
        if t["role"] == "lender":
            assert t["lender_slowdown"] is not None
    assert {t["policy"] for t in doc["tenants"]} == {"stock", "huvm"}
    assert main(["stats", "--run", str(outdir)]) == 0
    assert "stock" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [(), ("--watch", "1"), ("--reset",)])
def test_stats_run_refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: tuple[str, ...]) -> None:
    """A folder that is not an experiment's output, or a --run with flags that need a node: one line, non-zero."""
    target = tmp_path / "nothing"
    target.mkdir()
    if extra:
        (target / "summary.json").write_text(json.dumps({"tenants": []}))
    assert main(["stats", "--run", str(target), *extra]) != 0
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1 and "Traceback" not in err
    if not extra:
        assert "summary.json" in err


def test_guest_traffic_is_the_sum_the_core_budgets() -> None:
    """The guests' traffic through a GPU that `huvmctl stats` shows is what the core's lender budget measures
    (huvm_guest_traffic_total): evicted or prefetched onto it, fetched or given back from it; a GPU's own
    chunks and host traffic are not guests' traffic."""
    from huvm import abi, client
    from huvm.backend import KernelBackend
    from huvm.stats import guest_traffic_chunks
    from huvm_testing import CoreNode

    lib, chunk = abi.lib, abi.CHUNK_SIZE
    fake = CoreNode(3)
    core = fake.core
    host = lib.HUVM_DEST_HOST
    for owner, dst, n in ((0, 1, 5), (0, 2, 2), (2, 1, 3), (0, host, 7)):
        for k in range(n):
            lib.huvm_account_evict(core, owner, dst, lib.HUVM_REASON_PEER if dst != host else lib.HUVM_REASON_NO_PEER,
                                   0, chunk, (owner << 40) + (dst << 30) + k * chunk)
    lib.huvm_account_prefetch(core, 0, 1, 2 * chunk, 1 << 41)
    lib.huvm_account_fetch(core, 0, 1, lib.HUVM_FETCHED_MOVED, chunk, 0)
    lib.huvm_account_fetch(core, 0, host, lib.HUVM_FETCHED_MOVED, chunk, 0)
    lib.huvm_account_giveback(core, 1, 2, chunk, 0)
    kb = KernelBackend("/dev/nvidia-uvm", open_fn=lambda path, flags: 7, ioctl_fn=fake.fake_ioctl(),
                       close_fn=lambda fd: None)
    snap = client.Node(kb).stats()
    ours = guest_traffic_chunks(snap.pairs)
    cores = {g: lib.huvm_guest_traffic_total(core, g) // chunk for g in range(3)}
    assert cores == {0: 0, 1: 5 + 3 + 2 + 1 + 1, 2: 2}
    assert {g: ours.get(g, 0) for g in range(3)} == cores
    assert gpu_lending(snap)[1].guest_traffic_chunks == 12


def test_stats_interval_shows_guest_traffic_against_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """`huvmctl stats INTERVAL` on a simulated node with a workload: the guests' traffic through each GPU in
    MB/s (JSON: guest_traffic_mbyte_per_s), which for a GPU that takes guests' chunks is the pair counters'
    chunks over the interval, and the table of it against each GPU's budget."""
    docs = []
    assert main(["--sim", "--sim-config", EXAMPLE, "stats", "3", "2", "--pairs", "--json"]) == 0
    for line in capsys.readouterr().out.splitlines():
        doc = json.loads(line)
        jsonout.validate(doc)
        docs.append(doc)
    moved = [(g["gpu"], g["guest_traffic_mbyte_per_s"]) for d in docs for g in d["gpus"]
             if g["guest_traffic_mbyte_per_s"] > 0]
    assert moved, "no guests' traffic in 6 simulated seconds of the consolidation example"
    lend = [g for d in docs for g in d["gpus"] if g["gpu"] == 0]
    assert all(g["guest_traffic_mbyte_per_s"] == 0 for g in lend)        # GPU0 harvests, takes no guests
    assert main(["--sim", "--sim-config", EXAMPLE, "stats", "3", "2"]) == 0
    text = capsys.readouterr().out
    assert "Guests' traffic through each GPU" in text and "budget" in text
