"""The emulated node end to end (issue 13 item 1): the shipped example
``pyctl/huvm/examples/consolidation-emulated.toml`` run in this guest through huvm's experiment runner, exactly
as ``huvmctl experiment run`` does when it boots the test bed (the executor runs the runs itself here: this
guest is the emulated node).

Collected on the patched-release variant only (conftest.py): three runs (stock, huvm-atc22, huvm), each a
harvester (GPU0), an idle lender (GPU1) and a lender whose memory rises mid-run (GPU2), every tenant a guest
process replaying its trace through nvidia-uvm. Checked: the output folder and its report; in every run huvm's
counters against UVM's residency (held_bytes per GPU pair and harvested_bytes equal the 2 MiB blocks UVM shows
on peers); stock evicts to the host only, the huvm presets to peers (and less to the host than stock);
under huvm the lenders never lose their own data (a guest chunk on the rising lender's GPU goes back to the
host when its memory rises); every tenant issued the accesses its trace implies; no UVM assert or kernel
report in the log; the huvm events every run recorded (the example's ``[record] events``, through the tracer of
``huvmctl trace record``: ``data/events/RUN.parquet``) equal its counters. Printed as ``scenario
experiment-emulated: passed|failed`` at the end of the session.

Also here: UVM's own fault/migration path as kprobe events (``uvm_fault``, ``uvm_make_resident``), recorded
alongside a small experiment and by ``huvmctl trace record``'s library; huvm-top live on this node (textual's
headless pilot, the kernel source and bcc) while an experiment runs in another process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import sglib

EXAMPLE = Path(sglib.__file__).resolve().parents[3] / "pyctl" / "huvm" / "examples" / "consolidation-emulated.toml"
MIB = sglib.MIB


def _metric(run: Any, scope: str, gpu: int, metric: str, peer: int = -1) -> int:
    return sum(c.value for c in run.counters if c.scope == scope and c.gpu == gpu and c.metric == metric
               and (scope != "pair" or c.peer == peer))


@pytest.mark.scenario("experiment-emulated")
@pytest.mark.timeout(1200)
def test_consolidation_emulated_example(tmp_path: Path) -> None:
    from huvmlab import experiment
    from huvmlab.experiment.emulated import residency_check
    from huvmlab.experiment.recording import counters_vs_events

    spec = experiment.load(EXAMPLE)
    em = spec.emulated
    assert spec.node_kind == "emulated" and em is not None
    assert sglib.FB_MIB in (0, em.fb_mib), \
        f"the example needs {em.fb_mib} MiB framebuffers; the test bed loaded {sglib.FB_MIB} (VM_FB_MIB)"
    assert sglib.GPUS_EXPECTED == 0 or sglib.GPUS_EXPECTED >= em.gpus, \
        f"the example needs {em.gpus} GPUs; the test bed has {sglib.GPUS_EXPECTED} (VM_GPUS)"
    out = Path(sglib.OUT) / "experiment-emulated" if sglib.OUT and os.path.isdir(sglib.OUT) else tmp_path / "out"
    with sglib.kmsg_window() as kmsg:
        with sglib.timed() as took:
            res, files = experiment.run_to(spec, out)
        bad = sglib.bad_lines(kmsg.read())
    for row in experiment.policy_rows(res):
        print(f"experiment: {row.policy}: runtime {row.runtime_s:.2f} s, evict->peer {row.evict_to_peer}, "
              f"evict->host {row.evict_to_host}, fetch<-peer {row.fetch_from_peer}, NVLink {row.nvlink_bytes >> 20} "
              f"MiB, PCIe {row.pcie_bytes >> 20} MiB")
    for note in res.notes:
        print(f"experiment: note: {note}")
    sglib.perf("experiment_emulated_wall", took[0], "s", runs=len(res.runs))
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports during the experiment: " + " | ".join(bad[:6])
    import huvm

    with huvm.open(backend="kernel", device="/dev/nvidia-uvm") as node:
        assert node.get_policy().preset_name == "stock", "the experiment did not put the preset back to stock"

    # the output folder: the same files as on the simulated node, and the report says how it was scaled
    report = (out / "report.md").read_text()
    for name in ("report.md", "summary.json", "experiment.toml", "data/results.parquet", "data/tenants.parquet",
                 "data/counters.parquet", "data/traffic.parquet", "data/samples.parquet", "plots/runtime.png"):
        assert (out / name).is_file(), f"no {name} in {out}"
    assert "scaled by 1/128" in report and "scaled by 1/16" in report and "software GPUs" in report
    assert [r.key.run_id for r in res.runs] == ["stock#0", "huvm-atc22#0", "huvm#0"]

    by_policy = {r.key.policy: r for r in res.runs}
    for r in res.runs:
        assert r.node["kind"] == "emulated" and r.node["scale"] == em.scale and r.node["gpus"] == em.gpus
        assert "huvm" in r.node["module"], r.node
        # huvm's counters against UVM's residency (the census of every tenant's blocks)
        mismatch = residency_check(r, em.gpus)
        assert not mismatch, "; ".join(mismatch)
        # the pair counters add up to the per-GPU ones
        for g in range(em.gpus):
            assert sum(_metric(r, "pair", g, "evict_chunks", h) for h in range(em.gpus) if h != g) \
                == _metric(r, "gpu", g, "evict_to_peer"), f"{r.key.run_id}: GPU{g} pair evictions"
        # every tenant issued the SM accesses its trace implies
        for t in r.tenants:
            plan = _plan(spec, t.tenant)
            assert plan is not None, t.tenant
            pages = int(plan.run_pages.sum())
            assert t.values["done"] == 1, f"{r.key.run_id}: {t.tenant} did not finish"
            if t.foreground:
                want = next(s.steps for s in spec.tenants if s.name == t.tenant)
                assert t.values["steps_done"] == want and t.values["page_accesses"] == want * pages, \
                    f"{r.key.run_id}: {t.tenant}: {t.values['steps_done']} steps, {t.values['page_accesses']} accesses"
            else:
                assert t.values["page_accesses"] >= t.values["steps_done"] * pages
            assert t.runtime_ns > 0

    stock, atc, huvm = by_policy["stock"], by_policy["huvm-atc22"], by_policy["huvm"]
    harvester = {r.key.policy: next(t for t in r.tenants if t.gpu == 0) for r in res.runs}
    # stock: the harvester's overflow goes to the host only, and stays there
    assert all(_metric(stock, "gpu", g, "evict_to_peer") == 0 for g in range(em.gpus))
    assert _metric(stock, "gpu", 0, "evict_to_host") > 0, "stock evicted nothing: the harvester is not oversubscribed"
    assert harvester["stock"].values["peer_chunks"] == 0 and harvester["stock"].values["host_chunks"] > 0
    # the huvm presets: evictions land on the lenders; the rising lender gives memory back
    for r in (atc, huvm):
        assert _metric(r, "gpu", 0, "evict_to_peer") > 0, f"{r.key.run_id}: no eviction to a peer"
        assert harvester[r.key.policy].values["peer_chunks"] > 0 or _metric(r, "gpu", 0, "fetch_from_peer") > 0
    assert _metric(huvm, "gpu", 0, "evict_to_host") < _metric(stock, "gpu", 0, "evict_to_host")
    # under huvm, lending never costs the lenders their own data: whatever guests GPU2 held when its memory rose
    # went (back) to the host, none of the lenders' blocks left their GPU (huvm-atc22, the prototype's policy,
    # makes no such promise)
    for t in huvm.tenants:
        if t.gpu != 0:
            assert t.values["peer_chunks"] == 0 and t.values["host_chunks"] == 0, \
                f"huvm: lender {t.tenant} lost blocks: {t.values['peer_chunks']} on peers, " \
                f"{t.values['host_chunks']} on the host"
            evicted = _metric(huvm, "gpu", t.gpu, "evict_to_peer") + _metric(huvm, "gpu", t.gpu, "evict_to_host")
            assert evicted == 0, f"huvm: GPU{t.gpu} evicted {evicted} chunks of its own tenant's data"
    print("experiment: give-backs of the rising lender (GPU2): "
          + ", ".join(f"{r.key.policy} {_metric(r, 'gpu', 2, 'giveback')}" for r in res.runs))

    # the recorded trace events ([record] events: the tracer of huvmctl trace record on the module's tracepoints,
    # in this guest): one event table per run, nothing dropped, and the counters equal the events
    from huvmlab.traces.events import read_events

    assert spec.record_events == ("evict", "preevict", "fetch", "giveback", "prefetch")
    for r in res.runs:
        assert r.events is not None and r.events.window_ns is not None, f"{r.key.run_id}: no recorded events"
        f = read_events(out / "data" / "events" / f"{r.key.run_id}.parquet")
        assert f.lost == 0 and f.table.num_rows == len(r.events.rows), f"{r.key.run_id}: {f.lost} records lost"
        assert {k: v for k, v in f.counts.items() if v} == f.per_event(), f"{r.key.run_id}: {f.counts}"
        assert "tracepoints huvm:*" in f.source
        lines = counters_vs_events(r)
        assert not lines, "; ".join(lines)
        print(f"experiment: {r.key.run_id}: recorded {f.per_event()}")
    ev_huvm = read_events(out / "data" / "events" / "huvm#0.parquet").per_event()
    assert ev_huvm.get("evict", 0) > 0 and ev_huvm.get("fetch", 0) > 0, ev_huvm
    assert "counters vs events: every run's counters equal its recorded events" in report


_PLANS: dict[str, Any] = {}


def _plan(spec: Any, tenant: str) -> Any:
    """The tenant's replay plan as the executor builds it (pages per trace pass)."""
    if tenant not in _PLANS:
        from huvmlab.experiment.emulated import EmulatedExecutor

        ex = EmulatedExecutor(spec)
        for t in spec.tenants:
            _PLANS[t.name] = ex.plan_of(t)
    return _PLANS[tenant]


# ---- the replay's other paths on the real module: CPU phases, frees, static footprints -----------------------

REPLAY_FILE = """[experiment]
name = "replay-paths"
policies = ["stock"]
ideal = false

[node]
kind = "emulated"
preset = "aws-p3.8xlarge"
gpus = 2
fb_mib = {fb_mib}
scale = "1/128"
time_scale = "1/16"

[[tenant]]
name = "mixed"
gpu = 0
trace = "mixed.trace"
steps = 2

[[tenant]]
name = "pinned"
gpu = 1
static = "4GiB"
"""


def _mixed_trace(path: Path) -> None:
    """A (512 MiB of trace, 4 MiB here) written by the GPU, read by the CPU (phase cpu.load), read by the GPU
    again; B (256 MiB, 2 MiB here) allocated, written and freed with empty_cache; A read once more."""
    from huvmlab.traces.builder import Builder
    from huvmlab.traces.schema import MODE_READ, MODE_WRITE_NEW, write_tables

    b = Builder()
    a = b.storage(512 * MIB, "param", "float32", "A", before_op=-1)
    b.op("init", "fwd", fixed_ns=1_000_000)
    b.access_all(a, MODE_WRITE_NEW)
    b.op("load", "cpu.load", fixed_ns=1_000_000)
    b.access_all(a, MODE_READ)
    b.op("use", "fwd", fixed_ns=1_000_000)
    b.access_all(a, MODE_READ)
    tmp = b.storage(256 * MIB, "other", "float32", "B")
    b.op("scratch", "fwd", fixed_ns=1_000_000)
    b.access_all(tmp, MODE_WRITE_NEW)
    b.free(tmp)
    b.empty_cache()
    b.op("use-again", "fwd", fixed_ns=1_000_000)
    b.access_all(a, MODE_READ)
    write_tables(b.tables({"kind": "test", "model": "mixed", "name": "mixed"}), path)


@pytest.mark.scenario("experiment-replay-paths")
@pytest.mark.timeout(600)
def test_replay_paths_on_the_module(tmp_path: Path) -> None:
    from huvmlab import experiment
    from huvmlab.experiment.emulated import EmulatedExecutor, residency_check

    _mixed_trace(tmp_path / "mixed.trace")
    exp = tmp_path / "replay.toml"
    exp.write_text(REPLAY_FILE.format(fb_mib=sglib.FB_MIB or 128))
    spec = experiment.load(exp)
    plan = EmulatedExecutor(spec).plan_of(spec.tenants[0])
    assert plan is not None and plan.cpu_op.tolist() == [False, True, False, False, False]
    assert plan.op_frees(3), "the trace frees nothing after its scratch op"
    with sglib.kmsg_window() as kmsg:
        res = experiment.run(spec)
        bad = sglib.bad_lines(kmsg.read())
    assert not bad, f"{len(bad)} kernel log lines of asserts/reports: " + " | ".join(bad[:6])
    (run,) = res.runs
    mixed = next(t for t in run.tenants if t.tenant == "mixed")
    pinned = next(t for t in run.tenants if t.tenant == "pinned")
    v = mixed.values
    a_pages, b_pages = 4 * MIB // 4096, 2 * MIB // 4096
    print(f"replay-paths: mixed {v}; pinned {pinned.values}")
    assert v["steps_done"] == 2 and v["ops_done"] == 10 and v["cpu_ops"] == 2
    assert v["page_accesses"] == 2 * (3 * a_pages + b_pages), "the GPU ops' pages, the CPU op's not"
    # the CPU phase took A to the CPU, so the GPU faulted A in again after it (measured: every page of A three
    # times, B's twice: 4096); without the CPU's touches it would be A once and B twice (2048)
    assert v["faults"] >= 2 * a_pages + 2 * b_pages, f"{v['faults']} faulting accesses: the CPU phase moved nothing"
    assert v["free_ns"] > 0
    # at the end A is on GPU0 (its last op read it there) and the freed scratch block holds nothing
    assert v["blocks_on_gpu0"] == 2 and v["blocks_on_cpu"] == 0 and v["blocks_split"] == 0, v
    assert residency_check(run, 2) == []
    # the static footprint: 4 GiB of trace scale are 32 MiB pinned on GPU1 (a foreign allocation) for the run
    assert pinned.values["done"] == 1 and pinned.values["page_accesses"] == 0
    own1 = max(s.own_bytes for s in run.samples if s.gpu == 1)
    assert own1 >= 32 * MIB, f"GPU1 never held the 32 MiB static footprint: {own1 >> 20} MiB at most"


# ---- UVM's own fault/migration path: kprobe events (huvmctl trace record --events uvm_fault,...) --------------

KPROBE_FILE = """[experiment]
name = "uvm-kprobes"
policies = ["stock"]
ideal = false

[node]
kind = "emulated"
preset = "aws-p3.8xlarge"
gpus = 1
fb_mib = {fb_mib}
scale = "1/128"
time_scale = "1/16"

[[tenant]]
name = "mixed"
gpu = 0
trace = "mixed.trace"
steps = 1

[record]
events = ["uvm_fault", "uvm_make_resident"]
"""


@pytest.mark.scenario("experiment-uvm-kprobes")
@pytest.mark.timeout(600)
def test_uvm_kprobe_events(tmp_path: Path) -> None:
    """The mixed trace (GPU writes A, the CPU reads it, the GPU reads it again, ...) on one GPU under stock,
    recorded twice: by the experiment's [record] (per run) and by huvmlab.tracerec.record around the whole
    experiment (what ``huvmctl trace record --events uvm_fault,uvm_make_resident`` runs). UVM serviced faults of
    the GPU (nvidia-uvm's id 1) and of the CPU (id 0) and made A's pages resident on both, with causes of
    uvm_make_resident_cause_t."""
    from huvm import bpf
    from huvmlab import experiment, tracerec
    from huvmlab.traces.events import read_events

    _mixed_trace(tmp_path / "mixed.trace")
    exp = tmp_path / "kprobes.toml"
    exp.write_text(KPROBE_FILE.format(fb_mib=sglib.FB_MIB or 128))
    spec = experiment.load(exp)
    assert spec.record_events == ("uvm_fault", "uvm_make_resident")
    assert bpf.kernel_symbols(list(bpf.UVM_EVENTS.values())) == set(bpf.UVM_EVENTS.values())
    out = tmp_path / "all.parquet"
    rec = tracerec.record(out, mode="tracepoint", events=spec.record_events, during=lambda: experiment.run(spec))
    res = rec.value
    assert res is not None
    (run,) = res.runs
    f = read_events(out)
    assert f.lost == 0 and "kprobes uvm_va_block_service_locked, uvm_va_block_make_resident_copy" in f.source
    rows = f.table.to_pylist()
    assert run.events is not None and run.events.lost == 0
    per_run = run.events.rows
    print(f"uvm-kprobes: whole recording {f.per_event()}, the run's {len(per_run)} rows; "
          f"mixed {next(t for t in run.tenants if t.tenant == 'mixed').values}")
    # the run's events are a part of the whole recording (same tracepoints, a narrower window)
    assert 0 < len(per_run) <= len(rows)
    a_bytes = 4 * MIB
    for name, got in (("whole", rows), ("run", per_run)):
        faults = [r for r in got if r["event"] == "uvm_fault"]
        moves = [r for r in got if r["event"] == "uvm_make_resident"]
        assert {r["uvm_gpu"] for r in faults} >= {0, 1}, f"{name}: faults of {sorted({r['uvm_gpu'] for r in faults})}"
        assert all(r["gpu"] == -1 and r["peer"] == -1 and r["uvm_peer"] is None for r in got), name
        assert all(0 <= r["reason"] < len(bpf.UVM_CAUSES) and r["reason_name"] == bpf.UVM_CAUSES[r["reason"]]
                   for r in moves), f"{name}: causes {sorted({r['reason'] for r in moves})}"
        assert all(0 < r["bytes"] <= 2 * MIB and r["bytes"] % 4096 == 0 for r in moves), name
        to_gpu = sum(r["bytes"] for r in moves if r["uvm_gpu"] == 1)
        to_cpu = sum(r["bytes"] for r in moves if r["uvm_gpu"] == 0)
        # A (4 MiB) went to the GPU twice (written, read after the CPU phase) and to the CPU once
        assert to_gpu >= 2 * a_bytes and to_cpu >= a_bytes, f"{name}: to GPU {to_gpu >> 10} KiB, CPU {to_cpu >> 10} KiB"
        assert any(r["reason_name"] == "replayable_fault" and r["uvm_gpu"] == 1 for r in moves), name
    # the CPU faults are the tenant's own (its process), the GPU's UVM's fault-servicing thread's
    mixed_pids = {r["pid"] for r in per_run if r["event"] == "uvm_fault" and r["uvm_gpu"] == 0}
    assert mixed_pids and all(p != os.getpid() for p in mixed_pids)


# ---- huvm-top live on the emulated node -----------------------------------------------------------------------

TOP_FILE = """[experiment]
name = "huvm-top-live"
policies = ["huvm"]
ideal = false

[node]
kind = "emulated"
preset = "aws-p3.8xlarge"
gpus = 2
fb_mib = {fb_mib}
scale = "1/128"
time_scale = "1/16"
gpu_reserved_bytes = "32MiB"

[[tenant]]
name = "harvester"
gpu = 0
trace = "bundled:demo-harvester"
steps = 1

[[tenant]]
name = "idle"
gpu = 1
trace = "bundled:lender-idle"
steps = 0
"""


@pytest.mark.scenario("experiment-huvm-top")
@pytest.mark.timeout(900)
def test_huvm_top_live(tmp_path: Path) -> None:
    """huvm-top as on a real server (the kernel source on /dev/nvidia-uvm, bcc on the module's tracepoints),
    driven by textual's headless pilot. Once it is attached and tracing, another process runs an emulated
    experiment whose harvester evicts to the idle GPU: the GPU table shows faults and evictions per second,
    the event log fills with huvm's events, the process table shows the VA spaces."""
    import asyncio
    import subprocess
    import sys
    import time

    from huvm import softgpu, uvm
    from huvm_top.app import HuvmTop
    from huvm_top.sources.bcc import BccSource
    from huvm_top.sources.live import LiveSource
    from textual.widgets import DataTable

    exp = tmp_path / "top.toml"
    exp.write_text(TOP_FILE.format(fb_mib=sglib.FB_MIB or 128))
    result = tmp_path / "result.json"
    seen: dict[str, float] = {}
    state: dict[str, Any] = {"lines": 0, "processes": 0, "note": "", "events": {}}
    log_path = tmp_path / "workload.log"
    workload: Any = None
    # the GPUs registered first (a UVM file of this test's), so huvm's GET_INFO lists them when huvm-top attaches
    sg = softgpu.SoftGpu.open()
    keeper = uvm.Uvm.open()
    try:
        for g in sg.info().gpus[:2]:
            keeper.register_gpu(g, sg.client)

        async def watch() -> None:
            nonlocal workload
            app = HuvmTop(LiveSource("kernel", "/dev/nvidia-uvm"), BccSource("tracepoint"), interval=0.5)
            async with app.run_test(size=(200, 60)) as pilot:
                # attached, and bcc compiled and attached (the event log's note names the source)
                end = time.monotonic() + 300
                while not str(app.event_log.border_subtitle or "").startswith(("bcc", "tracing")):
                    assert time.monotonic() < end, "huvm-top did not start tracing in 300 s"
                    await pilot.pause(0.5)
                state["note"] = str(app.event_log.border_subtitle)
                assert state["note"].startswith("bcc"), f"huvm-top: {state['note']}"
                with log_path.open("w") as log:
                    workload = subprocess.Popen([sys.executable, "-m", "huvmlab.experiment.emulated", "guest", str(exp),
                                                 "--result", str(result)], stdout=log, stderr=subprocess.STDOUT,
                                                cwd=str(EXAMPLE.parents[3]))
                end = time.monotonic() + 600
                while time.monotonic() < end:
                    await pilot.pause(0.25)
                    rates = app.rates
                    if rates is not None and not rates.first:
                        for g, vals in enumerate(rates.gpus):
                            for k in ("faults", "evict_to_peer"):
                                if vals.get(k, 0) > seen.get(f"{k}{g}", 0):
                                    seen[f"{k}{g}"] = vals[k]
                                    # the table shows it: the cell of that GPU and counter is not 0
                                    table = app.screen_stack[0].query_one("#gpus", DataTable)
                                    seen[f"cell:{k}"] = float(str(table.get_cell(f"gpu{g}", k)) != "0")
                    state["processes"] = max(state["processes"], app.processes.row_count)
                    state["lines"] = max(state["lines"], app.event_log.lines)
                    done = workload.poll() is not None
                    if done or (any(k.startswith("evict_to_peer") for k in seen) and state["lines"] > 0
                                and state["processes"] > 0):
                        break
                state["events"] = app.events.counts() if app.events is not None else {}

        asyncio.run(watch())
    finally:
        if workload is not None and workload.poll() is None:
            workload.wait(timeout=600)
        keeper.close()
        sg.close()
    print(f"huvm-top: {state}; peak rates {seen}")
    assert workload is not None and workload.returncode == 0, log_path.read_text()[-2000:]
    # huvm numbers GPUs by its slots: the harvester's GPU is one of them
    assert any(k.startswith("faults") for k in seen) and seen.get("cell:faults") == 1.0, seen
    assert any(k.startswith("evict_to_peer") for k in seen) and seen.get("cell:evict_to_peer") == 1.0, seen
    assert state["lines"] > 0 and state["events"].get("evict", 0) > 0, f"huvm-top's event log: {state}"
    assert state["processes"] > 0, "huvm-top's process table stayed empty"
