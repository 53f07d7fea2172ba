"""huvmctl calibrate (issue 24, item 3): the library and the command against a fake backend whose samples are
the shipped H200 record's, the real CUDA backend against a fake NVML and a stand-in benchmark, the safety
rules (busy GPU, free memory), every refusal as one line with its exit status, and the round trip of the node
TOML through the code ``--sim-config`` uses."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from huvm import jsonout
from huvm.cli import main
from huvm.errors import HuvmError, UsageError
from huvmlab import calibration
from huvmlab.calibration import CalibrationRefused, GpuProcess, GpuState, Plan, Samples
from huvmlab.calibration import cuda as cb
from huvmlab.sim import measured
from huvmlab.sim.config import GIB, PRESETS, GpuSpec, NodeConfig, node_from_measurement
from huvmlab.simbackend import SimBackend

#: the first of the H200 records the model's defaults pool (huvm.data): the fake backend's samples
RECORD_NAME = measured.REFERENCE_RECORDS[0]
RECORD_FILE = Path(jsonout.__file__).parent / "data" / "calibration" / f"{RECORD_NAME}.json"
REF: dict[str, Any] = json.loads(RECORD_FILE.read_text())
#: what derive gives that record alone
REF_COSTS = measured.derive(measured.NodeMeasurement.builtin(RECORD_NAME))
MIB = 1 << 20


def h200_state(**kw: Any) -> GpuState:
    n = REF["node"]
    base = GpuState(index=0, name=n["gpu_name"], memory_total_bytes=n["memory_total_bytes"],
                    memory_free_bytes=n["memory_free_bytes"], driver=n["driver"], cuda=n["cuda"], gpu_count=1,
                    hbm_mbyte_per_s=n["hbm_mbyte_per_s"], hbm_source="nvml", pcie_gen=5, pcie_width=16,
                    processes=())
    return replace(base, **kw)


class FakeBackend:
    """The tests' backend: the H200 record's samples for whatever plan it is given; it checks the plan keeps
    every allocation within half the free memory the probe reported."""

    method = "fake backend (samples of the shipped H200 record)"

    def __init__(self, state: GpuState | None = None, probe_error: Exception | None = None) -> None:
        self.state = state or h200_state()
        self.probe_error = probe_error
        self.plans: list[Plan] = []

    def probe(self, gpu: int) -> GpuState:
        if self.probe_error is not None:
            raise self.probe_error
        return replace(self.state, index=gpu)

    def run(self, plan: Plan) -> Samples:
        self.plans.append(plan)
        half = self.state.memory_free_bytes // 2
        assert plan.size_bytes <= plan.max_alloc_bytes <= half
        assert all(n <= plan.block_regions for n in plan.concurrencies)
        assert plan.block_regions * measured.CHUNK_BYTES <= plan.max_alloc_bytes
        assert plan.serial_regions * measured.CHUNK_BYTES <= plan.size_bytes
        return Samples(tests={k: tuple(v) for k, v in REF["tests"].items()},
                       block_fault_us={n: tuple(REF["block_fault_us"][str(n)]) for n in plan.concurrencies})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    backend = FakeBackend()
    monkeypatch.setattr(calibration, "default_backend", lambda **kw: backend)
    return backend


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse refuses an argument
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("huvmctl: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


# ---- the library ----

def test_the_record_of_a_run_derives_the_reference_costs() -> None:
    """The record made from the H200 samples is a huvm-calibration/1 record that derives exactly what the
    shipped one does (derive is the one definition: calibrate only records)."""
    cal = calibration.measure(FakeBackend(), 0)
    again = measured.NodeMeasurement.from_dict(json.loads(json.dumps(cal.data)))
    assert measured.derive(again) == REF_COSTS
    node = cal.data["node"]
    assert node["gpu_name"] == "NVIDIA H200" and node["driver"] == "580.159.04" and node["topology"] == [["X"]]
    assert "by huvmctl calibrate" in node["method"] and node["hbm_source"] == "nvml"
    assert list(cal.data["tests"])[:len(measured.RATE_TESTS)] == list(measured.RATE_TESTS)
    assert set(cal.data["block_fault_us"]) == {str(n) for n in calibration.CONCURRENCIES}


def test_the_node_toml_loads_back_through_sim_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cal = calibration.measure(FakeBackend(), 0)
    rec, toml = calibration.write(cal, tmp_path, "n")
    assert rec is not None and measured.NodeMeasurement.load(rec) == cal.measurement
    want = node_from_measurement(cal.measurement, name="n")
    assert SimBackend.from_config(str(toml)).node.config == want == calibration.load_node(toml)
    costs = vars(want.costs)
    derived = measured.derive(cal.measurement)
    assert {k: costs[k] for k in measured.COST_KEYS} == {k: derived[k] for k in measured.COST_KEYS}
    assert want.gpus[0].pcie_mbyte_per_s == derived["pcie_mbyte_per_s"]
    rc, out, _ = run_cli(capsys, "--sim", "--sim-config", str(toml), "status", "--json")
    assert rc == 0 and len(json.loads(out)["node"]["gpus"]) == 1


class D2dBackend(FakeBackend):
    """The fake backend with a device-to-device copy test (``hbm_d2d_copy``, issue 28) among its samples."""

    def run(self, plan: Plan) -> Samples:
        got = super().run(plan)
        return replace(got, tests={**got.tests, "hbm_d2d_copy": (3_900_000.0, 4_000_000.0, 3_950_000.0)})


def test_a_measured_d2d_copy_is_the_hbm_rate_the_rates_load(tmp_path: Path) -> None:
    """With the device-to-device copy measured, the record's HBM rate is its median (NVML's peak kept beside it),
    the node TOML's lend_chunk_ns is 2 MiB at that rate, and `huvmctl rates load` reads that rate back from the
    TOML (the give-back rate from the same record's eviction path)."""
    from huvm import rates

    cal = calibration.measure(D2dBackend(), 0)
    node = cal.data["node"]
    assert node["hbm_mbyte_per_s"] == 3_950_000 and node["hbm_source"] == "measured-d2d"
    assert node["hbm_peak_mbyte_per_s"] == REF["node"]["hbm_mbyte_per_s"]
    assert cal.data["tests"]["hbm_d2d_copy"] == [3_900_000, 4_000_000, 3_950_000]
    _, toml = calibration.write(cal, tmp_path, "n")
    (hbm, giveback), = rates.from_node_file(toml)
    assert hbm == measured.CHUNK_BYTES * 1000 // measured.copy_ns(3_950_000)
    assert giveback == rates.from_node_file(calibration.write(calibration.measure(FakeBackend(), 0), tmp_path,
                                                              "ref")[1])[0][1]     # the HBM rate does not move it
    # without the copy test (records before issue 28): NVML's peak, as before
    assert calibration.measure(FakeBackend(), 0).data["node"]["hbm_source"] == "nvml"


def test_write_refuses_a_toml_that_does_not_load_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cal = calibration.measure(FakeBackend(), 0)
    monkeypatch.setattr(calibration, "load_node", lambda path: PRESETS["hgx-h100"])
    with pytest.raises(HuvmError, match="does not load back"):
        calibration.write(cal, tmp_path, "n")


def test_nearest_preset_by_memory_and_pcie() -> None:
    def node(mem: int, pcie: int) -> NodeConfig:
        return NodeConfig("x", (GpuSpec("g", mem, 512 * MIB, pcie),), (("X",),))

    assert calibration.nearest_preset(node(16 * GIB, 12_000)) == "aws-p3.8xlarge"  # tie with dgx-1: by name
    assert calibration.nearest_preset(node(24 * GIB, 24_000)) == "ariadne-a5000"
    assert calibration.nearest_preset(node(40 * GIB, 25_000)) == "dgx-a100-40g"
    assert calibration.nearest_preset(node(80 * GIB, 50_000)) == "hgx-h100"
    rows = calibration.compare(node(40 * GIB, 48_000), "dgx-a100-40g")
    by = {r.key: r for r in rows}
    assert [r.key for r in rows] == [k for k, _, _ in calibration.CONSTANTS]
    assert by["pcie_mbyte_per_s"].ratio == 2.0 and by["memory_bytes"].ratio == 1.0
    assert by["fault_service_ns"].node == PRESETS["dgx-a100-40g"].costs.fault_service_ns


def test_a_busy_gpu_is_refused() -> None:
    hog = GpuProcess(4242, "python", 60 * GIB)
    total = REF["node"]["memory_total_bytes"]
    with pytest.raises(CalibrationRefused, match=r"busy: .* by pid 4242 \(python, 60.0 GiB\)") as e:
        calibration.make_plan(h200_state(processes=(hog,), memory_free_bytes=total - 61 * GIB))
    assert e.value.reason == "gpu-busy"
    # without NVML's process list: total less free says the same
    with pytest.raises(CalibrationRefused, match="by another process"):
        calibration.make_plan(h200_state(processes=None, memory_free_bytes=total // 2))
    # NVML lists a process without its memory (a container) and the memory is in use: busy
    with pytest.raises(CalibrationRefused, match=r"pid 7 \(x\)"):
        calibration.make_plan(h200_state(processes=(GpuProcess(7, "x", None),), memory_free_bytes=total // 2))
    # an idle small GPU: the probe's own context is not another process
    calibration.make_plan(h200_state(processes=None, memory_total_bytes=4 * GIB, memory_free_bytes=3400 * MIB),
                          size_bytes=256 * MIB)
    # a small neighbour is fine
    calibration.make_plan(h200_state(processes=(GpuProcess(9, "y", 1 * GIB),),
                                     memory_free_bytes=total - 2 * GIB))


def test_allocations_stay_within_half_the_free_memory() -> None:
    small = h200_state(memory_total_bytes=4 * GIB, memory_free_bytes=int(3.8 * GIB))
    with pytest.raises(CalibrationRefused, match="more than 50% of it") as e:
        calibration.make_plan(small, size_bytes=2 * GIB)
    assert e.value.reason == "no-memory"
    plan, notes = calibration.make_plan(small, size_bytes=1 * GIB)
    assert plan.max_alloc_bytes <= small.memory_free_bytes // 2 and plan.size_bytes <= plan.max_alloc_bytes
    assert max(plan.concurrencies) == 256 and "1024" in notes[0]  # 2 GiB of regions would not fit
    cal = calibration.measure(FakeBackend(small), 0, size_bytes=1 * GIB)
    assert set(cal.data["block_fault_us"]) == {str(n) for n in plan.concurrencies}
    with pytest.raises(UsageError, match="multiple of 2MiB"):
        calibration.make_plan(small, size_bytes=3 * MIB)


# ---- the command ----

def test_calibrate_writes_the_record_and_the_node(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  fake: FakeBackend) -> None:
    rc, out, err = run_cli(capsys, "calibrate", "--out", str(tmp_path), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    jsonout.validate(doc)
    name = "h200-580.159.04"
    assert doc["record_file"] == str(tmp_path / f"{name}.json") and doc["node_file"] == str(tmp_path / f"{name}.toml")
    assert doc["nearest_preset"] == calibration.nearest_preset(calibration.load_node(doc["node_file"]))
    m = measured.NodeMeasurement.load(doc["record_file"])
    assert measured.derive(m) == REF_COSTS
    assert calibration.load_node(doc["node_file"]) == node_from_measurement(m, name=name)
    assert len(fake.plans) == 1 and fake.plans[0].size_bytes == calibration.DEFAULT_SIZE
    # the table: every constant with the preset's and the ratio
    rc, out, _ = run_cli(capsys, "calibrate", "--out", str(tmp_path), "--name", "b", "--size", "512MiB")
    assert rc == 0 and "against the nearest preset" in out and "node / preset" in out
    for _, what, _ in calibration.CONSTANTS:
        assert what in out
    assert (tmp_path / "b.toml").is_file() and fake.plans[-1].size_bytes == 512 * MIB


def test_calibrate_from_a_record_needs_no_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "default_backend", lambda **kw: pytest.fail("no backend with --record"))
    rc, out, _ = run_cli(capsys, "calibrate", "--record", str(RECORD_FILE))
    assert rc == 0 and "nearest preset, h200" in out and not list(tmp_path.iterdir())
    rc, out, _ = run_cli(capsys, "calibrate", "--record", str(RECORD_FILE), "--out", str(tmp_path), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["record_file"] is None and doc["source"] == str(RECORD_FILE)
    assert [p.name for p in tmp_path.iterdir()] == ["h200-580.159.04.toml"]


@pytest.mark.parametrize(("error", "needle"), [
    (CalibrationRefused("no NVIDIA GPU: NVML lists none", reason="no-gpu"), "no NVIDIA GPU"),
    (CalibrationRefused("no CUDA compiler: nvcc not found (x)", reason="no-cuda", hint=cb.CUDA_HINT),
     "hint: install the CUDA toolkit"),
])
def test_no_gpu_or_no_cuda_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, error: Exception, needle: str) -> None:
    monkeypatch.setattr(calibration, "default_backend", lambda **kw: FakeBackend(probe_error=error))
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path / "o"))
    assert rc == 1
    one_line_error(err, needle)
    assert not (tmp_path / "o").exists()


def test_busy_gpu_and_full_gpu_exit_1_without_measuring(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        fake: FakeBackend) -> None:
    total = fake.state.memory_total_bytes
    fake.state = h200_state(processes=(GpuProcess(4242, "python", 60 * GIB),), memory_free_bytes=total - 61 * GIB)
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path))
    assert rc == 1
    one_line_error(err, "is busy", "pid 4242")
    fake.state = h200_state(memory_total_bytes=2 * GIB, memory_free_bytes=int(1.9 * GIB))  # not busy, small
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path))
    assert rc == 1
    one_line_error(err, "1.9 GiB free", "lower --size")
    assert fake.plans == [] and not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [
    ("--size", "3MiB"), ("--size", "1TiB"), ("--size", "lots"), ("--repeat", "0"), ("--repeat", "33"),
    ("--gpu", "-1"), ("--name", "a/b"), ("--timeout", "0"), ("--sim",), ("--sim-config", "dgx-a100"),
])
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake: FakeBackend,
                              argv: tuple[str, ...]) -> None:
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path), *argv)
    assert rc == 2
    one_line_error(err)
    assert fake.plans == []


def test_output_problems_exit_2_before_measuring(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 fake: FakeBackend) -> None:
    (tmp_path / "file").write_text("")
    fake.probe_error = AssertionError("probed before the output folder was checked")
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path / "file" / "sub"))
    assert rc == 2
    one_line_error(err, "--out", "is not a folder")
    fake.probe_error = None
    (tmp_path / "h200-580.159.04.toml").write_text("mine")
    rc, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path))
    assert rc == 2
    one_line_error(err, "exists (--force overwrites it)")
    assert fake.plans == [] and (tmp_path / "h200-580.159.04.toml").read_text() == "mine"
    assert run_cli(capsys, "calibrate", "--out", str(tmp_path), "--force")[0] == 0
    assert (tmp_path / "h200-580.159.04.toml").read_text() != "mine"
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        rc, _, err = run_cli(capsys, "calibrate", "--out", str(ro))
        assert rc == 2
        one_line_error(err, "not writable")


def test_a_bad_record_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, "calibrate", "--record", str(RECORD_FILE), "--gpu", "1", "--size", "1GiB")
    assert rc == 2
    one_line_error(err, "not with --gpu, --size")
    rc, _, err = run_cli(capsys, "calibrate", "--record", str(tmp_path / "none.json"))
    assert rc == 2
    one_line_error(err, "no such file")
    bad = dict(REF, tests={k: v for k, v in REF["tests"].items() if k != "prefetch_d2h"})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc, _, err = run_cli(capsys, "calibrate", "--record", str(tmp_path / "bad.json"))
    assert rc == 2
    one_line_error(err, "tests.prefetch_d2h")


def test_several_records_are_pooled(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--record twice: one node of both runs' samples, the one the h200 preset is made of (the same rule);
    another GPU, or one file twice, is refused in one line and writes nothing."""
    data = RECORD_FILE.parent
    day2 = data / f"{measured.REFERENCE_RECORDS[1]}.json"
    rc, out, err = run_cli(capsys, "calibrate", "--record", str(RECORD_FILE), "--record", str(day2),
                           "--out", str(tmp_path), "--name", "pooled", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    jsonout.validate(doc)
    assert doc["source"] == f"{RECORD_FILE} + {day2}" and any("pooled 2 records" in n for n in doc["notes"])
    node = calibration.load_node(tmp_path / "pooled.toml")
    assert vars(node.costs) == vars(NodeConfig.preset("h200").costs)
    assert node.costs.fault_service_ns == measured.REFERENCE_COSTS["fault_service_ns"] != REF_COSTS[
        "fault_service_ns"]
    h100 = data / f"{measured.H100_RECORDS[0]}.json"
    for extra, needle in ((h100, "cannot pool"), (RECORD_FILE, "given twice")):
        rc, _, err = run_cli(capsys, "calibrate", "--record", str(RECORD_FILE), "--record", str(extra),
                             "--out", str(tmp_path / "no"))
        assert rc == 2
        one_line_error(err, needle)
    assert not (tmp_path / "no").exists()


# ---- the CUDA backend, without a GPU ----

def fake_nvml(count: int = 1, processes: list[Any] | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    ns = types.SimpleNamespace
    funcs: dict[str, Any] = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: count,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetPciInfo": lambda h: ns(busId=b"00000000:3B:00.0" if h == 0 else b"00000000:86:00.0"),
        "nvmlSystemGetDriverVersion": lambda: "580.159.04", "nvmlDeviceGetMemoryBusWidth": lambda h: 5120,
        "nvmlDeviceGetMaxClockInfo": lambda h, clock: 2619, "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: processes or [],
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
    }
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


STAND_IN = """#!{python}
# the benchmark's stand-in: mode from $FAKE_BENCH ({record})
import json, os, sys
mode = os.environ.get("FAKE_BENCH", "ok")
rec = json.load(open({record!r}))
if mode == "nodev":
    sys.stderr.write("huvm-calibrate: error: no CUDA device (none found)\\n"); sys.exit(5)
if mode == "olddriver":
    sys.stderr.write("huvm-calibrate: error: no CUDA device (CUDA driver version is insufficient for CUDA "
                     "runtime version)\\n"); sys.exit(5)
if mode == "refuse" and sys.argv[1] == "run":
    sys.stderr.write("huvm-calibrate: error: managed buffer of 9 bytes refused: too big\\n"); sys.exit(3)
if mode == "garbage":
    print("not json"); sys.exit(0)
if sys.argv[1] == "probe":
    print(json.dumps({{"device_count": 2, "name": "NVIDIA H200", "pci_bus_id": "0000:3b:00.0",
        "memory_total_bytes": rec["node"]["memory_total_bytes"], "memory_free_bytes": rec["node"]["memory_free_bytes"],
        "runtime_version": 12040, "driver_api_version": 13000, "memory_clock_khz": 0, "memory_bus_width_bits": 0,
        "managed_memory": 1, "concurrent_managed_access": 1, "multiprocessors": 132}}))
else:
    dev, size, repeat, max_alloc, conc, serial, regions = sys.argv[2:]
    assert int(size) <= int(max_alloc), (size, max_alloc)
    assert max(map(int, conc.split(","))) <= int(regions) and int(regions) * 2**21 <= int(max_alloc)
    print(json.dumps({{"tests": rec["tests"],
        "block_fault_us": {{n: rec["block_fault_us"][n] for n in conc.split(",")}}}}))
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    exe = tmp_path / "huvm-calibrate"
    exe.write_text(STAND_IN.format(python=sys.executable, record=str(RECORD_FILE)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_cuda_backend_with_a_stand_in_benchmark(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_BENCH", "ok")
    hog = types.SimpleNamespace(pid=4242, usedGpuMemory=1 << 30)
    backend = cb.CudaBackend(executable=stand_in, nvml_module=fake_nvml(processes=[hog]))
    state = backend.probe(0)
    assert (state.name, state.driver, state.cuda, state.gpu_count) == ("NVIDIA H200", "580.159.04", "12.4", 2)
    assert state.hbm_mbyte_per_s == 3_352_320 and state.hbm_source == "nvml"  # NVML's, matched by bus id
    assert (state.pcie_gen, state.pcie_width) == (5, 16)
    assert state.processes is not None and [p.pid for p in state.processes] == [4242]
    cal = calibration.measure(backend, 0, state=state)
    assert measured.derive(cal.measurement) == dict(REF_COSTS, lend_chunk_ns=measured.copy_ns(3_352_320))
    assert any("other process" in n for n in cal.notes)


@pytest.mark.parametrize(("mode", "reason", "match"), [
    ("nodev", "no-gpu", "no CUDA device"), ("olddriver", "no-cuda", "driver version is insufficient"),
    ("refuse", "no-memory", "refused an allocation"), ("garbage", "benchmark-failed", "printed no JSON"),
])
def test_cuda_backend_failures(stand_in: Path, monkeypatch: pytest.MonkeyPatch, mode: str, reason: str,
                               match: str) -> None:
    monkeypatch.setenv("FAKE_BENCH", mode)
    backend = cb.CudaBackend(executable=stand_in, nvml_module=fake_nvml())
    with pytest.raises(CalibrationRefused, match=match) as e:
        backend.probe(0) if mode != "refuse" else calibration.measure(backend, 0)
    assert e.value.reason == reason


def test_cuda_backend_without_a_gpu_or_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CalibrationRefused, match="NVML lists none") as e:
        cb.CudaBackend(nvml_module=fake_nvml(count=0)).probe(0)
    assert e.value.reason == "no-gpu"
    with pytest.raises(CalibrationRefused, match="nvcc not found") as e:
        cb.CudaBackend(nvcc=str(tmp_path / "no-nvcc"), nvml_module=fake_nvml()).probe(0)
    assert e.value.reason == "no-cuda" and e.value.hint == cb.CUDA_HINT
    for var in ("NVCC", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    if not Path("/usr/local/cuda/bin/nvcc").exists():
        with pytest.raises(CalibrationRefused, match="/usr/local/cuda/bin/nvcc"):
            cb.find_nvcc()
    bad = tmp_path / "nvcc"
    bad.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho 'x.cu(1): error: no such thing' >&2\nexit 1\n")
    bad.chmod(0o755)
    assert cb.find_nvcc() == bad
    with pytest.raises(CalibrationRefused, match=r"failed: x.cu\(1\): error: no such thing"):
        cb.build(bad, tmp_path / "build")
    assert not list((tmp_path / "build").iterdir())


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="no nvcc")


@needs_nvcc
def test_the_benchmark_builds_with_nvcc(tmp_path: Path) -> None:
    """The shipped CUDA C source compiles (and is cached); where there is a GPU, its probe answers."""
    nvcc = cb.find_nvcc()
    exe = cb.build(nvcc, tmp_path)
    assert exe.is_file() and cb.build(nvcc, tmp_path) == exe  # the second call is the cache
    r = subprocess.run([str(exe), "probe", "0"], capture_output=True, text=True, timeout=120, check=False)
    if r.returncode == 0:
        assert json.loads(r.stdout)["memory_total_bytes"] > 0
    else:
        assert r.returncode == cb.EXIT_NO_DEVICE and r.stderr.startswith("huvm-calibrate: error: no CUDA device")
    r = subprocess.run([str(exe), "run", "0", "1"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == cb.EXIT_USAGE and "usage" in r.stderr


def test_help_names_the_safety_rules_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "calibrate", "--help")
    assert rc == 0 and "examples:" in out and "huvmctl calibrate --record" in out
    assert "half its free memory" in " ".join(out.split()) and "10% of its memory" in " ".join(out.split())


@needs_nvcc
def test_the_benchmark_on_a_fake_cuda_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real benchmark, built with -cudart shared, run on fake_cudart.c (the CUDA calls on the CPU): its JSON
    is a record, every allocation it makes is within the plan's limit and half the free memory, and it
    refuses an allocation above them by itself."""
    nvcc = cb.find_nvcc()
    # the runtime headers of nvcc's toolkit (include/ next to bin/nvcc; nvcc may be a wrapper script: then the
    # usual toolkit places)
    roots = [nvcc.resolve().parents[1], *(Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if v in os.environ),
             *sorted(Path("/usr/local").glob("cuda*"), reverse=True)]
    includes = [d for d in (r / "include" for r in roots) if (d / "cuda_runtime_api.h").is_file()][:1]
    if not includes:
        pytest.skip("no CUDA runtime headers")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    exe = cb.build(nvcc, tmp_path / "build", flags=("-cudart", "shared"))
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=False).stdout
    soname = re.search(r"libcudart\.so\.\d+", ldd)
    assert soname, ldd
    fake_dir = tmp_path / "fake"
    fake_dir.mkdir()
    (fake_dir / "ver.map").write_text(f"{soname.group(0)} {{ global: *; }};\n")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", *(f"-I{d}" for d in includes),
                    f"-Wl,--version-script={fake_dir / 'ver.map'}",
                    f"-Wl,-soname,{soname.group(0)}", "-o", str(fake_dir / soname.group(0)),
                    str(Path(__file__).with_name("fake_cudart.c"))], check=True)
    log = tmp_path / "allocs.log"
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_dir))
    monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
    monkeypatch.setenv("FAKE_CUDA_TOTAL", str(1229 * MIB))
    monkeypatch.setenv("FAKE_CUDA_FREE", str(1126 * MIB))
    backend = cb.CudaBackend(executable=exe, nvml_module=fake_nvml())
    cal = calibration.measure(backend, 0, size_bytes=64 * MIB, repeat=2)
    plan, _ = calibration.make_plan(backend.probe(0), size_bytes=64 * MIB, repeat=2)
    node = cal.data["node"]
    assert node["gpu_name"] == "Fake GPU H200" and node["memory_total_bytes"] == 1229 * MIB
    assert set(cal.data["block_fault_us"]) == {str(n) for n in plan.concurrencies} and 1024 not in plan.concurrencies
    assert all(len(v) == 2 for v in cal.data["tests"].values())
    assert all(len(v) == 4 for v in cal.data["block_fault_us"].values())  # reads and writes
    assert cal.data["tests"]["fault_serial_2m_us"] == [1000 / 32] * 2  # 64 MiB: 32 regions, 1 ms
    allocs = [line.split() for line in log.read_text().splitlines()]
    gpu = [(int(n), int(free)) for kind, n, free in allocs if kind != "pinned"]
    assert gpu and all(n <= plan.max_alloc_bytes and n <= free // 2 for n, free in gpu)
    # the block faults' buffer is every region the limit allows (fewer than 2 GiB here), at every concurrency:
    # each sample is the kernel's time (1 ms here) over all its regions, not over the regions in flight
    assert plan.block_regions == plan.max_alloc_bytes // measured.CHUNK_BYTES < calibration.BLOCK_REGIONS
    assert max(n for n, _ in gpu) == plan.block_regions * measured.CHUNK_BYTES
    assert cal.data["node"]["block_fault_regions"] == plan.block_regions
    assert all(v == [round(1000 / plan.block_regions, 3)] * 4 for v in cal.data["block_fault_us"].values())
    # a concurrency above the buffer's regions is a usage error
    r = subprocess.run([str(exe), "run", "0", str(64 * MIB), "1", str(8 << 30), "8", "1", "4"], capture_output=True,
                       text=True, check=False)
    assert r.returncode == cb.EXIT_USAGE and "BLOCK_REGIONS" in r.stderr
    # the benchmark's own check: an allocation above half the free memory stops it (exit 3)
    r = subprocess.run([str(exe), "run", "0", str(64 * MIB), "1", str(8 << 30), "1", "1", "1"], capture_output=True,
                       text=True, env={**os.environ, "FAKE_CUDA_FREE": str(100 * MIB)}, check=False)
    assert r.returncode == cb.EXIT_REFUSED and "refused" in r.stderr and r.stdout.count("[") == 0
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "0")
    with pytest.raises(CalibrationRefused, match="no CUDA device") as e:
        backend.probe(0)
    assert e.value.reason == "no-gpu"
