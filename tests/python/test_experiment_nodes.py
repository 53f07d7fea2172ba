"""Experiments on several node kinds (issue 13): ``[node] kind``, the executor interface, the node record of
every run; and node sweeps (issue 14 item 6): GPU memory, node preset and GPU count in experiment files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from huvm.errors import ConfigError
from huvmlab import experiment
from huvmlab.experiment.executor import Executor, NodeRecord, scale_bytes, scale_text
from huvmlab.experiment.resultio import dumps, loads
from huvmlab.experiment.runner import Runner, executor_for
from huvmlab.experiment.spec import load

NODE = """[node]
preset = "aws-p3.8xlarge"
gpu_count = 2
gpu_memory_bytes = "3GiB"
gpu_reserved_bytes = "256MiB"
"""

TENANTS = """
[[tenant]]
name = "gpt2"
gpu = 0
trace = "bundled:gpt2-small"
role = "harvester"

[[tenant]]
name = "idle"
gpu = 1
static = "512MiB"
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def exp_text(node: str = NODE, head: str = '[experiment]\nname = "n"\npolicies = ["stock", "huvm"]\n',
             tenants: str = TENANTS, extra: str = "") -> str:
    return head + "\n" + node + tenants + extra


def refused(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    return info.value


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ---- [node] kind ----------------------------------------------------------------------------------------

def test_kind_defaults_to_sim_and_the_sim_keys_are_unchanged(tmp_path: Path) -> None:
    spec = load(write(tmp_path, exp_text()))
    assert spec.node_kind == "sim" and spec.emulated is None and spec.local is None
    assert spec.node_options == {"gpu_count": 2, "gpu_memory_bytes": "3GiB", "gpu_reserved_bytes": "256MiB"}
    spec = load(write(tmp_path, exp_text(node=NODE.replace("[node]\n", '[node]\nkind = "sim"\n'))))
    assert spec.node_kind == "sim" and "kind" not in spec.node_options


@pytest.mark.parametrize(("node", "needle", "key", "message"), [
    ('[node]\nkind = "cloud"\npreset = "dgx-1"\n', "kind", "node.kind", "expected one of"),
    ('[node]\nkind = 3\npreset = "dgx-1"\n', "kind", "node.kind", "got 3"),
    ('[node]\npreset = "dgx-1"\nfb_mib = 128\n', "fb_mib", "node.fb_mib", "unknown key"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\n', "[node]", "node.fb_mib", "missing required key"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 32\n', "fb_mib", "node.fb_mib", "32: must be >= 64"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\ngpu_count = 2\n', "gpu_count", "node.gpu_count",
     "use gpus = N"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\ngpu_memory_bytes = "1GiB"\n', "gpu_memory",
     "node.gpu_memory_bytes", "use fb_mib"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\ngpus = 9\n', "gpus", "node.gpus",
     "9 is not in 1..8"),
    ('[node]\nkind = "emulated"\npreset = "cray-1"\nfb_mib = 128\n', "preset", "node.preset",
     "unknown node preset"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\nscale = 2.0\n', "scale", "node.scale",
     "must be <= 1"),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\nscale = "1/0"\n', "scale", "node.scale",
     '"1/N"'),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\ntime_scale = "half"\n', "time_scale",
     "node.time_scale", '"1/N"'),
    ('[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\nmodule = "mine"\n', "module", "node.module",
     "expected one of"),
    ('[node]\nkind = "local"\nstop_grace_s = 0\n', "stop_grace", "node.stop_grace_s", "0: must be > 0"),
    ('[node]\nkind = "local"\ngpu_count = 2\n', "gpu_count", "node.gpu_count", "unknown key"),
])
def test_node_kind_keys_are_checked(tmp_path: Path, node: str, needle: str, key: str, message: str) -> None:
    text = exp_text(node=node)
    exc = refused(tmp_path, text)
    assert exc.key == key and message in exc.reason, str(exc)
    assert exc.line == line_of(text, needle), str(exc)
    assert str(exc).startswith(f"{tmp_path / 'exp.toml'}:{exc.line}: {key}: ")


def test_emulated_node_settings_and_default_scale(tmp_path: Path) -> None:
    node = '[node]\nkind = "emulated"\npreset = "aws-p3.8xlarge"\ngpus = 2\nfb_mib = 128\n'
    spec = load(write(tmp_path, exp_text(node=node)))
    assert spec.node_kind == "emulated" and spec.emulated is not None
    em = spec.emulated
    # the default keeps the oversubscription ratio: 128 MiB of an emulated GPU stands for a V100's 16 GiB
    assert (em.gpus, em.fb_mib, em.fb_bytes, em.module) == (2, 128, 128 << 20, "patched")
    assert em.scale == 1 / 128 and not em.scale_declared and em.time_scale == 1.0
    assert spec.node_options == {}
    spec = load(write(tmp_path, exp_text(node=node + 'scale = "1/64"\ntime_scale = 0.25\nmodule = "stock"\n',
                                         head='[experiment]\npolicies = ["stock"]\n')))
    assert spec.emulated is not None
    assert (spec.emulated.scale, spec.emulated.scale_declared, spec.emulated.time_scale) == (1 / 64, True, 0.25)
    assert spec.emulated.module == "stock"


def test_emulated_node_shape_and_scaled_static_check(tmp_path: Path) -> None:
    node = '[node]\nkind = "emulated"\npreset = "aws-p3.8xlarge"\ngpus = 2\nfb_mib = 128\n'
    spec = load(write(tmp_path, exp_text(node=node)))
    cfg = experiment.executor.node_config(spec)
    # the software GPU keeps 32 MiB of each framebuffer for RM (its rm_reserved_mib default)
    assert cfg.gpu_count == 2 and cfg.gpus[0].memory_bytes == 128 << 20 and cfg.gpus[0].reserved_bytes == 32 << 20
    experiment.executor.check_tenants(spec)  # 512 MiB static at 1/128 = 4 MiB: fits 96 MiB
    big = TENANTS.replace('static = "512MiB"', 'static = "13GiB"')  # 104 MiB scaled: does not fit
    text = exp_text(node=node, tenants=big)
    spec = load(write(tmp_path, text))
    with pytest.raises(ConfigError) as info:
        experiment.executor.check_tenants(spec)
    assert info.value.key == "tenant[1].static" and info.value.line == line_of(text, 'static = "13GiB"')
    assert "104MiB (scaled by 1/128)" in info.value.reason
    spec = load(write(tmp_path, exp_text(node=node + "gpu_reserved_bytes = 0\n", tenants=big)))
    experiment.executor.check_tenants(spec)  # a file may set the reserve


def test_stock_module_runs_only_the_stock_policy(tmp_path: Path) -> None:
    node = '[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\nmodule = "stock"\n'
    text = exp_text(node=node, head='[experiment]\npolicies = ["stock", "huvm"]\n')
    exc = refused(tmp_path, text)
    assert exc.key == "experiment.policies[1]" and "needs the patched module" in exc.reason


def test_command_tenants_only_on_a_local_node(tmp_path: Path) -> None:
    text = exp_text(tenants=TENANTS + '\n[[tenant]]\nname = "job"\ngpu = 0\ncommand = ["true"]\n')
    exc = refused(tmp_path, text)
    assert exc.key == "tenant[2].command" and 'node.kind = "local"' in exc.reason
    assert exc.line == line_of(text, 'command = ["true"]')


@pytest.mark.parametrize(("tenant", "key", "message"), [
    ('name = "a"\ngpus = [0]\n', "tenant[0].command", "missing required key"),
    ('name = "a"\ncommand = ["x"]\n', "tenant[0].gpus", "missing required key"),
    ('name = "a"\ncommand = []\ngpus = [0]\n', "tenant[0].command", "at least 1"),
    ('name = "a"\ncommand = ["x", ""]\ngpus = [0]\n', "tenant[0].command[1]", "at least 1 character"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0, 0]\n', "tenant[0].gpus", "listed twice"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0, 1]\ngpu = 1\n', "tenant[0].gpu", "must be the first of gpus"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0]\nsteps = 2\n', "tenant[0].steps", "a command runs once"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0]\ntrace = "bundled:gpt2-small"\n', "tenant[0].trace",
     "runs commands"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0]\nenv = { A = 1 }\n', "tenant[0].env.A", "expected a string"),
    ('name = "a"\ncommand = ["x"]\ngpus = [0]\nsteps = 0\n', "tenant", "at least one tenant must run in the "
     "foreground"),
])
def test_local_tenant_keys_are_checked(tmp_path: Path, tenant: str, key: str, message: str) -> None:
    text = exp_text(node='[node]\nkind = "local"\n', tenants="\n[[tenant]]\n" + tenant)
    exc = refused(tmp_path, text)
    assert exc.key == key and message in exc.reason, str(exc)


def test_local_tenants_parse(tmp_path: Path) -> None:
    tenants = ('\n[[tenant]]\nname = "train"\ncommand = ["python3", "train.py"]\ngpus = [1, 0]\n'
               'env = { B = "2", A = "1" }\ncwd = "work"\nrole = "harvester"\n'
               '\n[[tenant]]\nname = "bg"\ncommand = ["sleep", "100"]\ngpu = 2\nsteps = 0\nstart_ms = 5\n')
    spec = load(write(tmp_path, exp_text(node='[node]\nkind = "local"\nstop_grace_s = 2.5\n', tenants=tenants)))
    assert spec.local is not None and spec.local.stop_grace_s == 2.5 and spec.local.device == "/dev/nvidia-uvm"
    train, bg = spec.tenants
    assert train.command == ("python3", "train.py") and train.gpus == (1, 0) and train.gpu == 1
    assert train.env == (("A", "1"), ("B", "2")) and train.cwd == str(tmp_path / "work")
    assert bg.gpus == (2,) and bg.steps == 0 and bg.start_ns == 5_000_000
    assert experiment.executor.tenant_role(train) == "harvester" and experiment.executor.tenant_role(bg) == "lender"


# ---- the executor interface -----------------------------------------------------------------------------

def test_every_run_records_its_node(tmp_path: Path) -> None:
    spec = load(write(tmp_path, exp_text()))
    res, _files = experiment.run_to(spec, tmp_path / "out")
    assert res.runs and all(r.node["kind"] == "sim" for r in res.runs)
    rec = res.runs[0].node
    assert rec["preset"] == "aws-p3.8xlarge" and rec["scale"] == 1.0 and rec["gpus"] == 2
    assert rec["module"].startswith("huvm ") and rec["module"].endswith("(simulator)")
    runs = pq.read_table(tmp_path / "out/data/runs.parquet").to_pylist()
    assert [r["run_id"] for r in runs] == [r.key.run_id for r in res.runs]
    assert {(r["node_kind"], r["node_preset"], r["scale"], r["node_gpus"]) for r in runs} == \
        {("sim", "aws-p3.8xlarge", 1.0, 2)}
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["node_record"]["node_kind"] == "sim" and summary["node_record"]["module"] == rec["module"]


def test_node_kinds_find_their_executors_by_table_not_by_name(tmp_path: Path) -> None:
    """runner.py names neither the emulated executor nor the twin (no import cycle): they add themselves."""
    from huvmlab.experiment.emulated import EmulatedExecutor
    from huvmlab.experiment.twin import SimTwin

    node = '[node]\nkind = "emulated"\npreset = "aws-p3.8xlarge"\ngpus = 2\nfb_mib = 128\n'
    spec = load(write(tmp_path, exp_text(node=node)))
    assert type(executor_for(spec)) is EmulatedExecutor
    assert type(executor_for(spec, node="sim-twin")) is SimTwin
    with pytest.raises(ConfigError, match=r"unknown node 'qemu' \(one of: sim-twin;"):
        executor_for(spec, node="qemu")


class _Fake(Executor):
    """A node that runs nothing: each run's tenants finish after a time set by the test."""

    kind = "fake"
    supports_ideal = False

    def record(self) -> NodeRecord:
        return NodeRecord("fake", "fake 1.0", self.spec.node_preset, 0.5, self.config.gpu_count)

    def run_one(self, run: experiment.PlannedRun) -> experiment.RunResult:
        r = experiment.RunResult(run.key, 7)
        for t in self.tenants(run.key.sweep_value):
            r.tenants.append(experiment.results.TenantRow(run.key, t.name, t.gpu, t.steps > 0,
                                                          100 if run.key.policy == "stock" else 50, {},
                                                          experiment.executor.tenant_role(t)))
        return r


def test_base_executor_loop_records_nodes_drops_ideal_and_notes(tmp_path: Path) -> None:
    spec = load(write(tmp_path, exp_text()))
    ex = _Fake(spec)
    planned = ex.planned()
    assert [p.key.run_id for p in planned] == ["stock#0", "huvm#0"]  # no ideal on this node
    seen: list[tuple[str, int, int]] = []
    res = ex.execute(planned, lambda run, i, n: seen.append((run.key.run_id, i, n)))
    assert seen == [("stock#0", 0, 2), ("huvm#0", 1, 2)]
    assert all(r.node == {"kind": "fake", "module": "fake 1.0", "preset": "aws-p3.8xlarge", "scale": 0.5,
                          "gpus": 2, "granularity": 1.0} for r in res.runs)
    assert any("no ideal" in n for n in res.notes) and not any("scaled" in n for n in res.notes)
    rows = {r.policy: r for r in experiment.policy_rows(res)}
    assert rows["huvm"].speedup_vs_stock == 2.0 and rows["huvm"].ratio_to_ideal is None


def test_result_json_round_trip(tmp_path: Path) -> None:
    spec = load(write(tmp_path, exp_text()))
    res = experiment.run(spec)
    back = loads(dumps(res))
    assert back == res
    assert dumps(back) == dumps(res)
    with pytest.raises(ConfigError, match="not an experiment result"):
        loads('{"format": "something"}')
    with pytest.raises(ConfigError, match="not JSON"):
        loads("{")


def test_scale_helpers() -> None:
    assert scale_bytes(0, 0.5) == 0 and scale_bytes(10, 1.0) == 10
    assert scale_bytes(1 << 30, 1 / 128) == 8 << 20
    assert scale_bytes(5000, 1 / 128) == 4096  # never below a page
    assert scale_bytes(3 * 4096 + 5, 0.5) == 4096  # down to a page
    assert scale_text(1 / 128) == "1/128" and scale_text(0.3) == "0.3"


def test_runner_is_the_sim_executor(tmp_path: Path) -> None:
    spec = load(write(tmp_path, exp_text()))
    ex = executor_for(spec)
    assert isinstance(ex, Runner) and ex.kind == "sim"
    # the simulated node refuses other kinds' files (huvm-top --sim, SimBackend.from_experiment use it)
    text = exp_text(node='[node]\nkind = "local"\n', tenants='\n[[tenant]]\ncommand = ["true"]\ngpus = [0]\n')
    with pytest.raises(ConfigError) as info:
        Runner(load(write(tmp_path, text)))
    assert info.value.key == "node.kind" and "not the simulated node" in info.value.reason
    assert info.value.line == line_of(text, "kind =")


def test_json_output_carries_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from huvm import jsonout
    from huvm.cli import main

    assert main(["experiment", "run", str(write(tmp_path, exp_text())), "--out", str(tmp_path / "o"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonout.validate(doc)
    assert doc["node_record"]["node_kind"] == "sim" and doc["node_record"]["node_gpus"] == 2


# ---- node sweeps ----------------------------------------------------------------------------------------

def sweep(key: str, values: str) -> str:
    return f'\n[sweep]\nkey = "{key}"\nvalues = {values}\n'


def test_node_memory_sweep_runs_every_policy_and_ideal_at_every_value(tmp_path: Path) -> None:
    text = exp_text(extra=sweep("node.gpu_memory_bytes", '["2GiB", "4GiB"]'))
    spec = load(write(tmp_path, text))
    assert [r.key.run_id for r in experiment.plan(spec)] == [
        "ideal@2GiB#0", "ideal@4GiB#0", "stock@2GiB#0", "huvm@2GiB#0", "stock@4GiB#0", "huvm@4GiB#0"]
    res = experiment.run(spec)
    by = {(r.key.policy, r.key.sweep_value): r for r in res.runs}
    # more memory, fewer evictions: the node of each run really had the value's memory
    small, large = by[("stock", "2GiB")], by[("stock", "4GiB")]

    def evicted(r: experiment.RunResult) -> int:
        return sum(c.value for c in r.counters if c.metric == "evict_to_host")

    assert evicted(small) > evicted(large)
    assert small.foreground_runtime_ns() > large.foreground_runtime_ns()
    assert res.alone_row("gpt2", "2GiB") is not None and res.alone_row("gpt2", "4GiB") is not None
    rows = experiment.policy_rows(res)
    assert [(r.sweep_value, r.policy) for r in rows] == [("2GiB", "stock"), ("2GiB", "huvm"), ("2GiB", "ideal"),
                                                         ("4GiB", "stock"), ("4GiB", "huvm"), ("4GiB", "ideal")]


def test_node_preset_and_gpu_count_sweeps(tmp_path: Path) -> None:
    node = '[node]\npreset = "aws-p3.8xlarge"\ngpu_memory_bytes = "3GiB"\n'
    spec = load(write(tmp_path, exp_text(node=node, extra=sweep("node.preset", '["aws-p3.8xlarge", "dgx-1"]'))))
    res = experiment.run(spec)
    names = {(r.key.policy, r.key.sweep_value): len({c.gpu for c in r.counters}) for r in res.runs}
    assert names[("huvm", "aws-p3.8xlarge")] == 4 and names[("huvm", "dgx-1")] == 8
    spec = load(write(tmp_path, exp_text(node=node, extra=sweep("node.gpu_count", "[2, 3]"))))
    res = experiment.run(spec)
    gpus = {r.key.run_id: len({c.gpu for c in r.counters}) for r in res.runs}
    assert gpus["stock@2#0"] == 2 and gpus["stock@3#0"] == 3


@pytest.mark.parametrize(("extra", "key", "message"), [
    (sweep("node.gpu_memory_bytes", '["2GiB", "2gb"]'), "sweep.values[1]", "ambiguous"),
    (sweep("node.gpu_count", '[2, "3"]'), "sweep.values[1]", "expected an integer"),
    (sweep("node.preset", '["dgx-1", ""]'), "sweep.values[1]", "at least 1 character"),
    (sweep("node.cpus", "[1]"), "sweep.key", "expected node.{gpu_memory_bytes,preset,gpu_count}"),
    (sweep("node.gpu_count", "[2]") + 'policies = ["huvm"]\n', "sweep.policies", "every policy runs"),
    (sweep("node.gpu_count", "[2, 2]"), "sweep.values", "distinct"),
])
def test_node_sweep_values_are_checked_when_loading(tmp_path: Path, extra: str, key: str, message: str) -> None:
    exc = refused(tmp_path, exp_text(extra=extra))
    assert exc.key == key and message in exc.reason, str(exc)


@pytest.mark.parametrize(("extra", "index", "message"), [
    (sweep("node.preset", '["dgx-1", "cray-1"]'), 1, "unknown node preset 'cray-1'"),
    (sweep("node.gpu_count", "[2, 1]"), 1, "GPU 1 is not in 0..0"),
    (sweep("node.gpu_memory_bytes", '["4GiB", "512MiB"]'), 1, "static footprints on GPU 1"),
    (sweep("node.gpu_count", "[5, 2]"), 0, "5 is not in 1..4"),
])
def test_node_sweep_values_are_checked_before_anything_runs(tmp_path: Path, extra: str, index: int,
                                                            message: str) -> None:
    text = exp_text(extra=extra)
    spec = load(write(tmp_path, text))
    ran: list[Any] = []
    with pytest.raises(ConfigError) as info:
        experiment.run(spec, lambda run, i, n: ran.append(run))
    assert not ran
    exc = info.value
    assert exc.key == f"sweep.values[{index}]" and message in exc.reason, str(exc)
    assert exc.line == line_of(text, "values = ")


def test_node_sweeps_are_refused_off_the_simulator(tmp_path: Path) -> None:
    node = '[node]\nkind = "emulated"\npreset = "dgx-1"\nfb_mib = 128\n'
    exc = refused(tmp_path, exp_text(node=node, extra=sweep("node.gpu_count", "[2]")))
    assert exc.key == "sweep.key" and 'node.kind = "sim"' in exc.reason
