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
report in the log. With recorded trace events (``huvmctl trace record`` alongside the experiment:
``data/events.parquet``), the counters against the events too. Printed as ``scenario experiment-emulated:
passed|failed`` at the end of the session.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import sglib

EXAMPLE = Path(sglib.__file__).resolve().parents[3] / "pyctl" / "huvm" / "examples" / "consolidation-emulated.toml"
KMSG_BAD = ("Assert failed", "Call Trace", "WARNING:", "BUG:", "Oops", "circular locking", "recursive locking")
MIB = sglib.MIB


def _kmsg_open() -> int:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(fd, 0, os.SEEK_END)
    return fd


def _kmsg_bad(fd: int) -> list[str]:
    out: list[str] = []
    while True:
        try:
            rec = os.read(fd, 8192)
        except BlockingIOError:
            return [ln for ln in out if any(p in ln for p in KMSG_BAD)]
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue
            raise
        text = rec.decode(errors="replace")
        out.append(text.split(";", 1)[1].rstrip("\n") if ";" in text else text.rstrip("\n"))


def _metric(run: Any, scope: str, gpu: int, metric: str, peer: int = -1) -> int:
    return sum(c.value for c in run.counters if c.scope == scope and c.gpu == gpu and c.metric == metric
               and (scope != "pair" or c.peer == peer))


def _events_by_run(path: Path) -> dict[str, dict[tuple[str, int, int], int]]:
    """data/events.parquet (the trace schema's event table, when events were recorded) counted per run, event
    name, GPU and peer (-1: the host)."""
    import pyarrow.parquet as pq

    out: dict[str, dict[tuple[str, int, int], int]] = {}
    for row in pq.read_table(path).to_pylist():
        per = out.setdefault(str(row["run_id"]), {})
        key = (str(row["event"]), int(row["gpu"]), int(row.get("peer", -1) if row.get("peer") is not None else -1))
        per[key] = per.get(key, 0) + 1
    return out


@pytest.mark.scenario("experiment-emulated")
@pytest.mark.timeout(1200)
def test_consolidation_emulated_example(tmp_path: Path) -> None:
    from huvm import experiment
    from huvm.experiment.emulated import counters_vs_events, residency_check

    spec = experiment.load(EXAMPLE)
    em = spec.emulated
    assert spec.node_kind == "emulated" and em is not None
    assert sglib.FB_MIB in (0, em.fb_mib), \
        f"the example needs {em.fb_mib} MiB framebuffers; the test bed loaded {sglib.FB_MIB} (VM_FB_MIB)"
    assert sglib.GPUS_EXPECTED == 0 or sglib.GPUS_EXPECTED >= em.gpus, \
        f"the example needs {em.gpus} GPUs; the test bed has {sglib.GPUS_EXPECTED} (VM_GPUS)"
    out = Path(sglib.OUT) / "experiment-emulated" if sglib.OUT and os.path.isdir(sglib.OUT) else tmp_path / "out"
    kmsg = _kmsg_open()
    try:
        with sglib.timed() as took:
            res, files = experiment.run_to(spec, out)
        bad = _kmsg_bad(kmsg)
    finally:
        os.close(kmsg)
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

    # the recorded trace events (huvmctl trace record, issue 13 item 2), when the experiment recorded them
    events = out / "data" / "events.parquet"
    if events.is_file():
        counted = _events_by_run(events)
        for r in res.runs:
            lines = counters_vs_events(r, counted.get(r.key.run_id, {}))
            assert not lines, "; ".join(lines)
        print(f"experiment: counters equal the recorded events of {len(counted)} runs")
    else:
        print("experiment: no recorded events (data/events.parquet): counters_vs_events not run")


_PLANS: dict[str, Any] = {}


def _plan(spec: Any, tenant: str) -> Any:
    """The tenant's replay plan as the executor builds it (pages per trace pass)."""
    if tenant not in _PLANS:
        from huvm.experiment.emulated import EmulatedExecutor

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
    from huvm.traces.builder import Builder
    from huvm.traces.schema import MODE_READ, MODE_WRITE_NEW, write_tables

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
    from huvm import experiment
    from huvm.experiment.emulated import EmulatedExecutor, residency_check

    _mixed_trace(tmp_path / "mixed.trace")
    exp = tmp_path / "replay.toml"
    exp.write_text(REPLAY_FILE.format(fb_mib=sglib.FB_MIB or 128))
    spec = experiment.load(exp)
    plan = EmulatedExecutor(spec).plan_of(spec.tenants[0])
    assert plan is not None and plan.cpu_op.tolist() == [False, True, False, False, False]
    assert plan.op_frees(3), "the trace frees nothing after its scratch op"
    kmsg = _kmsg_open()
    try:
        res = experiment.run(spec)
        bad = _kmsg_bad(kmsg)
    finally:
        os.close(kmsg)
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
