"""The simulated twin of an emulated experiment (``huvmctl experiment run FILE --node sim-twin``,
huvmlab.experiment.twin): the emulated [node] run on the simulator at its granularity, k trace chunks per 2 MiB
block at scale 1/k, counts in chunk equivalents; no VM."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from huvm.cli import main
from huvm.errors import ConfigError
from huvmlab import experiment
from huvmlab.experiment.compare import compare
from huvmlab.experiment.output import write
from huvmlab.experiment.results import CounterRow, ExperimentResult, RunKey, RunResult
from huvmlab.experiment.spec import EMULATED_RESERVED_BYTES
from huvmlab.experiment.twin import granularity, twin_node
from huvmlab.sim import NodeConfig, TenantSpec, run_scenario, workloads

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "pyctl" / "huvm" / "examples" / "two-harvesters-emulated.toml"
MIB = 1 << 20

#: a small emulated experiment: Llama-tiny (1.7 GiB) harvests on GPU 0 of two 64 MiB software GPUs at 1/16
#: (32 MiB of UVM memory: 1 GiB at trace scale), GPU 1 holds a 64 MiB static footprint (4 MiB scaled)
SMALL = """[experiment]
name = "twin-small"
policies = ["stock", "huvm"]
ideal = false
[node]
kind = "emulated"
preset = "aws-p3.8xlarge"
gpus = 2
fb_mib = 64
scale = {scale}
time_scale = "1/16"
[[tenant]]
name = "llama"
gpu = 0
trace = "bundled:llama-tiny"
steps = 1
role = "harvester"
[[tenant]]
name = "idle"
gpu = 1
static = "64MiB"
role = "lender"
"""


def write_file(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_twin_node_of_the_shipped_two_harvesters_file() -> None:
    spec = experiment.load(SHIPPED)
    assert spec.emulated is not None and spec.emulated.scale == 1 / 32
    assert granularity(spec) == 32
    cfg = twin_node(spec)
    assert cfg.gpu_count == 4
    for g in range(4):  # 128 MiB framebuffers less the software GPU's RM reserve: UVM's 96 MiB
        assert cfg.gpus[g].memory_bytes == 128 * MIB and cfg.gpus[g].reserved_bytes == EMULATED_RESERVED_BYTES
        assert cfg.usable_bytes(g) == 96 * MIB
    assert cfg.topology == NodeConfig.preset("aws-p3.8xlarge").subset(4).topology


def test_twin_node_at_another_scale(tmp_path: Path) -> None:
    # the shipped file at 1/8 with 416 MiB framebuffers: k = 8, 384 MiB of UVM memory (192 blocks) per GPU
    text = SHIPPED.read_text().replace("fb_mib = 128", "fb_mib = 416").replace('scale = "1/32"', 'scale = "1/8"')
    spec = experiment.load(write_file(tmp_path, text))
    assert granularity(spec) == 8
    cfg = twin_node(spec)
    assert cfg.gpu_count == 4 and cfg.usable_bytes(0) == 384 * MIB


def test_the_reserve_is_the_software_gpus() -> None:
    # one number: the software GPU's rm_reserved_mib default (driver/softgpu/sg_main.c) is the Python constant
    src = (ROOT / "driver" / "softgpu" / "sg_main.c").read_text()
    m = re.search(r"static unsigned int sg_param_rm_reserved_mib = ([0-9]+);", src)
    assert m is not None
    assert int(m.group(1)) * MIB == EMULATED_RESERVED_BYTES


def test_the_twin_keeps_the_software_gpus_reserve_whatever_the_file_says(tmp_path: Path) -> None:
    text = SMALL.format(scale='"1/16"').replace('fb_mib = 64\n', 'fb_mib = 64\ngpu_reserved_bytes = "16MiB"\n')
    spec = experiment.load(write_file(tmp_path, text))
    assert experiment.executor.node_config(spec).gpus[0].reserved_bytes == 16 * MIB
    assert twin_node(spec).gpus[0].reserved_bytes == EMULATED_RESERVED_BYTES


@pytest.mark.parametrize(("scale", "why"), [('"1/3"', "680KiB"), ("0.3", "612KiB"), ('"1/1024"', "4KiB")])
def test_a_scale_without_whole_chunks_per_block_is_refused(tmp_path: Path, scale: str, why: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    text = SMALL.format(scale=scale).replace("fb_mib = 64", "fb_mib = 128")
    path = write_file(tmp_path, text)
    spec = experiment.load(path)
    with pytest.raises(ConfigError) as info:
        granularity(spec)
    assert info.value.key == "node.scale"
    assert info.value.line == text.splitlines().index(f'scale = {scale}') + 1
    assert why in info.value.reason and "1/k" in info.value.reason
    rc = main(["experiment", "run", str(path), "--node", "sim-twin", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc != 0 and "node.scale" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_only_an_emulated_node_has_a_twin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = ROOT / "pyctl" / "huvm" / "examples" / "two-harvesters.toml"
    with pytest.raises(ConfigError) as info:
        granularity(experiment.load(sim))
    assert info.value.key == "node.kind" and "emulated" in info.value.reason
    rc = main(["experiment", "run", str(SHIPPED), "--node", "sim-twim", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc != 0 and "sim-twim" in err and "sim-twin" in err and "Traceback" not in err


def _coarse_reference(k: int, policy: str) -> dict[str, int]:
    """The small file's run by hand, with the simulator's API: the trace coarsened by k on 64 MiB GPUs with
    the software GPU's reserve, the static footprint scaled by 1/k; GPU counters summed, times k."""
    import huvmlab.traces as traces

    node = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(64 * MIB, EMULATED_RESERVED_BYTES)
    trace = workloads.coarsen(traces.load(traces.bundled("llama-tiny")).to_sim_events(node.gpu_preset), k)
    tenants = [TenantSpec(0, trace, name="llama", role="harvester"),
               TenantSpec(1, name="idle", static_bytes=64 * MIB // k, role="lender")]
    res = run_scenario(node, tenants, policy)
    return {m: k * sum(int(g[m]) for g in res.stats["gpus"]) for m in ("evict_to_host", "evict_to_peer",
                                                                        "fetch_from_peer", "faults")}


def _gpu_totals(out: Path, policy: str) -> dict[str, int]:
    tot: dict[str, int] = {}
    for r in pq.read_table(out / "data" / "counters.parquet").to_pylist():
        if r["policy"] == policy and r["scope"] == "gpu":
            tot[r["metric"]] = tot.get(r["metric"], 0) + r["value"]
    return tot


def test_a_twin_run_counts_chunk_equivalents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k = 16
    path = write_file(tmp_path, SMALL.format(scale=f'"1/{k}"'))
    out = tmp_path / "twin"
    assert main(["experiment", "run", str(path), "--node", "sim-twin", "--out", str(out), "--no-progress"]) == 0
    assert "the emulated node's twin, granularity 16" in capsys.readouterr().out
    for policy in ("stock", "huvm"):
        got = _gpu_totals(out, policy)
        want = _coarse_reference(k, policy)
        assert {m: got[m] for m in want} == want
        assert all(got[m] % k == 0 for m in want)
    stock, huvm = _gpu_totals(out, "stock"), _gpu_totals(out, "huvm")
    assert stock["evict_to_host"] > 0 and stock["evict_to_peer"] == 0
    assert huvm["evict_to_peer"] > 0 and huvm["fetch_from_peer"] > 0
    # without the coarsening (the fine trace on the same GPUs) the counts differ: the test can tell
    import huvmlab.traces as traces

    node = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(64 * MIB, EMULATED_RESERVED_BYTES)
    fine = run_scenario(node, [TenantSpec(0, traces.load(traces.bundled("llama-tiny")).to_sim_events("v100"))],
                        "stock")
    assert int(fine.stats["gpus"][0]["evict_to_host"]) * k != stock["evict_to_host"]
    # bytes moved are chunk equivalents too: every block evicted to the host is k x 2 MiB of PCIe
    host = sum(r["bytes"] for r in pq.read_table(out / "data" / "traffic.parquet").to_pylist()
               if r["policy"] == "stock" and r["path"] == "gpu_to_host")
    assert host == stock["bytes_to_host"] and host % (k * 2 * MIB) == 0 and host > 0
    # memory samples at full size: GPU 0 never holds more than its usable 32 MiB x k
    samples = [r for r in pq.read_table(out / "data" / "samples.parquet").to_pylist() if r["gpu"] == 0]
    assert max(s["own_bytes"] for s in samples) <= 32 * MIB * k
    assert max(s["own_bytes"] for s in samples) > 32 * MIB  # (it would be <= 32 MiB in blocks)
    runs = pq.read_table(out / "data" / "runs.parquet").to_pylist()
    assert {(r["node_kind"], r["scale"], r["granularity"], r["node_gpus"]) for r in runs} == {("sim", 1.0, 16.0, 2)}
    report = (out / "report.md").read_text()
    assert "simulated twin of the emulated node at its granularity: k = 16" in report
    assert "node.time_scale (1/16)" in report


def _emulated_folder(tmp_path: Path, twin: Path, k: int) -> Path:
    """An emulated node's output folder at scale 1/k whose module counted, in blocks, exactly the twin's
    chunk equivalents divided by k."""
    res = ExperimentResult("twin-small", "", "aws-p3.8xlarge[:2]", None)
    for policy in ("stock", "huvm"):
        key = RunKey(policy, None, 0)
        r = RunResult(key, 10**9, node={"kind": "emulated", "module": "nvidia-uvm 535.261.03 + huvm", "preset":
                                         "aws-p3.8xlarge", "scale": 1 / k, "gpus": 2, "granularity": float(k)})
        for row in pq.read_table(twin / "data" / "counters.parquet").to_pylist():
            if row["policy"] == policy and row["scope"] == "gpu" and row["metric"] in ("evict_to_host",
                                                                                        "evict_to_peer"):
                r.counters.append(CounterRow(key, "gpu", row["gpu"], -1, row["metric"], row["value"] // k))
        res.runs.append(r)
    out = tmp_path / "emulated"
    write(res, out)
    return out


def test_compare_a_twin_with_its_emulated_run(tmp_path: Path) -> None:
    k = 16
    path = write_file(tmp_path, SMALL.format(scale=f'"1/{k}"'))
    twin = tmp_path / "twin"
    experiment.run_to(experiment.load(path), twin, node="sim-twin")
    emu = _emulated_folder(tmp_path, twin, k)
    c = compare(twin, emu, links=False)
    rows = {(r.policy, r.counter): r for r in c.rows}
    for key in (("stock", "evict_to_host"), ("huvm", "evict_to_peer")):
        assert rows[key].a > 0 and rows[key].b == rows[key].a and rows[key].rel_error == 0.0
    assert c.normalized and c.a.scale == 1.0 and c.b.scale == 1 / k
    assert any("same granularity: 16 trace chunks" in n for n in c.notes)
    # the full-size simulator against the same emulated run: the notes point at the twin
    sim = tmp_path / "sim"
    experiment.run_to(experiment.load(write_file(tmp_path, SMALL.format(scale='"1/16"').replace(
        'kind = "emulated"\n', "").replace("gpus = 2\nfb_mib = 64\n", 'gpu_count = 2\ngpu_memory_bytes = "2GiB"\n')
        .replace('scale = "1/16"\ntime_scale = "1/16"\n', ""), "sim.toml")), sim)
    notes = compare(sim, emu, links=False).notes
    assert any("different granularities: 1 (A) and 16 (B)" in n and "--node sim-twin" in n for n in notes)
