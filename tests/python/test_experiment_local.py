"""The local node (issue 13, ``[node] kind = "local"``) up to launching, without GPUs: a fake /dev/nvidia-uvm
(the policy core behind the kernel backend, huvm_testing.CoreNode) and fake commands (small Python scripts):
launch order and environment, logs, policy per run, stopping (SIGTERM, SIGKILL, process groups), and every
refusal (module, GPUs, privilege, commands)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from huvm import abi
from huvm.backend import KernelBackend
from huvm.errors import ConfigError, DeviceUnavailable, HuvmError, Timeout
from huvm.info import NodeInfo
from huvm_testing import CoreNode
from huvmlab import experiment
from huvmlab.experiment import local
from huvmlab.experiment.local import LocalExecutor, has_cap_sys_admin
from huvmlab.experiment.spec import load

PY = sys.executable

# A tenant: records when it started, what it saw and where, prints to stdout/stderr, reports its result.
TENANT_PY = r'''
import json, os, signal, sys, time
log = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "fg"
def note(what):
    with open(log, "a") as f:
        f.write(json.dumps({"tenant": os.environ["HUVM_TENANT"], "what": what, "t": time.monotonic(),
                            "run": os.environ["HUVM_RUN_ID"], "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "extra": os.environ.get("EXTRA"), "cwd": os.getcwd(), "pgid": os.getpgid(0),
                            "pid": os.getpid()}) + "\n")
note("start")
print("hello from", os.environ["HUVM_TENANT"]); sys.stdout.flush()
print("to stderr", file=sys.stderr); sys.stderr.flush()
if mode == "fg":
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.2)
    with open(os.environ["HUVM_TENANT_RESULT"], "w") as f:
        json.dump({"ops_done": 42, "compute_ns": 1000, "note": "text is left out"}, f)
    sys.exit(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
if mode == "bg":
    def term(sig, frame):
        note("term"); sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    while True: time.sleep(0.01)
if mode == "stubborn":  # ignores SIGTERM, and leaves a grandchild in its process group
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(log + ".grandchild", "w") as f:
        f.write(str(child.pid))
    while True: time.sleep(0.01)
'''


class FakeDevice:
    """/dev/nvidia-uvm of the patched module, as the kernel backend sees it (no GPU needed)."""

    def __init__(self, gpus: int = 2, *, known: bool = True, privileged: bool = True) -> None:
        self.core = CoreNode(gpus, privileged=privileged)
        self.known = known
        self.opened: list[str] = []

    def open(self, path: str) -> KernelBackend:
        self.opened.append(path)
        return KernelBackend(path, open_fn=lambda p, flags: 9, ioctl_fn=self.core.fake_ioctl(known=self.known),
                             close_fn=lambda fd: None)

    def info(self) -> NodeInfo:
        p = abi.new_params(abi.lib.HUVM_IOCTL_GET_INFO)
        self.core.ioctl(abi.lib.HUVM_IOCTL_GET_INFO, p)
        return NodeInfo.from_params(p)

    def uuids(self) -> list[str]:
        return [g.uuid for g in self.info().gpus]

    def preset(self) -> str:
        p = abi.new_params(abi.lib.HUVM_IOCTL_GET_POLICY)
        self.core.ioctl(abi.lib.HUVM_IOCTL_GET_POLICY, p)
        from huvm.policy import Policy

        return str(Policy.from_struct(p.policy).preset_name)


def experiment_file(tmp_path: Path, tenants: str, node: str = "", policies: str = '["stock", "huvm"]') -> Path:
    script = tmp_path / "tenant.py"
    script.write_text(TENANT_PY)
    (tmp_path / "work").mkdir(exist_ok=True)
    text = (f'[experiment]\nname = "lab"\npolicies = {policies}\n\n[node]\nkind = "local"\nstop_grace_s = 2\n'
            f'sample_ms = 50\n{node}\n' + tenants.replace("SCRIPT", str(script)).replace("LOG", str(tmp_path / "log"))
            .replace("PY", PY))
    p = tmp_path / "lab.toml"
    p.write_text(text)
    return p


THREE = '''
[[tenant]]
name = "late"
command = ["PY", "SCRIPT", "LOG", "fg", "0.1"]
gpus = [0]
start_ms = 250

[[tenant]]
name = "early"
command = ["PY", "SCRIPT", "LOG", "fg", "0.3"]
gpus = [1, 0]
env = { EXTRA = "x1" }
cwd = "work"
role = "harvester"

[[tenant]]
name = "bg"
command = ["PY", "SCRIPT", "LOG", "bg"]
gpu = 1
steps = 0
start_ms = 50
role = "lender"
'''


def events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]


def executor(spec: Any, fake: FakeDevice, out: Path | None, **kw: Any) -> LocalExecutor:
    kw.setdefault("gpu_uuids", fake.uuids)
    kw.setdefault("privileged", lambda: True)
    return LocalExecutor(spec, out, open_backend=fake.open, **kw)


def test_local_runs_launch_in_order_with_their_gpus_env_and_logs(tmp_path: Path) -> None:
    spec = load(experiment_file(tmp_path, THREE))
    fake = FakeDevice(2)
    uuids = fake.uuids()
    before = fake.preset()
    out = tmp_path / "out"
    with executor(spec, fake, out) as ex:
        ex.check()
        planned = ex.planned()
        assert [p.key.run_id for p in planned] == ["stock#0", "huvm#0"]  # no ideal run on a real node
        res = ex.execute(planned)
    assert fake.opened == ["/dev/nvidia-uvm"]
    ev = events(tmp_path)
    for run_id in ("stock#0", "huvm#0"):
        starts = [e for e in ev if e["run"] == run_id and e["what"] == "start"]
        assert sorted(e["tenant"] for e in starts) == ["bg", "early", "late"]
        # launched in start_ms order, whatever the file order
        run = res.run(run_id.split("#")[0])
        assert run is not None
        launch = {t.tenant: t.values["start_ns"] for t in run.tenants}
        assert launch["early"] < launch["bg"] < launch["late"]
        assert launch["early"] < 0.04e9 and launch["bg"] >= 0.05e9 and launch["late"] >= 0.25e9
        by = {e["tenant"]: e for e in starts}
        # CUDA_VISIBLE_DEVICES: the GPUs' UUIDs in the order of gpus; env and cwd as written
        assert by["early"]["cvd"] == f"{uuids[1]},{uuids[0]}" and by["late"]["cvd"] == uuids[0]
        assert by["bg"]["cvd"] == uuids[1]
        assert by["early"]["extra"] == "x1" and by["late"]["extra"] is None
        assert by["early"]["cwd"] == str(tmp_path / "work") and by["late"]["cwd"] == os.getcwd()
        # each tenant leads its own process group
        assert all(e["pgid"] == e["pid"] for e in starts)
        # the background tenant was stopped with SIGTERM once the foreground had finished (its handler notes
        # it; on a loaded machine SIGTERM may come before Python has installed it: then it died of SIGTERM)
        term = [e for e in ev if e["run"] == run_id and e["what"] == "term"]
        bg_row = next(t for r in res.runs if r.key.run_id == run_id for t in r.tenants if t.tenant == "bg")
        assert [e["tenant"] for e in term] == ["bg"] or bg_row.values["exit_status"] == -15
        logs = out / "logs" / run_id
        assert (logs / "early.out").read_text() == "hello from early\n"
        assert (logs / "early.err").read_text() == "to stderr\n"
    rows = {(r.key.policy, t.tenant): t for r in res.runs for t in r.tenants}
    early, bg = rows[("huvm", "early")], rows[("huvm", "bg")]
    assert early.foreground and not bg.foreground and early.role == "harvester" and bg.role == "lender"
    assert early.values["ops_done"] == 42 and "note" not in early.values and early.values["exit_status"] == 0
    assert 0.25e9 <= early.runtime_ns < 5e9
    assert bg.values["stopped"] == 1 and early.values["stopped"] == 0
    huvm, stock = res.run("huvm"), res.run("stock")
    assert huvm is not None and stock is not None
    assert huvm.policy_settings["gpu.1.role"] == "lender"  # bg's role (after early's, on the same GPU)
    assert stock.policy_settings["preset"] == "stock" and stock.policy_settings["gpu.1.role"] != "lender"
    assert huvm.node["kind"] == "local" and huvm.node["module"].startswith("nvidia-uvm ")
    assert huvm.node["gpus"] == 2 and huvm.node["scale"] == 1.0
    assert huvm.sim_time_ns >= 0.35e9  # the run lasted until 'late' (250 ms + 100 ms) finished
    assert {s.gpu for s in huvm.samples} == {0, 1}
    assert {c.metric for c in huvm.counters} >= {"evict_to_peer", "faults"}
    assert any("no ideal" in n for n in res.notes)
    # alone baselines: each tenant alone under stock
    assert res.alone_row("early", None) is not None and res.alone_row("bg", None, "huvm#0") is not None
    assert fake.preset() == before  # the policy in force before the experiment is back


def test_stop_escalates_to_sigkill_for_the_whole_process_group(tmp_path: Path) -> None:
    tenants = '''
[[tenant]]
name = "fg"
command = ["PY", "SCRIPT", "LOG", "fg", "0.5"]
gpus = [0]

[[tenant]]
name = "stubborn"
command = ["PY", "SCRIPT", "LOG", "stubborn"]
gpus = [1]
steps = 0
'''
    spec = load(experiment_file(tmp_path, tenants, policies='["stock"]'))
    t0 = time.monotonic()
    with executor(spec, FakeDevice(2), tmp_path / "out") as ex:
        ex.check()
        ex.supports_alone = False  # type: ignore[misc]  # this run only: no alone baselines
        res = ex.execute(ex.planned())
    took = time.monotonic() - t0
    row = next(t for t in res.runs[0].tenants if t.tenant == "stubborn")
    assert row.values["exit_status"] == -9 and row.values["stopped"] == 1  # SIGTERM ignored: SIGKILL
    assert 2.0 <= took < 10  # it waited the 2 s grace period first
    grandchild = int((tmp_path / "log.grandchild").read_text())
    assert _gone(grandchild), "the grandchild in the tenant's process group was killed too"


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def test_a_failing_foreground_command_fails_the_experiment_and_stops_the_rest(tmp_path: Path) -> None:
    tenants = THREE.replace('"fg", "0.1"]', '"fg", "0.3", "3"]')
    spec = load(experiment_file(tmp_path, tenants))
    with executor(spec, FakeDevice(2), tmp_path / "out") as ex:
        ex.check()
        with pytest.raises(HuvmError) as info:
            ex.execute(ex.planned())
    msg = str(info.value)
    assert "run stock#0: tenant 'late' exited with status 3" in msg and "late.err" in msg and "\n" not in msg
    ev = events(tmp_path)
    bg = [e["pid"] for e in ev if e["tenant"] == "bg" and e["what"] == "start"]
    assert [e["tenant"] for e in ev if e["what"] == "term"] == ["bg"] or all(_gone(pid) for pid in bg)


def test_timeout_stops_everything(tmp_path: Path) -> None:
    tenants = '[[tenant]]\nname = "slow"\ncommand = ["PY", "SCRIPT", "LOG", "fg", "30"]\ngpus = [0]\n'
    spec = load(experiment_file(tmp_path, tenants, node="timeout_s = 0.3"))
    t0 = time.monotonic()
    with executor(spec, FakeDevice(2), None) as ex:
        ex.check()
        with pytest.raises(Timeout, match="still running after timeout_s = 0.3 s"):
            ex.execute(ex.planned())
    assert time.monotonic() - t0 < 10
    pid = next(e["pid"] for e in events(tmp_path))
    assert _gone(pid)


# ---- refusals: before anything runs ----------------------------------------------------------------------

def launched(tmp_path: Path) -> bool:
    return (tmp_path / "log").exists()


def test_no_module_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = load(experiment_file(tmp_path, THREE, node=f'device = "{tmp_path / "nvidia-uvm"}"'))
    with pytest.raises(DeviceUnavailable) as info:
        with LocalExecutor(spec, None, gpu_uuids=list, privileged=lambda: True) as ex:
            ex.check()
    assert info.value.reason == "no-device" and "module is not loaded" in str(info.value)
    assert not launched(tmp_path)


def test_the_stock_module_is_refused(tmp_path: Path) -> None:
    spec = load(experiment_file(tmp_path, THREE))
    fake = FakeDevice(2, known=False)
    with pytest.raises(DeviceUnavailable) as info:
        executor(spec, fake, None, gpu_uuids=lambda: []).check()
    assert info.value.reason == "stock-module"
    assert not launched(tmp_path)


def test_gpus_are_checked_against_the_module_and_nvml(tmp_path: Path) -> None:
    spec = load(experiment_file(tmp_path, THREE.replace("gpus = [1, 0]", "gpus = [1, 3]")))
    with pytest.raises(ConfigError) as info:
        executor(spec, FakeDevice(2), None).check()
    assert info.value.key == "tenant[1].gpus" and "GPU 3 is not on this node" in info.value.reason
    spec = load(experiment_file(tmp_path, THREE))
    fake = FakeDevice(2)
    with pytest.raises(DeviceUnavailable) as info2:
        executor(spec, fake, None, gpu_uuids=lambda: fake.uuids()[:1]).check()
    assert info2.value.reason == "no-gpus" and "GPU 1" in str(info2.value) and "not visible to NVML" in str(info2.value)

    def no_nvml() -> list[str]:
        raise DeviceUnavailable("NVML: Driver Not Loaded (is the NVIDIA driver loaded?)", reason="no-gpus")

    with pytest.raises(DeviceUnavailable, match="NVML"):
        executor(spec, fake, None, gpu_uuids=no_nvml).check()
    assert not launched(tmp_path)


def test_nvml_missing_is_a_clear_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(DeviceUnavailable, match="pynvml is not installed"):
        local.nvml_uuids()


def test_privilege_is_required(tmp_path: Path) -> None:
    spec = load(experiment_file(tmp_path, THREE))
    with pytest.raises(DeviceUnavailable) as info:
        executor(spec, FakeDevice(2), None, privileged=lambda: False).check()
    assert info.value.reason == "permission" and "CAP_SYS_ADMIN" in str(info.value)
    # a module that refuses the change anyway: one line at the first run, nothing launched
    with executor(spec, FakeDevice(2, privileged=False), None) as ex:
        ex.check()
        with pytest.raises(DeviceUnavailable) as info:
            ex.execute(ex.planned())
    assert info.value.reason == "permission"
    assert not launched(tmp_path)


def test_cap_sys_admin_is_read_from_the_effective_set(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001ffffffffff\n")
    assert has_cap_sys_admin(str(status))
    status.write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    assert not has_cap_sys_admin(str(status))
    status.write_text(f"CapEff:\t{1 << 21:016x}\n")
    assert has_cap_sys_admin(str(status))


@pytest.mark.parametrize(("old", "new", "key", "message"), [
    ('command = ["PY", "SCRIPT", "LOG", "fg", "0.1"]', 'command = ["no-such-program-huvm"]', "tenant[0].command",
     "'no-such-program-huvm' is not found"),
    ('command = ["PY", "SCRIPT", "LOG", "fg", "0.1"]', 'command = ["./tenant.py"]', "tenant[0].command",
     "not found or not executable"),
    ('cwd = "work"', 'cwd = "missing"', "tenant[1].cwd", "does not exist"),
])
def test_commands_are_checked(tmp_path: Path, old: str, new: str, key: str, message: str) -> None:
    spec = load(experiment_file(tmp_path, THREE.replace(old, new)))
    with pytest.raises(ConfigError) as info:
        executor(spec, FakeDevice(2), None).check()
    assert info.value.key == key and message in info.value.reason
    assert not launched(tmp_path)


def test_run_and_cli_refuse_without_the_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from huvm.cli import main

    f = experiment_file(tmp_path, THREE, node=f'device = "{tmp_path / "nvidia-uvm"}"')
    with pytest.raises(DeviceUnavailable):
        experiment.run(load(f))
    rc = main(["experiment", "run", str(f), "--out", str(tmp_path / "out"), "--no-progress"])
    _out, err = capsys.readouterr()
    assert rc != 0 and err.count("\n") <= 2 and "module is not loaded" in err and "Traceback" not in err
    assert not launched(tmp_path) and not (tmp_path / "out" / "report.md").exists()


def test_a_local_experiment_writes_the_same_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_to on a local node: report, plots and Parquet as for the simulator, plus data/runs and the logs."""
    import pyarrow.parquet as pq

    fake = FakeDevice(2)
    monkeypatch.setattr(local, "KernelBackend", fake.open)
    monkeypatch.setattr(local, "nvml_uuids", fake.uuids)
    monkeypatch.setattr(local, "has_cap_sys_admin", lambda: True)
    tenants = THREE.replace('start_ms = 250', 'start_ms = 100')
    spec = load(experiment_file(tmp_path, tenants))
    out = tmp_path / "out"
    res, files = experiment.run_to(spec, out)
    for rel in ("report.md", "summary.json", "plots/runtime.png", "plots/memory.png", "data/results.parquet",
                "data/runs.parquet", "data/tenants.parquet", "data/counters.parquet", "data/samples.parquet"):
        assert (out / rel) in files, rel
    runs = pq.read_table(out / "data/runs.parquet").to_pylist()
    assert [(r["run_id"], r["node_kind"]) for r in runs] == [("stock#0", "local"), ("huvm#0", "local")]
    assert all(r["module"].startswith("nvidia-uvm ") and r["node_gpus"] == 2 for r in runs)
    report = (out / "report.md").read_text()
    assert "| huvm |" in report and "no ideal (unlimited-memory) run on a local node" in report
    assert (out / "logs" / "huvm#0" / "late.out").read_text() == "hello from late\n"
    assert [r.policy for r in experiment.policy_rows(res)] == ["stock", "huvm"]


def test_a_background_tenant_due_after_the_foreground_never_starts(tmp_path: Path) -> None:
    tenants = ('[[tenant]]\nname = "fg"\ncommand = ["PY", "SCRIPT", "LOG", "fg", "0.05"]\ngpus = [0]\n'
               '[[tenant]]\nname = "late-bg"\ncommand = ["PY", "SCRIPT", "LOG", "bg"]\ngpus = [1]\nsteps = 0\n'
               'start_ms = 60000\n')
    spec = load(experiment_file(tmp_path, tenants, policies='["stock"]'))
    t0 = time.monotonic()
    with executor(spec, FakeDevice(2), None) as ex:
        ex.check()
        ex.supports_alone = False  # type: ignore[misc]  # this run only: no alone baselines
        res = ex.execute(ex.planned())
    assert time.monotonic() - t0 < 30
    assert [t.tenant for t in res.runs[0].tenants] == ["fg"]
    assert {e["tenant"] for e in events(tmp_path)} == {"fg"}
