"""The per-GPU rates a lender's slowdown bound weighs (issue 28): SET_GPU_RATES / GET_GPU_RATES through the
simulated backend (the core's shared dispatch, as the kernel runs it), huvm.rates' reading of huvmctl calibrate's
node TOML (read through the simulated node it describes: the simulator's rule), and `huvmctl rates`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huvm import abi, errors, rates
from huvm.cli import main
from huvm.client import Node
from huvm.errors import ConfigError, PolicyError
from huvmlab.calibration import node_toml
from huvmlab.sim.config import node_from_measurement
from huvmlab.sim.measured import REFERENCE_RECORD
from huvmlab.simbackend import SimBackend

SIM = ["--backend", "sim"]


@pytest.fixture
def calibrated(tmp_path: Path) -> Path:
    """The node TOML huvmctl calibrate writes for the shipped H200 record."""
    f = tmp_path / "h200.toml"
    f.write_text(node_toml(node_from_measurement(REFERENCE_RECORD), record_name="h200"), encoding="utf-8")
    return f


def test_sim_reports_its_model_rates_and_takes_new_ones() -> None:
    with Node(SimBackend.from_config("aws-p3.8xlarge")) as n:
        before = n.gpu_rates()
        assert [r.gpu for r in before] == [0, 1, 2, 3]
        # the node model's: V100 HBM (900 GB/s as a 2 MiB copy time, rounded) and a PCIe 3 give-back
        assert all(899_000 <= r.hbm_mbyte_per_s <= 900_000 for r in before), before
        assert all(0 < r.giveback_mbyte_per_s < 12_000 for r in before), before
        got = n.set_gpu_rates(1, 1_555_000, 9_000)
        assert (got.gpu, got.hbm_mbyte_per_s, got.giveback_mbyte_per_s) == (1, 1_555_000, 9_000)
        after = n.gpu_rates()
        assert after[1] == got and after[0] == before[0] and after[2] == before[2]
        # by UUID, and 0 = unknown
        n.set_gpu_rates(before[2].uuid, 0, 0)
        assert (n.gpu_rates()[2].hbm_mbyte_per_s, n.gpu_rates()[2].giveback_mbyte_per_s) == (0, 0)


def test_bad_rates_are_refused_before_sending() -> None:
    top = int(abi.lib.HUVM_MAX_MBYTE_PER_S)
    with Node(SimBackend.from_config("aws-p3.8xlarge")) as n:
        before = n.gpu_rates()
        for hbm, gb, what in ((top + 1, 0, "hbm"), (0, -1, "giveback"), (True, 0, "hbm")):
            with pytest.raises(PolicyError, match=what):
                n.set_gpu_rates(0, hbm, gb)
        with pytest.raises(PolicyError, match="no GPU index 9"):
            n.set_gpu_rates(9, 1, 1)
        assert n.gpu_rates() == before
        n.set_gpu_rates(0, top, top)        # the extremes are taken
        assert n.gpu_rates()[0].hbm_mbyte_per_s == top


def test_module_refusals_name_the_field() -> None:
    """What the core refuses (a tool that skipped the checks) comes back typed, naming the field."""
    with Node(SimBackend.from_config("aws-p3.8xlarge")) as n:
        p = abi.new_params(abi.lib.HUVM_IOCTL_SET_GPU_RATES)
        p.hbm_mbyte_per_s = int(abi.lib.HUVM_MAX_MBYTE_PER_S) + 1
        with pytest.raises(errors.InvalidValue, match="hbm_mbyte_per_s"):
            n.call(abi.lib.HUVM_IOCTL_SET_GPU_RATES, p)
        p = abi.new_params(abi.lib.HUVM_IOCTL_SET_GPU_RATES)      # uuid all zero: no such GPU
        with pytest.raises(errors.HuvmError, match="uuid"):
            n.call(abi.lib.HUVM_IOCTL_SET_GPU_RATES, p)


def test_node_file_rates_follow_the_simulators_rule(calibrated: Path) -> None:
    """huvm.rates reads calibrate's node TOML through the simulated node it describes: the simulator's rule
    (sim_set_gpu_rates), checked here against the arithmetic it states."""
    (hbm, giveback), = rates.from_node_file(calibrated)
    # H200 (both days pooled): 2 MiB in 503 ns of HBM (4.17 TB/s, measured copy); give-back: 101321 + 5000 ns +
    # the copy at 55220 MB/s twice (a demand copy gets half the link while background copies share it)
    assert hbm == 2_097_152_000 // 503
    assert giveback == 2_097_152_000 // (101_321 + 5_000 + 2 * (2_097_152_000 // 55_220))


@pytest.mark.parametrize("text,match", [
    ("", "a node needs 'preset'"),
    ("[node]\nname = 'x'\n", "node.preset: a node needs"),
    ("[node]\n[node.costs]\nlend_chunk_ns = 0\nevict_service_ns = 1\npcie_latency_ns = 1\n[[node.gpus]]\n"
     "pcie_mbyte_per_s = 1\n", "node.gpus\\[0\\].name: missing required key"),
    ("[node\n", "TOML syntax"),
])
def test_bad_node_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "n.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        rates.from_node_file(f)
    with pytest.raises(ConfigError, match="no such file"):
        rates.from_node_file(tmp_path / "missing.toml")


def test_cli_show_set_load(capsys: pytest.CaptureFixture[str], calibrated: Path) -> None:
    assert main([*SIM, "rates", "set", "1", "--hbm", "900GB/s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changed"] == [1]
    row = doc["rates"][1]
    assert row["hbm_mbyte_per_s"] == 900_000 and row["giveback_mbyte_per_s"] > 0      # give-back kept
    assert main([*SIM, "rates", "load", str(calibrated), "0", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (hbm, gb), = rates.from_node_file(calibrated)
    assert doc["changed"] == [0, 2]
    assert [(r["hbm_mbyte_per_s"], r["giveback_mbyte_per_s"]) for r in doc["rates"] if r["gpu"] in (0, 2)] == \
        [(hbm, gb)] * 2
    assert main([*SIM, "rates", "show"]) == 0
    assert "give-back" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["rates", "set", "1"], "nothing to set"),
    (["rates", "set", "1", "--hbm", "fast"], "--hbm: not a rate"),
    (["rates", "set", "1", "--giveback", "99TB/s"], "--giveback 99000000 MB/s: must be 0"),
    (["rates", "set", "7", "--hbm", "1"], "no GPU index 7"),
    (["rates", "load", "/nonexistent/n.toml"], "no such file"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    assert main([*SIM, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("huvmctl: error: ") and match in err, err
    assert "Traceback" not in err
