"""huvmctl: every verb against the simulated node, output formats, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from huvm import abi
from huvm.cli import main
from huvm_testing import lender_budget_experiment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "pyctl" / "huvm" / "examples"
SIM = ["--backend", "sim"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HUVM_BACKEND", "HUVM_SIM_FALLBACK", "HUVM_DEVICE"):
        monkeypatch.delenv(var, raising=False)


def test_status(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *SIM, "status")
    assert rc == 0 and err == ""
    assert "simulated aws-p3.8xlarge" in out and "preset huvm" in out and "GPU-" in out
    d = run_json(capsys, *SIM, "status")
    assert isinstance(d, dict)
    assert d["schema_version"] == 1 and d["kind"] == "status"
    assert d["node"]["backend"] == "sim" and len(d["node"]["gpus"]) == 4
    assert d["policy"]["preset"] == "huvm" and "stats" in d


def test_global_options_after_the_verb(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "status", "--sim", "--sim-config", "dgx-a100")
    assert isinstance(d, dict) and len(d["node"]["gpus"]) == 8


def test_sim_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "node.toml"
    f.write_text('[node]\npreset = "aws-p3.8xlarge"\ngpu_count = 2\npolicy_preset = "stock"\n')
    d = run_json(capsys, *SIM, "--sim-config", str(f), "status")
    assert isinstance(d, dict) and len(d["node"]["gpus"]) == 2 and d["policy"]["preset"] == "stock"
    f.write_text('[node]\npreset = "aws-p3.8xlarge"\ngpu_count = 99\n')
    rc, out, err = run(capsys, *SIM, "--sim-config", str(f), "status")
    assert rc == 2 and err.startswith("huvmctl: error: ") and err.count("\n") == 1


def test_topology(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, *SIM, "topology")
    assert rc == 0 and "NV2 50000" in out and "NVML unavailable" in out
    d = run_json(capsys, *SIM, "topology")
    assert isinstance(d, dict) and d["kind"] == "topology" and d["nvml"] is False and len(d["gpus"]) == 4
    assert len(d["links"]) == 6 and set(d["links"][0]) == {"gpu", "peer", "label", "mbyte_per_s"}


def test_va_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, *SIM, "va-spaces")
    assert d == {"schema_version": 1, "kind": "va-spaces", "va_spaces": []}


def test_policy_show_set_preset(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, *SIM, "policy", "show")
    assert rc == 0 and "prefetch_chunks" in out and "gpu.0.role" in out
    rc, out, _ = run(capsys, *SIM, "policy", "show", "--toml")
    assert rc == 0 and 'preset = "huvm"' in out and '[gpu.GPU-' in out
    d = run_json(capsys, *SIM, "policy", "set", "prefetch_chunks=8", "gpu.1.role=lender")
    assert isinstance(d, dict) and d["applied"] is True and d["preset"] == "custom"
    assert d["kind"] == "policy-change" and {c["key"] for c in d["changes"]} == {"preset", "prefetch_chunks",
                                                                               "gpu.1.role"}
    d = run_json(capsys, *SIM, "policy", "set", "--dry-run", "prefetch_chunks=8")
    assert isinstance(d, dict) and d["applied"] is False
    d = run_json(capsys, *SIM, "policy", "preset", "stock")
    assert isinstance(d, dict) and d["preset"] == "stock"
    assert any(c["key"] == "gpu.0.role" and c["new"] == "none" for c in d["changes"])
    d = run_json(capsys, *SIM, "policy", "keys")
    assert isinstance(d, dict) and d["kind"] == "policy-keys"
    assert {k["key"] for k in d["keys"]} >= {"prefetch_chunks", "gpu.N.role"}


def test_policy_set_lend_traffic(capsys: pytest.CaptureFixture[str]) -> None:
    """The guest-traffic budget on the simulated node: set in GB/s, sent in MB/s, shown in the GPU table."""
    d = run_json(capsys, *SIM, "policy", "set", "gpu.1.lend_traffic_mbyte_per_s=18GB/s")
    assert isinstance(d, dict) and d["applied"] is True
    assert {"key": "gpu.1.lend_traffic_mbyte_per_s", "old": 0, "new": 18000} in d["changes"]
    rc, out, _ = run(capsys, *SIM, "policy", "set", "gpu.1.lend_traffic_mbyte_per_s=18GB/s")
    assert rc == 0 and re.search(r"gpu\.1\.lend_traffic_mbyte_per_s\s.*off\s.*18GB/s", out)
    d = run_json(capsys, *SIM, "policy", "show")
    assert isinstance(d, dict) and [g["lend_traffic_mbyte_per_s"] for g in d["policy"]["gpus"]] == [0] * 4
    rc, out, _ = run(capsys, *SIM, "status")
    assert rc == 0 and "lend_traffic" in out


def test_policy_set_lender_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 item 1: a lender's slowdown bound T per GPU on the simulated node: huvm's 2 % shown, one GPU's
    changed (the applied change as the core answered it), every GPU's taken off with `none`; each invocation
    opens a fresh simulated node, so `show` has the preset's bound again."""
    d = run_json(capsys, *SIM, "policy", "show")
    assert isinstance(d, dict) and [g["lend_slowdown_max_pct"] for g in d["policy"]["gpus"]] == [2] * 4
    d = run_json(capsys, *SIM, "policy", "set", "gpu.1.lend_slowdown_max_pct=5")
    assert isinstance(d, dict) and d["applied"] is True
    assert {"key": "gpu.1.lend_slowdown_max_pct", "old": 2, "new": 5} in d["changes"]
    d = run_json(capsys, *SIM, "policy", "set", "gpu.all.lend_slowdown_max_pct=none")
    assert isinstance(d, dict) and d["applied"] is True
    assert {c["key"] for c in d["changes"]} >= {f"gpu.{i}.lend_slowdown_max_pct" for i in range(4)}
    rc, out, _ = run(capsys, *SIM, "policy", "show")
    assert rc == 0 and re.search(r"gpu\.3\.lend_slowdown_max_pct\s*│\s*2\s", out)


def test_lender_busy_reason_in_stats(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An experiment file's lender with the smallest budget: `huvmctl stats` names the reason lender_busy."""
    f = tmp_path / "budget.toml"
    f.write_text(lender_budget_experiment(f"{abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S}MB/s"))
    d = run_json(capsys, *SIM, "--sim-config", str(f), "stats")
    assert isinstance(d, dict) and d["stats"]["gpus"][0]["host_reason_chunks"]["lender_busy"] > 0
    rc, out, _ = run(capsys, *SIM, "--sim-config", str(f), "stats")
    assert rc == 0 and re.search(r"host_reason\.lender_busy\s.*chunks", out)
    d = run_json(capsys, *SIM, "--sim-config", str(f), "policy", "show")
    assert isinstance(d, dict) and d["policy"]["gpus"][1]["lend_traffic_mbyte_per_s"] == 105


def test_policy_save_diff_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "current.toml"
    rc, _, _ = run(capsys, *SIM, "policy", "save", str(saved))
    assert rc == 0 and saved.is_file()
    d = run_json(capsys, *SIM, "policy", "diff", str(saved))
    assert d == {"schema_version": 1, "kind": "policy-diff", "file": str(saved), "changes": []}
    tuned = tmp_path / "tuned.toml"
    tuned.write_text('preset = "huvm-atc22"\nprefetch_chunks = 8\n[gpu.0]\nrole = "harvester"\n')
    d = run_json(capsys, *SIM, "policy", "diff", str(tuned))
    assert isinstance(d, dict)
    keys = {c["key"] for c in d["changes"]}
    assert {"prefetch_chunks", "peer_select", "gpu.0.role"} <= keys
    d = run_json(capsys, *SIM, "policy", "apply", str(tuned))
    assert isinstance(d, dict) and d["applied"] and d["preset"] == "custom"
    rc, out, _ = run(capsys, *SIM, "policy", "apply", "--dry-run", str(tuned))
    assert rc == 0 and "dry run" in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["policy", "set", "bogus=1"], "bogus: unknown key"),
        (["policy", "set", "prefetch_chunks=lots"], "expected an integer"),
        (["policy", "set", "prefetch_stride=17"], "prefetch_stride=17: must be <= 16"),
        (["policy", "set", "gpu.0.lend_reserve_bytes=20GiB"],
         "gpu.0.lend_reserve_bytes=20GiB: must be <= 15872MiB"),
        (["policy", "set", "gpu.1.role=lender", "gpu.1.lend_limit_bytes=0"],
         "gpu.1.lend_limit_bytes=0: must be more than 0"),
        (["policy", "set", "gpu.1.role=both", "gpu.1.lend_limit_bytes=0"],
         "gpu.1.lend_limit_bytes=0: must be more than 0"),
        (["policy", "set", "preevict_chunks=65536"], "preevict_chunks=65536: must be <= 7936"),
        (["policy", "set", "gpu.1.lend_traffic_mbyte_per_s=50"],
         "gpu.1.lend_traffic_mbyte_per_s=50: must be 0 (off) or "
         f"{abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S}MB/s..{abi.lib.HUVM_MAX_MBYTE_PER_S}MB/s"),
        (["policy", "set", "gpu.1.lend_traffic_mbyte_per_s=18GiB/s"],
         "gpu.1.lend_traffic_mbyte_per_s: not a rate: '18GiB/s'"),
        (["policy", "set", "gpu.1.lend_slowdown_max_pct=101"], "gpu.1.lend_slowdown_max_pct=101: must be <= 100"),
        (["policy", "set", "gpu.1.lend_slowdown_max_pct=-1"],
         "gpu.1.lend_slowdown_max_pct=-1: must be 0 (off) or 1..100"),
        (["policy", "set", "gpu.1.lend_slowdown_max_pct=2.5"], "expected an integer (decimal digits), got '2.5'"),
        (["policy", "set", "gpu.lend_slowdown_max_pct=2"], "lend_slowdown_max_pct is a per-GPU key"),
        (["policy", "set", "prefetch_chunks=1", "prefetch_chunks=2"], "contradictory"),
        (["policy", "set", "prefetch_chunks"], "expected KEY=VALUE"),
        (["policy", "preset", "turbo"], "unknown preset"),
        (["policy", "apply", "/nonexistent/p.toml"], "No such file"),
        (["stats", "--watch", "0"], "must be more than 0"),
        (["no-such-verb"], "invalid choice"),
        (["policy"], "required"),
    ],
)
def test_usage_errors_exit_2_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit) if argv[0] in ("no-such-verb",) or argv == ["policy"] or "--watch" in argv \
            else _nullcontext():
        rc, out, err = run(capsys, *SIM, *argv)
        assert rc == 2
    out, err = capsys.readouterr() if argv[0] == "no-such-verb" or argv == ["policy"] or "--watch" in argv \
        else (out, err)
    assert err.startswith("huvmctl: error: ") and err.count("\n") == 1, err
    assert match in err
    assert out == ""


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_policy_file_error_names_file_line_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('prefetch_chunks = 8\n\n[gpu.1]\nrole = "boss"\n')
    rc, out, err = run(capsys, *SIM, "policy", "apply", str(f))
    assert rc == 2 and out == ""
    assert err == f"huvmctl: error: {f}:4: gpu.1.role: expected one of none, harvester, lender, both, got 'boss'\n"


def test_runtime_error_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run(capsys, "--device", str(tmp_path / "nvidia-uvm"), "status")
    assert rc == 1 and out == ""
    assert err.startswith("huvmctl: error: ") and "does not exist" in err and "--backend sim" in err
    rc, out, err = run(capsys, "--backend", "kernel", "--device", "/dev/null", "status")
    assert rc == 1 and "stock module" in err


def test_sim_fallback_note(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run(capsys, "--device", str(tmp_path / "x"), "--sim-fallback", "status")
    assert rc == 0 and "huvmctl: note: using the simulated node" in err and "simulated" in out


def test_stats(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, *SIM, "stats", "--all", "--pairs")
    assert rc == 0 and "evict_to_peer" in out and "lent_bytes" in out
    d = run_json(capsys, *SIM, "stats", "--reset")
    assert isinstance(d, dict) and d["kind"] == "stats" and len(d["stats"]["gpus"]) == 4
    assert set(d["stats"]["gpus"][0]["host_reason_chunks"]) >= {"tier_off", "no_peer", "peer_full"}
    rc, out, _ = run(capsys, *SIM, "stats", "--watch", "0.01", "--count", "2", "--json")
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == 2
    first = json.loads(lines[0])
    assert first["kind"] == "stats-interval" and {"interval_s", "timestamp_ns", "gpus"} <= set(first)
    rc, out, _ = run(capsys, *SIM, "stats", "--watch", "0.01", "--count", "1")
    assert rc == 0 and "per second" in out


def test_sim_presets(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "sim", "presets")
    assert isinstance(d, dict) and d["kind"] == "sim-presets"
    p3 = next(r for r in d["presets"] if r["name"] == "aws-p3.8xlarge")
    assert p3["gpu_count"] == 4 and p3["memory_bytes"] == 16 << 30 and "p3.8xlarge" in p3["aliases"]


SMALL = """
[experiment]
name = "cli-small"
policies = ["stock", "huvm-atc22", "huvm"]
[node]
preset = "aws-p3.8xlarge"
gpu_count = 2
gpu_memory_bytes = 3221225472
gpu_reserved_bytes = 268435456
[[tenant]]
name = "gpt2"
gpu = 0
trace = "bundled:gpt2-small"
[[tenant]]
name = "llama"
gpu = 1
trace = "bundled:llama-tiny"
steps = 0
"""


def test_sim_run_and_experiment_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    rc, out, _ = run(capsys, "sim", "run", str(f), "--no-progress")
    assert rc == 0 and "stock" in out and "huvm-atc22" in out and "ideal" in out and "x ideal" in out
    assert not (tmp_path / "out").exists()
    d = run_json(capsys, "experiment", "run", str(f), "--out", str(tmp_path / "out"))
    assert isinstance(d, dict) and d["kind"] == "experiment"
    assert [r["policy"] for r in d["results"]] == ["stock", "huvm-atc22", "huvm", "ideal"]
    assert str(tmp_path / "out" / "report.md") in d["files"]
    rc, out, _ = run(capsys, "experiment", "run", str(f), "--out", str(tmp_path / "out2"), "--no-progress")
    assert rc == 0 and f"report: {tmp_path / 'out2' / 'report.md'}" in out and "plots:" in out


def test_experiment_file_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(SMALL.replace('trace = "bundled:gpt2-small"', 'trace = "bundled:gpt5"'))
    rc, out, err = run(capsys, "experiment", "run", str(f), "--out", str(tmp_path / "o"))
    assert rc == 2 and err.startswith(f"huvmctl: error: {f}:13: tenant[0].trace: ") and "gpt5" in err


def test_trace_info(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = run_json(capsys, "trace", "info", "bundled:llama-tiny")
    assert isinstance(d, dict) and d["kind"] == "trace-info" and d["n_ops"] > 0 and d["peak_live_bytes"] > 0
    rc, out, _ = run(capsys, "trace", "info", "bundled:llama-tiny")
    assert rc == 0 and "peak live" in out
    rc, out, err = run(capsys, "trace", "info", "bundled:nope")
    assert rc == 2 and "no bundled trace" in err
    bad = tmp_path / "bad.trace"
    bad.mkdir()
    rc, out, err = run(capsys, "trace", "info", str(bad))
    assert rc == 2 and err.startswith("huvmctl: error: ") and err.count("\n") == 1
    rc, out, err = run(capsys, "trace", "info", str(tmp_path / "missing" / "x.trace"))
    assert rc == 2 and err.rstrip().endswith("x.trace: no such file or directory") and err.count("\n") == 1
    (tmp_path / "file.trace").write_text("x")
    rc, out, err = run(capsys, "trace", "info", str(tmp_path / "file.trace"))
    assert rc == 2 and "not a trace directory" in err


def test_trace_gen(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_dir = tmp_path / "idle.trace"
    rc, out, err = run(capsys, "trace", "gen", "lender-idle", str(out_dir), "--seconds", "1", "--no-progress")
    assert rc == 0, err
    d = run_json(capsys, "trace", "info", str(out_dir))
    assert isinstance(d, dict) and d["trace_kind"] == "lender"


def test_export(tmp_path: Path) -> None:
    # a real server on a free port, scraped once, then stopped by --duration
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result: dict[str, int] = {}
    t = threading.Thread(target=lambda: result.setdefault("rc", main(
        [*SIM, "export", "--port", str(port), "--addr", "127.0.0.1", "--duration", "3"])))
    t.start()
    body = ""
    for _ in range(50):
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
            break
        except OSError:
            threading.Event().wait(0.05)
    t.join()
    assert result["rc"] == 0
    assert 'device="nvidia0",gpu="0",modelName="Tesla V100-SXM2-16GB #0"' in body
    assert "huvm_up 1.0" in body


def test_console_script_and_help() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    exe = Path(sys.executable).with_name("huvmctl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "huvm.cli"]
    r = subprocess.run([*cmd, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "examples:" in r.stdout and "exit status" in r.stdout
    for verb in (["policy", "--help"], ["stats", "--help"], ["experiment", "--help"], ["export", "--help"]):
        r = subprocess.run([*cmd, *verb], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0 and "examples:" in r.stdout, verb
    r = subprocess.run([*cmd, "--sim", "policy", "set", "nope=1"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 2 and r.stderr == "huvmctl: error: nope: unknown key (known: peer_select, nvlink_only, " \
        "peer_usage_max_pct, preevict_chunks, preevict_batch, fetch_mode, prefetch_mode, prefetch_chunks, " \
        "prefetch_stride, hysteresis_ms, gpu.N.role, gpu.N.flags, gpu.N.lend_limit_bytes, gpu.N.lend_reserve_bytes, " \
        "gpu.N.lend_traffic_mbyte_per_s, gpu.N.lend_slowdown_max_pct)\n"


def test_sim_config_experiment_file_runs_its_tenants(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    d = run_json(capsys, *SIM, "--sim-config", str(f), "stats")
    assert isinstance(d, dict)
    gpus, pairs = d["stats"]["gpus"], d["stats"]["pairs"]
    assert sum(g["counters"]["evict_to_peer_chunks"] for g in gpus) > 0  # ran under its "huvm" policy
    assert sum(p["counters"]["evict_chunks"] for p in pairs) == sum(g["counters"]["evict_to_peer_chunks"] for g in gpus)
    d = run_json(capsys, *SIM, "--sim-config", str(f), "policy", "show")
    assert isinstance(d, dict) and d["policy"]["preset"] == "huvm"


def test_stats_interval_count_moves_on_the_simulated_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """bcc style `stats INTERVAL COUNT`: an experiment file's workload runs as the intervals pass."""
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    rc, out, _ = run(capsys, *SIM, "--sim-config", str(f), "stats", "0.01", "3", "--json")
    docs = [json.loads(line) for line in out.strip().splitlines()]
    assert rc == 0 and len(docs) == 3
    stamps = [doc["timestamp_ns"] for doc in docs]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3  # simulated time moves
    faults = [sum(g["rates"]["faults_per_s"] for g in doc["gpus"]) for doc in docs]
    assert any(x > 0 for x in faults)  # and so do the counters
    rc, out, _ = run(capsys, *SIM, "stats", "0.01", "2", "-T")
    assert rc == 0 and len(re.findall(r"^\d\d:\d\d:\d\d$", out, re.M)) == 2
    rc, _, err = run(capsys, *SIM, "stats", "1", "--watch", "2")
    assert rc == 2 and "disagree" in err
    rc, _, err = run(capsys, *SIM, "stats", "-T")
    assert rc == 2 and "-T" in err


def test_stats_interval_on_a_node_without_workload_says_so(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    """A bare preset has no tenants: its counters never move, and `stats INTERVAL` says so once on stderr (the
    JSON lines on stdout stay clean); an experiment file's node has a workload and gets no such note."""
    rc, out, err = run(capsys, *SIM, "stats", "0.01", "2", "--json")
    assert rc == 0
    assert [json.loads(line)["kind"] for line in out.strip().splitlines()] == ["stats-interval"] * 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no workload" in lines[0] and "--sim-config" in lines[0], err
    f = tmp_path / "small.toml"
    f.write_text(SMALL)
    rc, out, err = run(capsys, *SIM, "--sim-config", str(f), "stats", "0.01", "1", "--json")
    assert rc == 0 and len(out.strip().splitlines()) == 1 and "no workload" not in err, err


def test_watch(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dataclasses import dataclass

    import huvm.watch

    @dataclass
    class Dev:
        action: str
        sys_name: str

    dev = tmp_path / "nvidia-uvm"
    script = [Dev("add", "nvidia_uvm"), Dev("remove", "nvidia_uvm")]

    class Mon:
        def poll(self, timeout: float | None = None) -> Dev | None:
            if not script:
                return None
            d = script.pop(0)
            if d.action == "add":
                dev.touch()
            else:
                dev.unlink()
            return d

    monkeypatch.setattr(huvm.watch, "default_monitor", lambda: Mon())
    rc, out, _ = run(capsys, "watch", "--device", str(dev), "--timeout", "0.01", "--json")
    events = [json.loads(line) for line in out.splitlines()]
    assert rc == 0
    assert {e["kind"] for e in events} == {"watch-event"}
    assert [(e["source"], e["action"]) for e in events] == [("module", "add"), ("device", "add"),
                                                          ("module", "remove"), ("device", "remove")]


def test_unexpected_exception_is_one_line_and_debug_adds_the_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from huvm.cli import status

    def broken(args: object) -> int:
        raise RuntimeError("something broke\nsecond line")

    monkeypatch.setattr(status, "cmd_status", broken)
    rc, out, err = run(capsys, *SIM, "status")
    assert rc == 1 and out == ""
    assert err == ("huvmctl: error: internal error: RuntimeError: something broke (a huvm bug: please report it "
                   "with the command line; --debug prints the traceback)\n")
    rc, out, err = run(capsys, *SIM, "status", "--debug")
    assert rc == 1 and "Traceback (most recent call last)" in err and "RuntimeError: something broke" in err
    assert err.splitlines()[-1].startswith("huvmctl: error: internal error: RuntimeError: something broke")
    assert "--debug prints" not in err


def test_export_port_in_use_names_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, out, err = run(capsys, *SIM, "export", "--port", str(port), "--addr", "127.0.0.1", "--duration", "1")
    assert rc == 1 and err.count("\n") == 1
    assert f"cannot listen on --addr 127.0.0.1 --port {port}: Address already in use" in err


def test_sim_config_sizes_use_the_unit_grammar(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # gpu_memory_bytes = "3GiB" raised ValueError; sizes in node files now take the one size grammar
    f = tmp_path / "node.toml"
    f.write_text('[node]\npreset = "aws-p3.8xlarge"\ngpu_memory_bytes = "3GiB"\ngpu_reserved_bytes = "256MiB"\n')
    d = run_json(capsys, *SIM, "--sim-config", str(f), "status")
    assert isinstance(d, dict) and {g["memory_bytes"] for g in d["node"]["gpus"]} == {(3 << 30) - (256 << 20)}
    f.write_text('[node]\npreset = "aws-p3.8xlarge"\ngpu_reserved_bytes = "256MiB"\n')  # alone: no longer ignored
    d = run_json(capsys, *SIM, "--sim-config", str(f), "status")
    assert isinstance(d, dict) and {g["memory_bytes"] for g in d["node"]["gpus"]} == {(16 << 30) - (256 << 20)}


def test_trace_info_prints_sizes_in_the_unit_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    from huvm.units import UNITS

    rc, out, _ = run(capsys, "trace", "info", "bundled:lender-steady")
    assert rc == 0
    sizes = re.findall(r"\d(?:\.\d+)? ?([A-Za-z]*B)\b", out)
    assert len(sizes) >= 4  # size on disk, peak live, reserved, static
    assert all(unit in UNITS for unit in sizes), sizes  # "11.6 KB" was printed before: KB is not a unit
