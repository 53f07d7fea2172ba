"""The emulated node's host-side logic (issue 13 item 1): the replay plan of a trace, the SM access arrays, the
replay loop against a fake software GPU, the counters-vs-residency check, the refusals of the host side and
its one boot of the test bed (against a fake run-vm.sh). The real thing runs in the qemu guest:
tests/vm/softgpu/test_experiment.py."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from huvm import abi, errors
from huvm.errors import ConfigError, DeviceUnavailable, HuvmError
from huvmlab import traces
from huvmlab.experiment import emulated, emulated_guest
from huvmlab.experiment.emulated import EmulatedExecutor, emulated_tenant_values, guest_script, residency_check
from huvmlab.experiment.emulated_guest import (
    PAGE,
    REGION_BASE,
    Accesses,
    SmIssuer,
    TenantContext,
    TenantJob,
    TenantOutcome,
    access_array,
    access_dtype,
    build_plan,
    cpu_phase_ops,
    plan_accesses,
    replay,
)
from huvmlab.experiment.executor import plan as plan_runs
from huvmlab.experiment.recording import counters_vs_events
from huvmlab.experiment.resultio import dumps
from huvmlab.experiment.results import CounterRow, ExperimentResult, RunKey, RunResult, TenantRow
from huvmlab.experiment.spec import load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "pyctl" / "huvm" / "examples" / "consolidation-emulated.toml"
KIB = 1024
MIB = 1 << 20


def synthetic_trace(free_op: list[int] | None = None) -> SimpleNamespace:
    """Three ops on six chunks: op0 reads 0, 1 and writes 2; op1 read-modify-writes 5, then 3, 4; op2 touches
    nothing. Chunks 3 and 4 are freed after op1, chunk 0 after op2."""
    return SimpleNamespace(
        name="synthetic",
        op_time_ns=np.array([100, 201, 0], dtype=np.uint64),
        op_first_touch=np.array([0, 3, 6, 6], dtype=np.uint32),
        touch_chunk=np.array([0, 1, 2, 5, 3, 4], dtype=np.uint32),
        touch_mode=np.array([0, 0, 1, 2, 2, 2], dtype=np.uint8),
        chunk_alloc_op=np.full(6, -1, dtype=np.int32),
        chunk_free_op=np.array(free_op if free_op is not None else [2, -1, -1, 1, 1, -1], dtype=np.int32))


# ---- the replay plan ----------------------------------------------------------------------------------------

def test_plan_coalesces_runs_scales_pages_and_times() -> None:
    p = build_plan(synthetic_trace(), 16 * KIB, time_scale=0.5, cpu_ops=np.array([False, True, False]))
    assert p.pages_per_chunk == 4 and p.n_ops == 3 and p.n_chunks == 6
    # op0: chunks 0-1 read (one run of 8 pages), chunk 2 written; op1: chunk 5, then 3-4 (not adjacent to 5)
    assert p.run_first.tolist() == [0, 2, 4, 4]
    assert p.run_page.tolist() == [0, 8, 20, 12]
    assert p.run_pages.tolist() == [8, 4, 4, 8]
    assert p.run_write.tolist() == [False, True, True, True]
    pages, write = p.op_pages(0)
    assert pages.tolist() == list(range(12)) and write.tolist() == [False] * 8 + [True] * 4
    pages, write = p.op_pages(1)
    assert pages.tolist() == [20, 21, 22, 23, 12, 13, 14, 15, 16, 17, 18, 19] and write.all()
    assert p.op_pages(2)[0].size == 0
    assert p.op_frees(0) == [] and p.op_frees(1) == [(12, 8)] and p.op_frees(2) == [(0, 4)]
    assert p.op_time_ns.tolist() == [50, 100, 0] and p.compute_ns == 150
    assert p.cpu_op.tolist() == [False, True, False]
    assert p.touches.tolist() == [3, 3, 0]
    assert p.touched_chunks.tolist() == [0, 1, 2, 3, 4, 5]
    assert p.footprint_bytes == 6 * 16 * KIB and p.region_bytes == 2 * MIB
    allp, allw, first = p.all_pages()
    assert first.tolist() == [0, 12, 24, 24]
    assert allp.tolist() == p.op_pages(0)[0].tolist() + p.op_pages(1)[0].tolist()
    assert allw.tolist() == p.op_pages(0)[1].tolist() + p.op_pages(1)[1].tolist()


@pytest.mark.parametrize("chunk_bytes", [4 * KIB, 12 * KIB, 64 * KIB])
def test_plan_pages_are_the_traces_touches_page_by_page(chunk_bytes: int) -> None:
    """Against a naive expansion: every touch of chunk c is its pages c*k .. c*k+k-1, in trace order."""
    sim = traces.load(traces.resolve("bundled:gpt2-small")).to_sim_events("v100")
    p = build_plan(sim, chunk_bytes)
    k = chunk_bytes // PAGE
    first = sim.op_first_touch.astype(np.int64)
    allp, allw, op_first = p.all_pages()
    for op in range(0, sim.n_ops, 7):
        chunks = sim.touch_chunk[first[op]:first[op + 1]].astype(np.int64)
        modes = sim.touch_mode[first[op]:first[op + 1]]
        want = (chunks[:, None] * k + np.arange(k)).reshape(-1)
        pages, write = p.op_pages(op)
        assert pages.tolist() == want.tolist(), f"op {op}"
        assert write.tolist() == np.repeat(modes != 0, k).tolist(), f"op {op}"
        assert allp[op_first[op]:op_first[op + 1]].tolist() == want.tolist()
    assert int(p.run_pages.sum()) == sim.n_touches * k
    assert p.n_chunks * chunk_bytes == p.footprint_bytes


def test_plan_refuses_partial_pages_and_bad_time_scale() -> None:
    with pytest.raises(errors.UsageError, match="whole 4 KiB pages"):
        build_plan(synthetic_trace(), 6000)
    with pytest.raises(errors.UsageError, match="time_scale"):
        build_plan(synthetic_trace(), PAGE, time_scale=0)
    with pytest.raises(errors.UsageError, match="cpu_ops"):
        build_plan(synthetic_trace(), PAGE, cpu_ops=np.array([True]))


def test_cpu_phases() -> None:
    assert cpu_phase_ops(["fwd", "cpu", "cpu.load", "cpux", "bwd"]).tolist() == [False, True, True, False, False]


# ---- the SM access array and its issuer --------------------------------------------------------------------

def test_access_array_is_softgpu_access_t() -> None:
    f = abi.ffi
    dt = access_dtype()
    assert dt.itemsize == f.sizeof("softgpu_access_t")
    for name in ("va", "size", "data", "seed", "type", "flags", "status", "faults", "value"):
        assert dt.fields is not None and dt.fields[name][1] == f.offsetof("softgpu_access_t", name), name
    pages = np.array([3, 0, 7], dtype=np.int64)
    write = np.array([False, True, True])
    arr = access_array(1 << 40, pages, write, seed=9)
    assert arr["va"].tolist() == [(1 << 40) + 3 * PAGE, 1 << 40, (1 << 40) + 7 * PAGE]
    assert arr["size"].tolist() == [8, 8, 8] and arr["seed"].tolist() == [9, 9, 9]
    assert arr["type"].tolist() == [abi.lib.SOFTGPU_ACCESS_READ, abi.lib.SOFTGPU_ACCESS_WRITE,
                                    abi.lib.SOFTGPU_ACCESS_WRITE]
    assert arr["flags"].tolist() == [0, 0, 0] and arr["data"].tolist() == [0, 0, 0]


class FakeSoftGpu:
    """SOFTGPU_SM_ACCESS against nothing: records the VAs of each call and fills each entry's outputs
    (faults: 1 for pages in ``faulting``; status: ``fail`` for pages in ``failing``)."""

    def __init__(self, faulting: set[int] = frozenset(), failing: set[int] = frozenset(), fail: int = 0) -> None:  # type: ignore[assignment]
        self.calls: list[list[int]] = []
        self.faulting, self.failing, self.fail = faulting, failing, fail
        self.limit = int(abi.lib.SOFTGPU_MAX_ACCESSES)

    def new(self, ctype: str) -> Any:
        return abi.ffi.new(f"{ctype} *")

    def call(self, cmd: int, p: Any, name: str) -> Any:
        assert cmd == abi.lib.SOFTGPU_IOCTL_SM_ACCESS and name == "SOFTGPU_SM_ACCESS"
        assert 0 < p.count <= self.limit
        dt = access_dtype()
        raw = (ctypes.c_uint8 * (dt.itemsize * p.count)).from_address(int(p.accesses))
        entries = np.frombuffer(raw, dtype=dt)
        pages = ((entries["va"] - np.uint64(REGION_BASE)) // np.uint64(PAGE)).astype(np.int64)
        entries["faults"] = [1 if int(x) in self.faulting else 0 for x in pages]
        entries["status"] = [self.fail if int(x) in self.failing else 0 for x in pages]
        self.calls.append(pages.tolist())
        return p


def test_issuer_batches_counts_faults_and_names_a_failed_access() -> None:
    n = int(abi.lib.SOFTGPU_MAX_ACCESSES) + 5
    pages = np.arange(n, dtype=np.int64)
    arr = access_array(REGION_BASE, pages, np.zeros(n, dtype=np.bool_))
    sg = FakeSoftGpu(faulting={1, 2, n - 1})
    iss = SmIssuer(sg, 7)
    iss.issue(arr, 0, n)
    iss.collect(arr, 0, n)
    assert [len(c) for c in sg.calls] == [n - 5, 5]
    assert (iss.totals.accesses, iss.totals.faulted, iss.totals.fault_entries, iss.totals.ioctls) == (n, 3, 3, 2)
    bad = FakeSoftGpu(failing={4}, fail=0x65)  # NV_ERR_TIMEOUT
    iss = SmIssuer(bad, 7)
    iss.issue(arr, 0, 10)
    with pytest.raises(HuvmError, match=f"0x{REGION_BASE + 4 * PAGE:x}"):
        iss.collect(arr, 0, 10)


def fake_context(sg: FakeSoftGpu) -> TenantContext:
    region = SimpleNamespace(base=REGION_BASE, view=lambda: memoryview(bytearray(0)), close=lambda: None)
    return TenantContext(sg, SimpleNamespace(close=lambda: None), (), SimpleNamespace(index=0),
                         chan=SimpleNamespace(handle=3), region=region)


def test_replay_issues_every_op_of_every_step_in_order() -> None:
    plan = build_plan(synthetic_trace(free_op=[-1] * 6), 8 * KIB, time_scale=0.001)
    job = TenantJob("t", 0, 2, 0, 0, True, plan, 1, seed=1, accesses=plan_accesses(plan, 1))
    sg = FakeSoftGpu(faulting={0, 10})  # page 10: chunk 5 (8 KiB chunks: 2 pages each)
    out = TenantOutcome()
    replay(job, fake_context(sg), 0, lambda: False, out)
    allp, _, first = plan.all_pages()
    one = [allp[first[0]:first[1]].tolist(), allp[first[1]:first[2]].tolist()]
    assert sg.calls == one + one  # op2 touches nothing: no ioctl
    assert (out.steps_done, out.ops_done, out.touches, out.page_accesses) == (2, 6, 12, 2 * len(allp))
    assert (out.faults, out.fault_entries, out.sm_ioctls) == (4, 4, 4)
    assert out.compute_ns == 2 * plan.compute_ns and out.done == 1
    assert out.runtime_ns > 0 and out.end_ns >= out.runtime_ns


def test_replay_background_runs_until_told_to_stop() -> None:
    plan = build_plan(synthetic_trace(free_op=[-1] * 6), 8 * KIB)
    job = TenantJob("bg", 0, 0, 0, 0, True, plan, 1, accesses=plan_accesses(plan, 0))
    sg = FakeSoftGpu()
    asked = {"n": 0}

    def stop() -> bool:
        asked["n"] += 1
        return asked["n"] > 7  # 7 ops run: two whole passes and one op of the third

    out = TenantOutcome()
    replay(job, fake_context(sg), 0, stop, out)
    assert (out.steps_done, out.ops_done) == (2, 7)
    assert len(sg.calls) == 2 * 2 + 1
    allp, _, first = plan.all_pages()
    assert out.page_accesses == 2 * len(allp) + (first[1] - first[0])


# ---- result values and checks -------------------------------------------------------------------------------

def test_tenant_values_from_the_census() -> None:
    v = emulated_tenant_values({"faults": 3}, {"gpu0": 5, "gpu2": 2, "cpu": 1}, {"gpu0": 4, "gpu0+gpu2": 1,
                                                                                 "cpu": 1, "gpu2": 1}, 0, 3)
    assert v["faults"] == 3
    assert (v["resident_chunks"], v["peer_chunks"], v["host_chunks"]) == (5, 2, 1)
    assert (v["blocks_on_gpu0"], v["blocks_on_gpu1"], v["blocks_on_gpu2"], v["blocks_on_cpu"]) == (5, 0, 2, 1)
    assert v["blocks_split"] == 1


def run_with(held: dict[tuple[int, int], int], harvested: dict[int, int], blocks: dict[int, dict[int, int]]
             ) -> RunResult:
    key = RunKey("huvm", None, 0)
    r = RunResult(key, 1)
    for (g, h), b in held.items():
        r.counters.append(CounterRow(key, "pair", g, h, "held_bytes", b))
    for g, b in harvested.items():
        r.counters.append(CounterRow(key, "gpu", g, -1, "harvested_bytes", b))
    for g, where in blocks.items():
        r.tenants.append(TenantRow(key, f"t{g}", g, True, 1, {f"blocks_on_gpu{h}": n for h, n in where.items()}))
    return r


def test_residency_check_agrees_and_names_disagreements() -> None:
    ok = run_with({(0, 1): 6 * MIB, (0, 2): 2 * MIB}, {0: 8 * MIB}, {0: {0: 40, 1: 3, 2: 1}, 1: {1: 2}})
    assert residency_check(ok, 3) == []
    bad = run_with({(0, 1): 4 * MIB}, {0: 4 * MIB}, {0: {0: 40, 1: 3}})
    lines = residency_check(bad, 3)
    assert len(lines) == 2
    assert "GPU0's data on GPU1: held_bytes 4 MiB, UVM shows 3 blocks (6 MiB)" in lines[0]
    assert "GPU0: harvested_bytes 4 MiB, UVM shows 3 blocks on peers" in lines[1]
    assert residency_check(run_with({}, {}, {0: {0: 4}}), 2) == []
    assert residency_check(run_with({}, {}, {0: {1: 1}}), 2)  # data on a peer nobody counted


def test_counters_vs_events_hook() -> None:
    """The guest test's hook (huvmlab.experiment.recording.counters_vs_events): rows of recorded events against the
    run's counters; giveback counts on the lender (the event's gpu)."""
    key = RunKey("huvm", None, 0)
    r = RunResult(key, 1, counters=[CounterRow(key, "gpu", 0, -1, "evict_to_peer", 5),
                                    CounterRow(key, "gpu", 0, -1, "evict_to_host", 1),
                                    CounterRow(key, "gpu", 1, -1, "giveback", 2)])

    def ev(name: str, gpu: int, peer: int, n: int) -> list[dict[str, int | str]]:
        return [{"event": name, "gpu": gpu, "peer": peer, "reason": 0, "bytes": 2 << 20, "ts_ns": 0}] * n

    events = ev("evict", 0, 1, 3) + ev("evict", 0, 2, 2) + ev("evict", 0, 16, 1) + ev("giveback", 1, 0, 2)
    assert counters_vs_events(r, events) == []
    wrong = ev("evict", 0, 1, 3) + ev("evict", 0, 2, 1) + ev("evict", 0, 16, 1) + ev("giveback", 1, 0, 2)
    assert counters_vs_events(r, wrong) == ["huvm#0: GPU0 evict_to_peer: counter 5, events 4"]


# ---- the executor on the host --------------------------------------------------------------------------------

def example_spec(tmp_path: Path, *, trace: str | None = None) -> Any:
    text = EXAMPLE.read_text()
    if trace is not None:
        text = text.replace('trace = "bundled:lender-idle"', f'trace = "{trace}"')
    p = tmp_path / "emu.toml"
    p.write_text(text)
    return load(p)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Outside the guest, as root, qemu found, the test bed's preflight passing."""
    monkeypatch.delenv("HUVM_UVM_VARIANT", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")

    def preflight(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        assert "--preflight" in cmd
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", preflight)
    return monkeypatch


def test_example_plans_three_runs_without_ideal_and_scales_by_its_factor(tmp_path: Path) -> None:
    spec = load(EXAMPLE)
    ex = EmulatedExecutor(spec)
    assert [r.key.run_id for r in ex.planned()] == ["stock#0", "huvm-atc22#0", "huvm#0"]
    assert len(plan_runs(spec)) == 3  # the file itself says ideal = false
    assert ex.chunk_bytes == 16 * KIB
    harvester = ex.plan_of(spec.tenants[0])
    assert harvester is not None and harvester.pages_per_chunk == 4
    # the harvester's 24 GB (12084 trace chunks) are 189 MiB here: oversubscribed on a 96 MiB PMA region
    assert harvester.footprint_bytes == harvester.n_chunks * 16 * KIB and harvester.region_bytes == 190 * MIB
    rec = ex.record()
    assert (rec.kind, rec.scale, rec.gpus, rec.preset) == ("emulated", 1 / 128, 3, "aws-p3.8xlarge")


def test_host_refuses_without_root(tmp_path: Path, host: pytest.MonkeyPatch) -> None:
    host.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DeviceUnavailable) as info:
        EmulatedExecutor(load(EXAMPLE)).check()
    assert info.value.reason == "root" and "needs root" in str(info.value) and "\n" not in str(info.value)


def test_host_refuses_without_qemu(host: pytest.MonkeyPatch) -> None:
    host.setattr(shutil, "which", lambda name: None)
    with pytest.raises(DeviceUnavailable, match="qemu-system-x86_64"):
        EmulatedExecutor(load(EXAMPLE)).check()


def test_host_refuses_when_the_test_bed_cannot_run(host: pytest.MonkeyPatch) -> None:
    def preflight(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 77, "SKIP: vm-test: linux-headers-amd64 is not installed\n", "")

    host.setattr(subprocess, "run", preflight)
    with pytest.raises(DeviceUnavailable) as info:
        EmulatedExecutor(load(EXAMPLE)).check()
    assert str(info.value) == "the qemu test bed cannot run: linux-headers-amd64 is not installed"


def test_host_refuses_unbuilt_modules(tmp_path: Path, host: pytest.MonkeyPatch) -> None:
    host.setenv("BUILD", str(tmp_path))
    with pytest.raises(DeviceUnavailable) as info:
        EmulatedExecutor(load(EXAMPLE)).check()
    assert "the software GPU is not built" in str(info.value) and info.value.reason == "modules"
    assert "softgpu-vm-modules VM_SOFTGPU_VARIANTS=patched-release" in (info.value.hint or "")
    (tmp_path / "softgpu").mkdir()
    (tmp_path / "softgpu" / "huvm-softgpu.ko").write_bytes(b"")
    host.setenv("HUVM_EMULATED_VARIANT", "patched-debug")
    with pytest.raises(DeviceUnavailable, match=r"nvidia-uvm \(patched-debug\) is not built"):
        EmulatedExecutor(load(EXAMPLE)).check()


def test_host_refuses_a_trace_the_guest_cannot_see(tmp_path: Path, host: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "mine.trace"
    shutil.copytree(traces.resolve("bundled:lender-idle"), trace)
    build = tmp_path / "build"              # what the check looks for, built or not on this machine
    for needed in (build / "softgpu" / "huvm-softgpu.ko", build / "module" / "patched-release" / "nvidia-uvm.ko"):
        needed.parent.mkdir(parents=True)
        needed.write_bytes(b"")
    host.setenv("BUILD", str(build))
    from huvm import uvm

    host.setattr(uvm, "binding_path", lambda: tmp_path / "binding.so")
    ex = EmulatedExecutor(example_spec(tmp_path, trace=str(trace)))
    with pytest.raises(ConfigError) as info:
        ex.check()
    assert "the test bed's guest does not see" in str(info.value)
    assert info.value.line is not None and info.value.key == "tenant[1].trace"


def test_guest_script_recreates_a_hidden_file_and_runs_the_guest(tmp_path: Path) -> None:
    spec = example_spec(tmp_path)
    script = guest_script(spec, ROOT, "/venv/bin/python", "/run/huvm-out/r.json", "/run/huvm-out/e.txt")
    assert str(tmp_path).startswith("/tmp/")  # pytest's tmp_path: hidden in the guest
    assert f"cat > {tmp_path / 'emu.toml'} <<'HUVM_EXPERIMENT_EOF'" in script
    assert script.rstrip().endswith(f"/venv/bin/python -m huvmlab.experiment.emulated guest {tmp_path / 'emu.toml'} "
                                    "--result /run/huvm-out/r.json --error /run/huvm-out/e.txt")
    # the heredoc gives back the file byte for byte (run it with the path moved)
    moved = tmp_path / "copy" / "emu.toml"
    head = script.split(f"cd {ROOT}")[0].replace(str(tmp_path / "emu.toml"), str(moved)) \
        .replace(f"mkdir -p {tmp_path}", f"mkdir -p {moved.parent}")
    subprocess.run(["bash", "-c", head], check=True)
    assert moved.read_text() == spec.doc.text.rstrip("\n") + "\n"
    visible = guest_script(load(EXAMPLE), ROOT, "py", "r", "e")
    assert "<<" not in visible and f"guest {EXAMPLE}" in visible


def test_guest_script_trusts_a_checkout_under_tmp(tmp_path: Path) -> None:
    """A checkout in /tmp is bound back over the guest's tmpfs (tests/vm/init.sh): its files are not recreated."""
    spec = example_spec(tmp_path)
    script = guest_script(spec, tmp_path, "py", "r", "e")
    assert "<<" not in script and f"guest {tmp_path / 'emu.toml'}" in script


def test_guest_script_terminator_never_in_the_text(tmp_path: Path) -> None:
    p = tmp_path / "e.toml"
    p.write_text(EXAMPLE.read_text() + "# HUVM_EXPERIMENT_EOF\n")
    script = guest_script(load(p), ROOT, "py", "r", "e")
    assert "<<'HUVM_EXPERIMENT_EOF_'" in script and "\nHUVM_EXPERIMENT_EOF_\n" in script


def test_guest_entry_point_outside_the_guest_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HUVM_UVM_VARIANT"}
    err = tmp_path / "err.txt"
    p = subprocess.run([sys.executable, "-m", "huvmlab.experiment.emulated", "guest", str(EXAMPLE), "--result",
                        str(tmp_path / "r.json"), "--error", str(err)], capture_output=True, text=True, env=env)
    assert p.returncode == 1
    # (matplotlib, imported with huvmlab.experiment, announces a font-cache rebuild on stderr: not ours)
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("Matplotlib ")]
    assert len(lines) == 1 and "not inside the test bed's guest" in lines[0]
    assert "Traceback" not in p.stderr and err.read_text().strip() in p.stderr
    assert not (tmp_path / "r.json").exists()


FAKE_RUN_VM = """#!/bin/bash
# a stand-in for tests/vm/run-vm.sh: writes what the guest would, into --out
out=""; cmdfile=""
while [ $# -gt 0 ]; do
    case "$1" in --out) out=$2; shift 2 ;; --softgpu-cmd) printf '%s' "$2" > "$FAKE_ARGS.cmd"; shift 2 ;;
                 *) echo "$1" >> "$FAKE_ARGS"; shift ;; esac
done
mkdir -p "$out"
echo "VM_GPUS=$VM_GPUS VM_FB_MIB=$VM_FB_MIB" >> "$FAKE_ARGS"
echo "emulated: run 1/3: stock#0"
echo "emulated: run 2/3: huvm-atc22#0"
echo "emulated: run 3/3: huvm#0"
head -c 100 /dev/zero > "$out/nvidia-uvm-patched-release.ko"
echo console > "$out/console.log"
if [ -n "${FAKE_RESULT:-}" ]; then cp "$FAKE_RESULT" "$out/emulated-result.json"; fi
if [ -n "${FAKE_ERROR:-}" ]; then echo "$FAKE_ERROR" > "$out/emulated-error.txt"; fi
exit ${FAKE_RC:-0}
"""


@pytest.fixture
def fake_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkout"
    (root / "tests" / "vm").mkdir(parents=True)
    (root / "tests" / "vm" / "run-vm.sh").write_text(FAKE_RUN_VM)
    monkeypatch.setattr(emulated, "repo_root", lambda: root)
    monkeypatch.delenv("HUVM_UVM_VARIANT", raising=False)
    monkeypatch.delenv("BUILD", raising=False)         # make exports it: the fake checkout has its own build/
    monkeypatch.delenv("HUVM_VM_WORK", raising=False)
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args"))
    return tmp_path


def guest_result(spec: Any) -> ExperimentResult:
    res = ExperimentResult(spec.name, spec.description, "aws-p3.8xlarge[:3]", None)
    for p in ("stock", "huvm-atc22", "huvm"):
        key = RunKey(p, None, 0)
        res.runs.append(RunResult(key, 5_000_000_000, tenants=[TenantRow(key, "gpt2-medium", 0, True, 5_000_000_000,
                                                                          {"faults": 7})],
                                  node={"kind": "emulated", "module": "m", "preset": "aws-p3.8xlarge",
                                        "scale": 1 / 128, "gpus": 3}))
    res.notes.append("from the guest")
    return res


def test_host_boots_the_test_bed_once_and_loads_the_guests_results(fake_testbed: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load(EXAMPLE)
    (fake_testbed / "result.json").write_text(dumps(guest_result(spec)))
    monkeypatch.setenv("FAKE_RESULT", str(fake_testbed / "result.json"))
    out = fake_testbed / "out"
    ex = EmulatedExecutor(spec, out)
    ex._checked = True
    seen: list[tuple[str, int, int]] = []
    res = ex.execute(ex.planned(), lambda p, i, n: seen.append((p.key.run_id, i, n)))
    assert seen == [("stock#0", 0, 3), ("huvm-atc22#0", 1, 3), ("huvm#0", 2, 3)]
    assert [r.key.run_id for r in res.runs] == ["stock#0", "huvm-atc22#0", "huvm#0"]
    assert res.runs[0].tenants[0].values == {"faults": 7} and res.runs[0].node["kind"] == "emulated"
    assert res.notes[0] == "from the guest" and "ran for" in res.notes[-1]
    assert (out / "vm" / "console.log").is_file() and not list((out / "vm").glob("*.ko"))
    args = (fake_testbed / "args").read_text().split()
    assert "--phases" in args and "softgpu" in args and "VM_GPUS=3" in args and "VM_FB_MIB=128" in args
    assert any(a.startswith("patched-release=") and a.endswith("build/module/patched-release/nvidia-uvm.ko")
               for a in args)
    assert f"-m huvmlab.experiment.emulated guest {EXAMPLE}" in (fake_testbed / "args.cmd").read_text()
    assert str(fake_testbed / "checkout" / "build" / "vm-emulated") in args  # its own work dir, not vm-test's


def test_host_reports_the_guests_error_in_one_line(fake_testbed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ERROR", "DeviceUnavailable: node.module = 'patched' but the test bed loaded stock")
    ex = EmulatedExecutor(load(EXAMPLE), fake_testbed / "out")
    ex._checked = True
    with pytest.raises(HuvmError) as info:
        ex.execute(ex.planned())
    msg = str(info.value)
    assert msg.startswith("the emulated node produced no results: DeviceUnavailable: node.module") and "\n" not in msg


def test_host_fails_when_the_test_bed_fails(fake_testbed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load(EXAMPLE)
    (fake_testbed / "result.json").write_text(dumps(guest_result(spec)))
    monkeypatch.setenv("FAKE_RESULT", str(fake_testbed / "result.json"))
    monkeypatch.setenv("FAKE_RC", "3")
    ex = EmulatedExecutor(spec, fake_testbed / "out")
    ex._checked = True
    with pytest.raises(HuvmError, match="the emulated node's test bed failed"):
        ex.execute(ex.planned())


def test_cli_refuses_in_one_line_without_the_modules(tmp_path: Path) -> None:
    env = {**os.environ, "BUILD": str(tmp_path)}
    env.pop("HUVM_UVM_VARIANT", None)
    huvmctl = Path(sys.executable).parent / "huvmctl"
    p = subprocess.run([str(huvmctl), "experiment", "run", str(EXAMPLE), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("Matplotlib ")]
    assert "Traceback" not in p.stderr and len(lines) == 1
    # whichever refusal this machine meets first: root, qemu, the test bed's prerequisites, the modules
    assert any(w in p.stderr for w in ("needs root", "qemu", "test bed cannot run", "not built")), p.stderr
    assert not (tmp_path / "o" / "vm").exists()


def test_accesses_are_shared_per_trace_and_seed() -> None:
    spec = load(EXAMPLE)
    ex = EmulatedExecutor(spec)
    a, b = ex.job(spec.tenants[0]), ex.job(spec.tenants[0])
    assert isinstance(a.accesses, Accesses) and a.accesses is b.accesses
    assert a.accesses.arr["va"][0] >= REGION_BASE
    assert ex.job(spec.tenants[1]).accesses is not a.accesses
    assert emulated_guest.whole_blocks(1) == 2 * MIB and emulated_guest.whole_blocks(0) == 0


def test_census_samples_every_block_first_and_last_and_at_most_per_block() -> None:
    sim = traces.load(traces.resolve("bundled:lender-rising")).to_sim_events("v100")
    p = build_plan(sim, 16 * KIB)
    got = emulated_guest.census_pages(p, per_block=16)
    all_first = p.touched_chunks * p.pages_per_chunk
    per_page = 2 * MIB // PAGE
    blocks = np.unique(all_first // per_page)
    assert np.array_equal(np.unique(got // per_page), blocks)  # every touched block is sampled
    assert np.isin(got, all_first).all() and np.all(np.diff(got) > 0)
    counts = np.bincount((got // per_page - blocks[0]).astype(np.int64))
    assert counts.max() == 16
    for b in blocks[:5].tolist():  # a block's first and last touched chunk are among its samples
        mine = all_first[all_first // per_page == b]
        assert mine[0] in got and mine[-1] in got
    small = build_plan(synthetic_trace(), 16 * KIB)
    assert emulated_guest.census_pages(small).tolist() == [0, 4, 8, 12, 16, 20]


def test_plan_of_a_trace_with_a_cpu_phase_and_a_freed_buffer(tmp_path: Path) -> None:
    """The guest test's mixed trace (tests/vm/softgpu/test_experiment.py): the CPU op is flagged, the freed
    scratch buffer's pages are freed after its op, and nothing else is."""
    from huvmlab.traces.builder import Builder
    from huvmlab.traces.schema import MODE_READ, MODE_WRITE_NEW, write_tables

    b = Builder()
    a = b.storage(512 * MIB, "param", "float32", "A", before_op=-1)
    b.op("init", "fwd", fixed_ns=1_000_000)
    b.access_all(a, MODE_WRITE_NEW)
    b.op("load", "cpu.load", fixed_ns=1_000_000)
    b.access_all(a, MODE_READ)
    tmp = b.storage(256 * MIB, "other", "float32", "B")
    b.op("scratch", "fwd", fixed_ns=1_000_000)
    b.access_all(tmp, MODE_WRITE_NEW)
    b.free(tmp)
    b.empty_cache()
    path = write_tables(b.tables({"kind": "test", "model": "mixed", "name": "mixed"}), tmp_path / "m.trace")
    tr = traces.load(path)
    p = build_plan(tr.to_sim_events("v100"), 16 * KIB, 1 / 16, cpu_phase_ops(tr.tables.o_phase))
    assert p.cpu_op.tolist() == [False, True, False]
    assert p.op_frees(0) == [] and p.op_frees(1) == []
    ((first, n),) = p.op_frees(2)
    assert n == 2 * MIB // PAGE and first == p.op_pages(2)[0][0]  # exactly B's pages, 2 MiB here
    assert p.op_time_ns.tolist() == [62500, 62500, 62500]


def test_kernel_cache_is_shared_by_hard_links(tmp_path: Path) -> None:
    src, work = tmp_path / "vm", tmp_path / "vm-emulated"
    (src / "kernel-6.1.0-56-amd64").mkdir(parents=True)
    (src / "kernel-6.1.0-56-amd64" / "vmlinux").write_bytes(b"elf")
    (src / "kernel-6.1.0-56-amd64" / "ready").write_text("")
    (src / "kernel-9.9-half").mkdir()  # a download cut short: no ready file
    linked = emulated.share_kernel_cache(src, work)
    assert linked == [work / "kernel-6.1.0-56-amd64"]
    assert (work / "kernel-6.1.0-56-amd64" / "vmlinux").stat().st_ino == \
        (src / "kernel-6.1.0-56-amd64" / "vmlinux").stat().st_ino
    assert not (work / "kernel-9.9-half").exists()
    assert emulated.share_kernel_cache(src, work) == []  # already there
    assert emulated.share_kernel_cache(src, src) == []


def test_two_harvesters_twin_matches_the_sim_example() -> None:
    """two-harvesters-emulated.toml is the twin of two-harvesters.toml (the second sim-vs-emulated cross-check):
    the same tenants (GPU, trace, role, background or not), the same policies and custom policy tables; its
    UVM memory per GPU at trace scale (96 MiB / scale) is within 10 % of the simulated example's usable memory."""
    examples = ROOT / "pyctl" / "huvm" / "examples"
    sim, twin = load(examples / "two-harvesters.toml"), load(examples / "two-harvesters-emulated.toml")
    assert twin.node_kind == "emulated" and twin.emulated is not None
    assert [(t.name, t.gpu, t.trace, t.steps > 0) for t in sim.tenants] == \
        [(t.name, t.gpu, t.trace, t.steps > 0) for t in twin.tenants]
    assert [p.name for p in sim.policies] == [p.name for p in twin.policies]
    assert [(p.preset, p.table) for p in sim.policies] == [(p.preset, p.table) for p in twin.policies]
    assert twin.emulated.gpus == 4 and twin.record_events
    uvm_bytes = (twin.emulated.fb_mib - 32) << 20          # the software GPU keeps 32 MiB for RM
    usable_sim = int(sim.node_options["gpu_memory_bytes"]) - int(sim.node_options["gpu_reserved_bytes"])
    assert abs(uvm_bytes / twin.emulated.scale - usable_sim) <= 0.1 * usable_sim


def test_runs_are_a_peak_window_apart() -> None:
    # one number: the core's own-peak window is the gap the emulated node leaves between two runs
    src = (ROOT / "driver" / "core" / "huvm_internal.h").read_text()
    m = re.search(r"#define HUVM_OWN_PEAK_WINDOW_MS\s+([0-9]+)u?", src)
    assert m is not None
    assert int(m.group(1)) / 1000 == emulated_guest.OWN_PEAK_WINDOW_S
